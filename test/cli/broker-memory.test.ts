import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server, type Socket } from "node:net";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { brokerMemory, nextMemory } from "../../src/cli/broker-memory.js";
import { cleanEnv, eventually, runCli, tempDir } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";

// A broker member that lost its power answers nothing: a connect that picks it waits out its
// whole timeout (5 s) before trying the next. The CLI remembers such a member for 30 s and tries
// the others first (cli/broker-memory.ts). The dead member here is a port that accepts and never
// speaks, as a relay in front of a powered-off machine does; the other is a real nats-server.

const tmp = tempDir("broker-memory");
const env = cleanEnv(join(tmp.path, "config"));
let nats: NatsHandle;
let silent: Server;
const held: Socket[] = [];
let dialled = 0;

before(async () => {
  nats = await startNats();
  silent = createServer((s) => {
    dialled++;
    held.push(s);
    s.on("error", () => undefined);
  });
  await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
});

after(async () => {
  for (const s of held) s.destroy();
  await new Promise((r) => silent?.close(r));
  await nats?.stop();
  tmp.remove();
});

test("the memory: a member that failed is kept 30 s, then forgotten; one that answered is dropped at once", () => {
  const t = 1_000_000;
  const saved = new Map([["a:4222", t - 40_000], ["b:4222", t - 10_000]]);
  assert.deepEqual([...nextMemory(saved, ["c:4222"], "d:4222", t)], [["b:4222", t - 10_000], ["c:4222", t]], "a is past 30 s");
  assert.deepEqual([...nextMemory(saved, [], "b:4222", t)], [], "b answered now");
  assert.deepEqual([...nextMemory(new Map([["x:1", t + 60_000]]), [], undefined, t)], [], "a time in the future (a clock set back) is not trusted");
  assert.equal(brokerMemory({ ...env, MUSTER_BROKER_CACHE: "off" }), undefined);
});

test("a member that did not answer a command's connect is tried last by the commands after it: none of them waits on it again", async () => {
  const silentUrl = `nats://127.0.0.1:${(silent.address() as { port: number }).port}`;
  const ping = () => runCli(["ping", "--dt", "0.2", "--broker", `${silentUrl},${nats.url}`], { env, timeoutMs: 60_000 });
  // the members are tried in random order: until one command has picked the silent member
  await eventually(async () => {
    const r = await ping();
    assert.doesNotMatch(r.stderr, /cannot reach the NATS broker/, r.stderr);
    return dialled > 0 ? true : undefined;
  }, 120_000, "a command that picked the silent member first");
  const file = join(env.XDG_CACHE_HOME!, "muster", "brokers-unanswered.json");
  assert.deepEqual(Object.keys(JSON.parse(readFileSync(file, "utf8")) as object), [`127.0.0.1:${(silent.address() as { port: number }).port}`]);
  // six more, within its 30 s: by chance alone each would pick it first one time in two
  const before = dialled;
  for (let i = 0; i < 6; i++) {
    const r = await ping();
    assert.doesNotMatch(r.stderr, /cannot reach the NATS broker/, r.stderr);
  }
  assert.equal(dialled - before, 0, "the silent member was not dialled again");
});
