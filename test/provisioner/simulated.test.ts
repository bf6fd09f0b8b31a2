import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { MusterClient } from "../../src/client/client.js";
import { startEmulator } from "../../src/emulator/emulator.js";
import type { FleetNode } from "../../src/emulator/fleet.js";
import { SimulatedCA, simulatedFactories } from "../../src/emulator/simulated.js";
import { spawnMuster, isAlive, type MusterProcess } from "../../src/lab/processes.js";
import { silentLogger } from "../../src/log.js";
import { newRecord, type NodeRecord } from "../../src/protocol/provision-record.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { connectNats, runCli } from "../support/collective.js";
import { freePort, type NatsHandle } from "../support/index.js";
import { startSimulatedSite, writeSimulatedProvisionerConfig, type SimulatedSite } from "../support/provisioner.js";

// The provisioner's control plane against an emulated fleet whose agents simulate Puppet (fast, so
// these cover concurrency and operations; test/provisioner/e2e.test.ts covers real Puppet).

const N = 40;
let site: SimulatedSite;
let dir: string;
let nats: NatsHandle;
let nc: NatsConnection;
let client: MusterClient;
let store: ProvisionState;
const ca = new SimulatedCA();
const failing = new Set<string>();
/** Nodes whose next has_cert answer comes too late for the provisioner (a request lost in a failover). */
const stallOnce = new Set<string>();
const procs: MusterProcess[] = [];
let env: NodeJS.ProcessEnv;

const ids = Array.from({ length: N }, (_, i) => `sim${String(i).padStart(3, "0")}.test`);

before(async () => {
  const fleet: FleetNode[] = [
    ...ids.map((identity, i) => ({ identity, facts: { ipaddress: `127.2.0.${i + 1}`, country: i % 2 ? "de" : "us" }, classes: [], agents: ["provision"] })),
    { identity: "master-de.test", facts: { ipaddress: "127.3.0.1", country: "de" }, classes: [], agents: ["puppetca"] },
    { identity: "master-us.test", facts: { ipaddress: "127.3.0.2", country: "us" }, classes: [], agents: ["puppetca"] },
    { identity: "notifier.test", facts: {}, classes: [], agents: ["notify"] },
  ];
  site = await startSimulatedSite("simprov", fleet, { puppetRunMs: [20, 80], csrMs: 5, fail: (id) => failing.has(id) }, { ca });
  ({ dir, env, nats, nc, client, store } = site);
});

after(async () => {
  await Promise.all(procs.map((p) => p.stop("SIGKILL")));
  await site?.stop();
});

function config(name: string, extra: Record<string, unknown> = {}): string {
  return writeSimulatedProvisionerConfig(dir, name, { broker: nats.url, concurrency: 8, per_master_limit: 4, retries: { attempts: 2, backoff: 0.05, max_backoff: 0.1 }, ...extra });
}

function provisioner(name: string, extra: Record<string, unknown> = {}, args: string[] = ["--foreground"]): MusterProcess {
  const p = spawnMuster(["provisioner", "--config", config(name, extra), ...args], { logFile: join(dir, `${name}.out`), env });
  procs.push(p);
  return p;
}

function waitFor(want: string[], done: (r: NodeRecord) => boolean, timeoutMs = 60_000): Promise<Map<string, NodeRecord>> {
  return store.waitFor(want, done, timeoutMs);
}

