// Part of the default suite (alone: `npm run test:resilience`), over TLS like every test broker. It
// found five ways to lose a node (all fixed: KV retries through failover, orphaned claims, lost
// inventory and master discovery, a taken-over node's stale lock) and an observer whose KV watch
// went quiet for ~60 s after a broker kill.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { writeSimulatedProvisionerConfig } from "../support/provisioner.js";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { MusterClient } from "../../src/client/client.js";
import { startEmulator, type RunningEmulator } from "../../src/emulator/emulator.js";
import type { FleetNode } from "../../src/emulator/fleet.js";
import { SimulatedCA, simulatedFactories } from "../../src/emulator/simulated.js";
import { spawnMuster, type MusterProcess } from "../../src/lab/processes.js";
import { silentLogger } from "../../src/log.js";
import { type NodeRecord } from "../../src/protocol/provision-record.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { startCluster, type NatsCluster } from "../support/cluster.js";
import { connectNats } from "../support/collective.js";

// The security & resilience issue: the collective and the provisioner on a 3-node JetStream
// cluster. One broker is SIGKILLed (and later restarted) and one of two provisioners is SIGKILLed
// while 60 emulated nodes are being provisioned; every node must still end provisioned exactly once:
// done once, its certificate signed once by the simulated CA (src/emulator/simulated.ts) and the
// admins told once. Against real Puppet masters the same is shown by test/provisioner/e2e.test.ts
// and the machine tests (test/lab/).

const N = 60;
const BUCKET = "muster_provision";
let dir: string;
let cluster: NatsCluster | undefined;
let nc: NatsConnection | undefined;
let emu: RunningEmulator | undefined;
let client: MusterClient | undefined;
let store: ProvisionState;
const ca = new SimulatedCA();
const procs: MusterProcess[] = [];
let env: NodeJS.ProcessEnv;
const ids = Array.from({ length: N }, (_, i) => `res${String(i).padStart(3, "0")}.test`);

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "muster-resilience-"));
  process.env.MUSTER_CONFIG_DIR = join(dir, "keys");
  env = { ...process.env, MUSTER_CONFIG_DIR: join(dir, "keys") };
  cluster = await startCluster(3);
  nc = await connectNats(cluster.urls, { maxReconnectAttempts: -1, reconnectTimeWait: 250 });
  const fleet: FleetNode[] = [
    ...ids.map((identity, i) => ({ identity, facts: { ipaddress: `127.2.0.${i + 1}`, country: i % 2 ? "de" : "us" }, classes: [], agents: ["provision"] })),
    { identity: "master-de.test", facts: { ipaddress: "127.3.0.1", country: "de" }, classes: [], agents: ["puppetca"] },
    { identity: "master-us.test", facts: { ipaddress: "127.3.0.2", country: "us" }, classes: [], agents: ["puppetca"] },
    { identity: "notifier.test", facts: {}, classes: [], agents: ["notify"] },
  ];
  emu = await startEmulator({ nc, nodes: fleet, collective: "muster", log: silentLogger, factories: simulatedFactories(ca, { puppetRunMs: [200, 500], csrMs: 10 }) });
  client = await MusterClient.connect({ brokers: cluster.urls, collective: "muster" });
  store = await ProvisionState.open(client, BUCKET, { replicas: 3 });
});

after(async () => {
  await Promise.all(procs.map((p) => p.stop("SIGKILL")));
  await client?.close();
  await emu?.stop();
  await nc?.close();
  await cluster?.stopAll();
  if (process.env.MUSTER_KEEP) console.error(`kept ${dir}`);
  else rmSync(dir, { recursive: true, force: true });
});

function provisioner(name: string): MusterProcess {
  const file = writeSimulatedProvisionerConfig(dir, name, {
    broker: cluster!.urls,
    state_bucket: BUCKET,
    state_replicas: 3,
    concurrency: 6,
    per_master_limit: 3,
    lock_lease: 5,
    puppet_timeout: 3,
    step_timeout: 3, // a request lost while a broker fails over is retried after 3 s, not 60
    retries: { attempts: 5, backoff: 0.2, max_backoff: 1 },
  });
  const p = spawnMuster(["provisioner", "--foreground", "--config", file], { logFile: join(dir, `${name}.out`), env });
  procs.push(p);
  return p;
}

