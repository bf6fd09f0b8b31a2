import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { serverV8Flags, V8_PROFILES } from "../../src/server/v8-tuning.js";
import { cliPath, cleanEnv, tempDir } from "../support/collective.js";

// The V8 flags `muster server` starts with (src/server/v8-tuning.ts). What they save is measured
// in bench/daemon-rss.ts, never asserted here.

test("MUSTER_SERVER_V8: size by default, speed keeps V8's defaults, anything else is refused", () => {
  assert.deepEqual(serverV8Flags({}), V8_PROFILES.size);
  assert.ok(serverV8Flags({}).includes("--no-turbofan"));
  assert.deepEqual(serverV8Flags({ MUSTER_SERVER_V8: "size" }), V8_PROFILES.size);
  assert.deepEqual(serverV8Flags({ MUSTER_SERVER_V8: "speed" }), []);
  for (const bad of ["", "fast", "SIZE", "--no-turbofan", "toString", "__proto__"]) {
    assert.throws(() => serverV8Flags({ MUSTER_SERVER_V8: bad }), /is not a profile: use size .* or speed/, bad);
  }
});

test("muster server with a MUSTER_SERVER_V8 it does not know exits 64 before it connects, saying what to use", (t) => {
  const dir = tempDir("v8-tuning");
  t.after(() => dir.remove());
  const r = spawnSync(process.execPath, [cliPath, "server", "--broker", "nats://127.0.0.1:9"], { env: cleanEnv(dir.path, { MUSTER_SERVER_V8: "turbo" }), encoding: "utf8", timeout: 60_000 });
  assert.equal(r.status, 64, r.stderr);
  assert.match(r.stderr, /MUSTER_SERVER_V8="turbo" is not a profile: use size/);
  assert.doesNotMatch(r.stderr, /broker|NATS/i, "refused before it tried the broker");
});
