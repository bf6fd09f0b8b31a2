import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { bucketsOn } from "../../src/broker/bucket.js";
import { coreAgentFactories } from "../../src/agents/builtin.js";
import { startEmulator } from "../../src/emulator/emulator.js";
import { SimulatedPuppetFleet } from "../../src/emulator/simulated-puppet.js";
import { AliveStore, PuppetRunStore } from "../../src/health/stores.js";
import { silentLogger } from "../../src/log.js";
import { bucketKey, DEFAULT_ALIVE_BUCKET } from "../../src/protocol/buckets.js";
import { heartbeatSubject } from "../../src/protocol/heartbeat.js";
import { startNats, type NatsHandle } from "../support/index.js";
import { connectNats, eventually } from "../support/collective.js";

// Nodes' heartbeats and Puppet runs through the real node pipeline (NodeHost, server/heartbeat.ts)
// into real KV buckets, read back by their one reader (src/health/stores.ts): what a node
// sends, a clean stop, hostile values, forgetting.

let nats: NatsHandle;
let nc: NatsConnection;
let alive: AliveStore;
let runs: PuppetRunStore;

before(async () => {
  nats = await startNats({ jetstream: true });
  nc = await connectNats(nats.url);
  alive = (await AliveStore.open(bucketsOn(nc), { create: true }))!;
  runs = (await PuppetRunStore.open(bucketsOn(nc), { create: true }))!;
});

after(async () => {
  await nc?.drain().catch(() => undefined);
  await nats?.stop();
});

test("a node's heartbeats carry its Puppet's state, each run is kept once, and a clean stop says so", async () => {
  const started = Date.now();
  const sim = new SimulatedPuppetFleet({ runMs: () => 50, history: true, disabled: (id) => (id === "b.test" ? "maintenance by jane" : undefined) });
  const enc = await connectNats(nats.url);
  const emu = await startEmulator({ nc: enc, nodes: ["a.test", "b.test"].map((identity) => ({ identity, facts: {}, classes: [], agents: ["puppet"] })), collective: "muster", log: silentLogger, heartbeat: 1, factories: { ...coreAgentFactories, puppet: sim.factory } });
  try {
    const beats = await eventually(async () => {
      const m = await alive.latest();
      return m.size === 2 ? m : undefined;
    }, 10_000, "both heartbeats");
    const b = beats.get("b.test")!;
    assert.equal(b.heartbeat.state, "up");
    assert.equal(b.heartbeat.interval, 1);
    // stamped with the broker's clock: this machine's, so within this test's own span (1 s for rounding)
    assert.ok(b.at >= started - 1000 && b.at <= Date.now() + 1000, `stamped at ${b.at}, this test ran from ${started}`);
    assert.deepEqual([b.heartbeat.status.puppet?.enabled, b.heartbeat.status.puppet?.disable_message], [false, "maintenance by jane"]);
    assert.ok((b.heartbeat.status.puppet?.disabled_since as number) > 0);
    // each node's earlier run written once, however many heartbeats carried it
    await eventually(async () => ((await runs.latest()).size === 2 ? true : undefined), 10_000, "both runs");
    // heartbeats go on every second; the run is not written again
    const firstAt = b.at;
    await eventually(async () => (((await alive.latest()).get("a.test")?.at ?? 0) > firstAt ? true : undefined), 5000, "a later heartbeat");
    assert.equal((await runs.history("a.test")).length, 1, "the same run, written once");
  } finally {
    await emu.stop();
    await enc.drain().catch(() => undefined);
  }
  const last = await alive.latest();
  assert.deepEqual([...last.values()].map((x) => x.heartbeat.state), ["stopping", "stopping"], "a clean stop's last heartbeat");
});

test("a value that is not a heartbeat, or stored under another node's key, is skipped and counted; forget drops a node", async () => {
  const before = alive.invalid;
  nc.publish(heartbeatSubject("junk.test"), new TextEncoder().encode("{not json"));
  nc.publish(heartbeatSubject("mallory.test"), new TextEncoder().encode(JSON.stringify({ identity: "a.test", time: 1, interval: 10, version: "1", phase: "serving", state: "up", status: {} })));
  await nc.flush();
  await eventually(async () => ((await alive.bucket.keys()).includes(bucketKey("mallory.test")) ? true : undefined), 5000, "the forged values stored");
  const m = await alive.latest();
  assert.ok(!m.has("junk.test") && !m.has("mallory.test"));
  assert.equal(m.get("a.test")?.heartbeat.state, "stopping", "a.test's own value, not the forged one");
  assert.equal(alive.invalid - before, 2);
  const w = await alive.watch();
  const seen: string[] = [];
  let caughtUp!: () => void;
  const ready = new Promise<void>((r) => (caughtUp = r));
  const done = (async () => {
    for await (const c of w) {
      seen.push(c.type === "caught-up" ? "caught-up" : c.type === "probe" ? `probe ${c.observer}` : `${c.type} ${c.identity}`);
      if (c.type === "caught-up") caughtUp();
      if (c.type === "removed") break;
    }
  })();
  await ready; // the watch has seen a.test: its removal is news
  await alive.forget("a.test");
  await done;
  w.stop();
  assert.ok(seen.includes("caught-up") && seen.at(-1) === "removed a.test", seen.join(", "));
  assert.ok(!(await alive.latest()).has("a.test"));
  assert.equal((await bucketsOn(nc).bucketIfExists(DEFAULT_ALIVE_BUCKET))?.name, DEFAULT_ALIVE_BUCKET);
});