test("a broker and a provisioner SIGKILLed mid-run: 60 emulated nodes, each provisioned once (signed once by the simulated CA, the admins told once)", async (t) => {
  const started = Date.now();
  const faults: string[] = [];
  const done = new Set<string>();
  let onDone: (() => void) | undefined;
  const doneAtLeast = (n: number) => new Promise<void>((resolve) => {
    if (done.size >= n) return resolve();
    const prev = onDone;
    onDone = () => {
      prev?.();
      if (done.size >= n) resolve();
    };
  });
  const saw = (r: NodeRecord) => {
    if (r.status === "done" && !done.has(r.identity)) {
      done.add(r.identity);
      onDone?.();
    }
  };
  // Progress, to time the faults: the KV watch below is the authority on the outcome, but it goes
  // quiet for seconds after a broker kill (it re-reads every 5 s meanwhile), so the faults would
  // land after the last node. The bucket's writes are also plain messages on $KV.<bucket>.<key>:
  // a core subscription follows them live and is back as soon as its connection reconnects.
  const live = nc!.subscribe(`$KV.${BUCKET}.>`, {
    callback: (_e, m) => {
      if (m.data.length === 0) return;
      try {
        saw(JSON.parse(new TextDecoder().decode(m.data)) as NodeRecord);
      } catch {
        /* not a record */
      }
    },
  });
  t.after(() => live.unsubscribe());
  const emulatorOn = nc!.info?.server_name; // where a reply lost in the broker kill would have gone
  const at = () => `${done.size}/${N} done, ${((Date.now() - started) / 1000).toFixed(1)} s`;
  const provA = provisioner("prov-a");
  provisioner("prov-b");
  const finished = store.waitFor(ids, (r) => r.status === "done" || r.status === "failed", 70_000, saw);
  finished.catch(() => undefined);

  const doneAtFault: number[] = []; // nodes done as each fault went in: all three must land mid-run
  await Promise.race([doneAtLeast(10), finished]);
  doneAtFault.push(done.size);
  await cluster!.kill(0);
  faults.push(`broker n0 SIGKILLed at ${at()}`);
  await Promise.race([doneAtLeast(Math.min(done.size + 10, N)), finished]);
  const restarting = at();
  doneAtFault.push(done.size);
  await cluster!.start(0);
  faults.push(`broker n0 restarted at ${restarting} (listening at ${at()})`);
  await Promise.race([doneAtLeast(35), finished]);
  doneAtFault.push(done.size);
  await provA.stop("SIGKILL");
  faults.push(`provisioner prov-a SIGKILLed at ${at()}`);

  const recs = await finished;
  const all = await store.list();
  const provisioned = ids.filter((id) => recs.get(id)!.status === "done");
  const failed = ids.filter((id) => recs.get(id)!.status !== "done");
  const duplicates = [...ca.certs.values()].filter((c) => c.signings > 1).length + ids.filter((id) => recs.get(id)!.rounds !== 1).length;
  t.diagnostic(`nodes: ${N}; faults injected: ${faults.length} (${faults.join("; ")}); emulator connected to ${emulatorOn}; nodes provisioned: ${provisioned.length}; duplicates: ${duplicates}; notifications: ${ca.notifications}; took ${((Date.now() - started) / 1000).toFixed(1)} s`);
  assert.equal(faults.length, 3);
  assert.ok(doneAtFault.every((n) => n < N), `every fault went in while nodes were still being provisioned (done at each: ${doneAtFault.join(", ")})`);
  assert.deepEqual(failed, [], `failed: ${failed.map((id) => `${id}: ${recs.get(id)!.lastError}`).join("; ")}`);
  assert.equal(all.length, N, "one record per node");
  assert.equal(ca.doubleSigned, 0, "no certificate signed twice");
  for (const id of ids) {
    const c = ca.certs.get(id);
    assert.equal(c?.state, "signed", `${id} has a signed certificate`);
    assert.equal(c?.signings, 1, `${id} signed once`);
    assert.equal(recs.get(id)!.rounds, 1, `${id} provisioned in one round`);
  }
  assert.equal(ca.notifications, N, "one notification per node");
  assert.equal(duplicates, 0);
  const owners = new Set(provisioned.map((id) => (recs.get(id) as NodeRecord).owner));
  assert.ok(owners.has("prov-b"), "the survivor finished nodes");
});
