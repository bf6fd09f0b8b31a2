import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { coreAgentFactories } from "../../src/agents/builtin.js";
import { startEmulator, type RunningEmulator } from "../../src/emulator/emulator.js";
import { SimulatedPuppetFleet } from "../../src/emulator/simulated-puppet.js";
import { labRole, roleClasses, roleFacts } from "../../src/lab/roles.js";
import { settleLookups } from "../../src/lab/settle.js";
import { silentLogger } from "../../src/log.js";
import { newRecord, type NodeRecord } from "../../src/protocol/provision-record.js";
import { RegistryConfigSchema } from "../../src/registry/config.js";
import { startRegistry } from "../../src/registry/daemon.js";
import { connectNats } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";

// settle.ts against a real nats-server, the registry daemon and an emulated lab of four whose
// puppet agent simulates runs: the web node and the monitor, which looked up nodes before those
// were provisioned, run Puppet once more, and only once the nodes they look up are in the
// registry with their classes; the database master, which looks up nobody, does not run.

const nodes = ["node01.eu.lab", "node02.us.lab", "node03.eu.lab", "node04.us.lab"].map((identity, i) => ({ identity, role: labRole(i) }));
let dir: string;
let nats: NatsHandle;
let nc: NatsConnection;
let registry: Awaited<ReturnType<typeof startRegistry>>;
const sim = new SimulatedPuppetFleet({ runMs: () => 50 });
const emus: RunningEmulator[] = [];

/** Emulated lab nodes as provisioned ones: their role's classes and facts, a puppet agent, registering at once. */
async function boot(ids: string[]): Promise<void> {
  const fleet = nodes.filter((n) => ids.includes(n.identity)).map((n) => ({ identity: n.identity, facts: roleFacts(n.role), classes: roleClasses(n.role), agents: ["puppet"] }));
  emus.push(await startEmulator({ nc, nodes: fleet, collective: "muster", log: silentLogger, factories: { ...coreAgentFactories, puppet: sim.factory }, registration: { interval: 1, splay: false } }));
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "muster-settle-"));
  process.env.MUSTER_CONFIG_DIR = join(dir, "keys");
  nats = await startNats({ jetstream: true });
  nc = await connectNats(nats.url);
  registry = await startRegistry(RegistryConfigSchema.parse({ log: { level: "silent" }, collectives: ["muster"] }), silentLogger, { nc });
});

after(async () => {
  sim.stop();
  for (const e of emus) await e.stop();
  await registry?.stop();
  await nc?.drain().catch(() => undefined);
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test("the nodes that looked up too early run Puppet once more, after what they look up is registered; the others do not", async () => {
  // provisioned together: every production run began before any node was done
  const rec = (id: string, run: number, done: number): NodeRecord => ({ ...newRecord(id), status: "done", finishedAt: done, stageTimes: { production: { start: run, end: run + 5000 } } });
  const t = Date.now();
  const recs = nodes.map((n, i) => rec(n.identity, t + i * 1000, t + 20_000 + i * 1000));
  await boot(["node02.us.lab", "node03.eu.lab", "node04.us.lab"]);
  const said: string[] = [];
  // the database master registers only later: nothing runs before it is in the registry
  let masterRegistered = Infinity;
  registry.store.on("update", (r) => {
    if (r.identity === "node01.eu.lab" && r.classes.includes("mysql::master")) masterRegistered = Math.min(masterRegistered, performance.now());
  });
  const settling = settleLookups({ broker: nats.url, collective: "muster", nodes }, recs, (l) => said.push(l));
  await boot(["node01.eu.lab"]);
  const out = await settling;
  assert.ok(sim.runs.every((r) => r.startedAt > masterRegistered), "every run began after the master was registered");
  assert.deepEqual(out, { ran: ["node02.us.lab", "node04.us.lab"], failed: [] });
  assert.deepEqual(sim.runs.map((r) => r.identity).sort(), ["node02.us.lab", "node04.us.lab"], "one run each, and none on the master or on globex's web node (no master to find)");
  assert.deepEqual(said, ["node02.us.lab runs Puppet again: it looked up node01.eu.lab before it was provisioned", "node04.us.lab runs Puppet again: it looked up node01.eu.lab, node02.us.lab, node03.eu.lab before they were provisioned"]);
  // nothing stale: nothing runs, no connection is made
  assert.deepEqual(await settleLookups({ broker: "nats://127.0.0.1:9", collective: "muster", nodes }, recs.map((r) => ({ ...r, stageTimes: { production: { start: t + 60_000 } } }))), { ran: [], failed: [] });
});