test("two provisioners at once, against emulated nodes and a simulated CA: every node provisioned once (signed once, the admins told once); a broken node fails and is notified", async () => {
  failing.add(ids[7]!);
  const metricsPort = await freePort();
  provisioner("prov-a", { metrics: { host: "127.0.0.1", port: metricsPort } });
  provisioner("prov-b");
  const recs = await waitFor(ids, (r) => r.status === "done" || r.status === "failed");
  const done = ids.filter((id) => recs.get(id)!.status === "done");
  assert.equal(done.length, N - 1);
  assert.equal(recs.get(ids[7]!)!.status, "failed");
  assert.match(recs.get(ids[7]!)!.lastError!, /bootstrap/);
  assert.equal(ca.doubleSigned, 0, "no certificate signed twice");
  for (const id of done) {
    assert.equal(ca.certs.get(id)?.state, "signed");
    assert.equal(recs.get(id)!.rounds, 1, `${id} provisioned in one round`);
    assert.equal(ca.certs.get(id)?.signedBy, id.endsWith(".test") && Number(id.slice(3, 6)) % 2 ? "master-de.test" : "master-us.test", `${id} signed by the master of its country`);
  }
  const owners = new Set(done.map((id) => recs.get(id)!.owner));
  assert.deepEqual([...owners].sort(), ["prov-a", "prov-b"], "both provisioners took nodes");
  assert.equal(ca.notifications, N, "one notification per node, the failure included");
  const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  assert.match(metrics, /muster_provisioner_provisioned_total \d+/);
  assert.match(metrics, /muster_provisioner_step_duration_seconds_bucket\{le="[^"]+",step="bootstrap"\}/);
});

test("provision status lists every node; retry provisions a fixed node again", async () => {
  const status = await runCli(["provision", "status", "--json", "--broker", nats.url], { env });
  assert.equal(status.code, 0, status.stderr);
  const list = JSON.parse(status.stdout) as NodeRecord[];
  assert.equal(list.length, N);
  assert.equal(list.find((r) => r.identity === ids[7])!.status, "failed");
  const table = await runCli(["provision", "status", "--broker", nats.url], { env });
  assert.match(table.stdout, new RegExp(`${ids[7]!.replace(/\./g, "\\.")}\\s+failed\\s+`));
  assert.match(table.stdout, /39 done, 0 in progress, 0 pending, 1 failed/);

  failing.delete(ids[7]!);
  const retry = await runCli(["provision", "retry", ids[7]!, "--broker", nats.url], { env });
  assert.equal(retry.code, 0, retry.stderr);
  const recs = await waitFor([ids[7]!], (r) => r.status === "done");
  assert.equal(recs.get(ids[7]!)!.rounds, 2);
  assert.equal(ca.doubleSigned, 0);
  await Promise.all(procs.splice(0).map((p) => p.stop("SIGTERM")));
});

test("a has_cert question lost in transit is asked again, not counted as the node's failure", async () => {
  // The certificate probe changes nothing on the node, like inventory: a request lost while a broker
  // fails over (here: an answer later than step_timeout) is asked again (test/resilience/cluster.test.ts).
  const id = "lost1.test";
  const nc2 = await connectNats(nats.url);
  const emu2 = await startEmulator({ nc: nc2, nodes: [{ identity: id, facts: { ipaddress: "127.2.1.1", country: "de" }, classes: [], agents: ["provision"] }], collective: "muster", log: silentLogger, factories: simulatedFactories(ca, { puppetRunMs: [20, 80], csrMs: 5, stallMs: (node, action) => (action === "has_cert" && stallOnce.delete(node) ? 3000 : 0) }) });
  try {
    stallOnce.add(id);
    const p = provisioner("prov-lost", { step_timeout: 1, retries: { attempts: 3, backoff: 0.05, max_backoff: 0.1 } }, ["--once"]);
    assert.equal(await p.exited, 0, readFileSync(join(dir, "prov-lost.log"), "utf8").slice(-2000));
    assert.equal(stallOnce.has(id), false, "the first has_cert was held back");
    const rec = (await store.get(id))!.record;
    assert.equal(rec.status, "done", rec.lastError);
    assert.equal(rec.rounds, 1);
  } finally {
    await emu2.stop();
    await nc2.drain();
  }
});

test("a node a dead provisioner had already disabled is finished without asking the node", async () => {
  // Under provisioning isolation a disabled node has left the target collective: the heir must not
  // need its inventory or its lock, only send the notification that was still owed.
  const id = "gone.test";
  const now = Date.now();
  const rec: NodeRecord = { ...newRecord(id, now), status: "in_progress", stage: "disable", owner: "prov-dead", claimExpires: now - 1000, rounds: 1, master: "master-de.test", masterAddress: "127.3.0.1", nodeAddress: "127.9.9.9" };
  assert.ok(await store.compareAndSet({ record: rec, revision: 0 }));
  const p = provisioner("prov-heir", {}, ["--once"]);
  assert.equal(await p.exited, 0);
  const after = (await store.get(id))!.record;
  assert.equal(after.status, "done", after.lastError);
  assert.equal(after.owner, "prov-heir");
  assert.ok(after.log.some((l) => l.includes("taken over from prov-dead")));
  assert.ok([...ca.notified].some((k) => /#1#provisioned(#\d+)?$/.test(k) && k.startsWith(`${id}#`)), "the owed notification went out");
});

test("a deploy lock left by a provisioner whose claim expired is broken and the node provisioned; an operator's lock is respected, the node failing with its holder named", async () => {
  // The site's case (issue 36): a provisioner took the node's lock and lost the node before it wrote
  // that step, or failed a round without reaching the node to unlock it; the next round, another
  // provisioner's, met that lock for the rest of its lease. Locked nodes are not discovered, so both
  // are records the heir resumes: in progress, prov-old's claim expired, no step written yet.
  const stale = "relock1.test";
  const held = "oplock1.test";
  const emu = await startEmulator({
    nc,
    nodes: [stale, held].map((identity, i) => ({ identity, facts: { ipaddress: `127.2.2.${i + 1}`, country: "de" }, classes: [], agents: ["provision"] })),
    collective: "muster",
    log: silentLogger,
    factories: simulatedFactories(ca, { puppetRunMs: [20, 80], csrMs: 5 }),
  });
  try {
    const now = Date.now();
    for (const [id, owner] of [[stale, "prov-old"], [held, "alice"]] as const) {
      const r = await client.call("provision", "lock_deploy", { owner, lease: 3600 }, { nodes: [id] });
      assert.equal(r.replies[0]?.statuscode, 0, `${id} locked by ${owner}`);
      const rec: NodeRecord = { ...newRecord(id, now - 60_000), status: "in_progress", owner: "prov-old", claimExpires: now - 1000, rounds: 1, current: "lock", history: [{ at: now - 60_000, round: 1, event: "started", by: "prov-old" }] };
      assert.ok(await store.compareAndSet({ record: rec, revision: 0 }));
    }
    const p = provisioner("prov-heir2", {}, ["--once"]);
    await p.exited;
    const after = (await store.get(stale))!.record;
    assert.equal(after.status, "done", after.lastError);
    assert.ok(after.log.some((l) => /deploy lock of prov-old.*stale: broken and taken/.test(l)), after.log.join("\n"));
    const op = (await store.get(held))!.record;
    assert.equal(op.status, "failed");
    assert.match(op.lastError!, /^lock: .*locked by alice/);
    const still = await client.call("provision", "is_locked", {}, { nodes: [held] });
    assert.equal(still.replies[0]?.data.owner, "alice", "the operator's lock is still theirs");
  } finally {
    await emu.stop();
  }
});

test("SIGTERM: stops taking nodes, abandons in-flight ones after the grace period, releases their locks", async () => {
  // New nodes whose runs take long: the provisioner is inside bootstrap when it is told to stop.
  const slow = ["slow1.test", "slow2.test"];
  const slowEmu = await startEmulator({
    nc,
    nodes: slow.map((identity) => ({ identity, facts: { ipaddress: "127.2.1.1", country: "de" }, classes: [], agents: ["provision"] })),
    collective: "muster",
    log: silentLogger,
    factories: simulatedFactories(ca, { puppetRunMs: [60_000, 60_000], csrMs: 5 }),
  });
  try {
    const pidfile = join(dir, "prov-c.pid");
    const p = provisioner("prov-c", { shutdown_grace: 0.5, pidfile });
    await waitFor(slow, (r) => r.current === "bootstrap");
    assert.equal(readFileSync(pidfile, "utf8").trim(), String(p.pid));
    await p.stop("SIGTERM", 20_000);
    assert.equal(await p.exited, 0);
    assert.ok(!existsSync(pidfile), "pidfile removed");
    const res = await client.call("provision", "is_locked", {}, { nodes: slow });
    assert.equal(res.replies.length, 2);
    for (const r of res.replies) assert.equal(r.data.locked, false, `${r.sender} unlocked`);
    for (const id of slow) {
      const rec = (await store.get(id))!.record;
      assert.equal(rec.status, "in_progress", "left for a restart to resume");
      assert.ok(rec.log.some((l) => l.includes("abandoned at bootstrap")));
    }
  } finally {
    await slowEmu.stop();
  }
});

test("daemonize: true detaches and writes the pidfile; a bad config is refused with a clear message", async () => {
  const pidfile = join(dir, "daemon.pid");
  const r = await runCli(["provisioner", "--config", config("prov-d", { daemonize: true, pidfile, sleeptime: 60 })], { env });
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /started in the background, pid (\d+)/);
  const pid = Number(/pid (\d+)/.exec(r.stdout)![1]);
  try {
    assert.ok(isAlive(pid));
    assert.equal(readFileSync(pidfile, "utf8").trim(), String(pid));
  } finally {
    process.kill(pid, "SIGTERM");
  }
  const badFile = join(dir, "bad.yaml");
  writeFileSync(badFile, "steps:\n  lock: maybe\nconcurency: 3\n");
  const bad = await runCli(["provisioner", "--config", badFile], { env });
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /steps\.lock/);
  assert.match(bad.stderr, /concurency/);
});
