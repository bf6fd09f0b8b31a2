import { after, test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { healthMemory } from "../../src/cli/health-memory.js";
import type { Beat } from "../../src/health/stores.js";
import { tempDir } from "../support/collective.js";

// The CLI's memory of the last full heartbeat read (cli/health-memory.ts): what it keeps comes
// back checked as the store's heartbeats are; a garbled or hostile file is no memory, never a crash.

const tmp = tempDir("health-memory");
after(() => tmp.remove());

const beat = (identity: string, at: number): Beat => ({ at, heartbeat: { identity, time: at, interval: 10, version: "test", phase: "serving", state: "up", status: { puppet: { last_run: "ok" } } } });
const site = { servers: ["tls://127.0.0.1:4222"], collective: "muster" };

test("kept, then recalled: the same heartbeats and when they were read, in a file only its user may read", () => {
  const env = { XDG_CACHE_HOME: join(tmp.path, "a") };
  const m = healthMemory(site, env, () => 5000);
  assert.equal(m.recall(), undefined, "nothing kept yet");
  m.keep(new Map([["a.example.net", beat("a.example.net", 4000)], ["b.example.net", beat("b.example.net", 4500)]]));
  const back = healthMemory(site, env).recall();
  assert.equal(back?.at, 5000);
  assert.deepEqual([...back!.beats.entries()], [["a.example.net", beat("a.example.net", 4000)], ["b.example.net", beat("b.example.net", 4500)]]);
  const dir = join(tmp.path, "a", "muster", "health");
  const [file] = readdirSync(dir);
  assert.equal(statSync(join(dir, file!)).mode & 0o777, 0o600);
  // another site (other brokers, another collective) has its own
  assert.equal(healthMemory({ ...site, collective: "other" }, env).recall(), undefined);
  assert.equal(healthMemory({ ...site, servers: ["tls://127.0.0.2:4222"] }, env).recall(), undefined);
});

test("a garbled file, a heartbeat that does not parse, or one stored after the read: left out, never trusted", () => {
  const env = { XDG_CACHE_HOME: join(tmp.path, "b") };
  healthMemory(site, env, () => 5000).keep(new Map([["a.example.net", beat("a.example.net", 4000)]]));
  const dir = join(tmp.path, "b", "muster", "health");
  const file = join(dir, readdirSync(dir)[0]!);
  const good = JSON.parse(readFileSync(file, "utf8")) as { at: number; beats: Beat[] };
  writeFileSync(file, JSON.stringify({ at: 5000, beats: [...good.beats, { at: 4000, heartbeat: { identity: "bad.example.net", interval: "soon" } }, { at: 9000, heartbeat: beat("late.example.net", 9000).heartbeat }, null, 7] }));
  assert.deepEqual([...healthMemory(site, env).recall()!.beats.keys()], ["a.example.net"]);
  for (const garbage of ["", "{", "null", "[]", JSON.stringify({ at: "yesterday", beats: [] }), JSON.stringify({ at: 1, beats: {} })]) {
    writeFileSync(file, garbage);
    assert.equal(healthMemory(site, env).recall(), undefined, `recalled from ${JSON.stringify(garbage)}`);
  }
});

test("MUSTER_HEALTH_CACHE=off, or a cache directory others may write: nothing kept, nothing recalled", () => {
  const off = { XDG_CACHE_HOME: join(tmp.path, "c"), MUSTER_HEALTH_CACHE: "off" };
  healthMemory(site, off).keep(new Map([["a.example.net", beat("a.example.net", 1)]]));
  assert.equal(healthMemory(site, { XDG_CACHE_HOME: join(tmp.path, "c") }).recall(), undefined);
  const shared = { XDG_CACHE_HOME: join(tmp.path, "d") };
  healthMemory(site, shared).keep(new Map([["a.example.net", beat("a.example.net", 1)]]));
  chmodSync(join(tmp.path, "d", "muster", "health"), 0o777);
  assert.equal(healthMemory(site, shared).recall(), undefined, "a directory others may write is no cache");
});
