import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { coreAgentFactories } from "../../src/agents/builtin.js";
import { MusterClient } from "../../src/client/client.js";
import { startEmulator, type RunningEmulator } from "../../src/emulator/emulator.js";
import type { FleetNode } from "../../src/emulator/fleet.js";
import { SimulatedPuppetFleet, spreadRunTimes, type SimulatedRun } from "../../src/emulator/simulated-puppet.js";
import type { ProgressEvent } from "../../src/fleet/runall.js";
import { runAll } from "../../src/fleet/runner.js";
import { RUN_COMPLETE_EVENT } from "../../src/agents/puppet/ddl.js";
import { DEFAULT_NODE_KEYS_BUCKET } from "../../src/protocol/buckets.js";
import { decodeRequest } from "../../src/protocol/envelope.js";
import { encodeNodeEvent } from "../../src/protocol/events.js";
import { encodeNodeKeyEntry, nodeKeyName } from "../../src/protocol/node-keys.js";
import { generateSigningKey, signMessage } from "../../src/protocol/signing.js";
import { silentLogger } from "../../src/log.js";
import { cleanEnv, connectNats, runCli } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";

// runall and the puppet commands against an emulated fleet whose puppet agent simulates runs of a
// known length (src/emulator/simulated-puppet.ts). test/fleet/puppet-real.test.ts does real Puppet.

const N = 14;
const ids = Array.from({ length: N }, (_, i) => `sim${String(i).padStart(2, "0")}.test`);
const disabled = new Map([
  ["sim03.test", "kernel upgrade, ask ops"],
  ["sim09.test", "frozen for the audit"],
]);
const times = spreadRunTimes(N, 150, 400, 7);
const runMs = new Map(ids.map((id, i) => [id, times[i]!]));
const keys = new Map(ids.map((id) => [id, generateSigningKey(id).key]));

let dir: string;
let nats: NatsHandle;
let nc: NatsConnection;
let emu: RunningEmulator;
let sim: SimulatedPuppetFleet;
let client: MusterClient;
let env: NodeJS.ProcessEnv;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "muster-fleet-sim-"));
  process.env.MUSTER_CONFIG_DIR = join(dir, "keys");
  env = cleanEnv(join(dir, "keys"));
  nats = await startNats({ jetstream: true }); // the node-key directory
  nc = await connectNats(nats.url, { name: "fleet-sim-emulator" });
  sim = new SimulatedPuppetFleet({ runMs: (id) => runMs.get(id) ?? 200, disabled: (id) => disabled.get(id), history: true });
  const fleet: FleetNode[] = ids.map((identity, i) => ({ identity, facts: { country: i % 2 ? "de" : "us" }, classes: [], agents: ["puppet"] }));
  emu = await startEmulator({ nc, nodes: fleet, collective: "muster", log: silentLogger, factories: { ...coreAgentFactories, puppet: sim.factory }, nodeKey: (id) => keys.get(id)! });
  client = await MusterClient.connect({ brokers: [nats.url], collective: "muster" });
});

after(async () => {
  sim?.stop();
  await client?.close();
  await emu?.stop();
  await nc?.drain();
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Most runs going at once on the nodes, by the runs' own start and end times. */
function mostAtOnce(runs: SimulatedRun[]): number {
  const edges = runs.flatMap((r) => [
    { t: r.startedAt, d: +1 },
    { t: r.finishedAt ?? Infinity, d: -1 },
  ]);
  edges.sort((a, b) => a.t - b.t || a.d - b.d); // an end before a start at the same instant
  let cur = 0;
  let max = 0;
  for (const e of edges) max = Math.max(max, (cur += e.d));
  return max;
}

describe("runall on a simulated fleet", () => {
  it("keeps exactly N runs going, skips and lists the disabled nodes", async () => {
    const before = sim.runs.length;
    const events: ProgressEvent[] = [];
    const { report, order, unverified } = await runAll(client, { concurrency: 3, nodes: ids, onProgress: (e) => events.push(e), runonce: { force: true } });
    assert.deepEqual(unverified, [...ids].sort(), "no key directory yet: every node's replies and events are unproven, and said to be");
    const runs = sim.runs.slice(before);
    assert.equal(runs.length, N - disabled.size, "every enabled node ran once");
    assert.ok(mostAtOnce(runs) <= 3, "never more than N at once on the nodes");
    assert.equal(report.maxConcurrency, 3);
    // The scheduler's own account, whatever the machine's speed: the first three fill the slots, a
    // start only ever goes into a free slot, and each burst of starts fills every free slot while
    // nodes are queued: a slot freed by a run's end is refilled before anything else is heard.
    // (How promptly, in time, is bench:runall's to measure.)
    const startsSeen = events.filter((e) => e.type === "start").map((e) => (e as { running: number }).running);
    assert.deepEqual(startsSeen.slice(0, 3), [0, 1, 2]);
    assert.ok(startsSeen.every((r) => r >= 0 && r <= 2), `every start takes a free slot: ${startsSeen.join(",")}`);
    events.forEach((e, i) => {
      const next = events[i + 1];
      if (e.type !== "start" || next?.type === "start") return; // the last start of a burst
      assert.ok(e.running === 2 || e.queued === 0, `after a burst of starts every slot is taken while nodes wait: ${e.identity} started with ${e.running} going and ${e.queued} queued`);
    });
    assert.equal(events.filter((e) => e.type === "start").length, N - disabled.size, "every enabled node started once");
    // longest last run first (the nodes have a history)
    const enabledOrder = order.filter((id) => !disabled.has(id));
    assert.deepEqual(enabledOrder, [...enabledOrder].sort((a, b) => runMs.get(b)! - runMs.get(a)!));
    for (const n of report.nodes) {
      if (disabled.has(n.identity)) {
        assert.equal(n.outcome, "skipped");
        assert.match(n.detail, new RegExp(disabled.get(n.identity)!));
      } else assert.ok(n.outcome === "changed" || n.outcome === "ok", `${n.identity}: ${n.outcome} ${n.detail}`);
    }
    assert.equal(report.counts.skipped, 2);
  });

  it("a forged run_complete (another key than the directory's) neither ends a run nor frees its slot", async () => {
    // The directory names each node's key, as the provisioner leaves it; a fresh client reads it.
    const kv = await client.bucket(DEFAULT_NODE_KEYS_BUCKET, { create: { history: 1 } });
    for (const id of ids) await kv.put(nodeKeyName(id), encodeNodeKeyEntry({ identity: id, pubkey: keys.get(id)!.publicKey, source: "certified", time: Date.now(), by: "test" }));
    const checked = await MusterClient.connect({ brokers: [nats.url], collective: "muster" });
    // The attacker reads the runonce sent to the first node and at once announces its end, failed.
    const [a, b] = [ids[0]!, ids[1]!];
    const mallory = generateSigningKey("mallory").key;
    let forged = 0;
    const spy = nc.subscribe(`muster.node.${a}`, {
      callback: (_e, m) => {
        const req = decodeRequest(m.data);
        if (req.action !== "runonce") return;
        forged++;
        nc.publish(`muster.event.puppet.${RUN_COMPLETE_EVENT}`, encodeNodeEvent(signMessage({ identity: a, agent: "puppet", event: RUN_COMPLETE_EVENT, time: Date.now(), data: { requestid: req.id, exitcode: 1, failed: true, message: "forged" } }, mallory)));
      },
    });
    await nc.flush();
    const before = sim.runs.length;
    try {
      const { report, unverified } = await runAll(checked, { concurrency: 1, nodes: [a, b], order: "name", runonce: { force: true } });
      assert.equal(forged, 1, "the forged event went out");
      assert.deepEqual(unverified, [], "with the directory every reply and event was proven");
      const by = new Map(report.nodes.map((n) => [n.identity, n]));
      assert.ok(["ok", "changed"].includes(by.get(a)!.outcome), `${a}: ${by.get(a)!.outcome} ${by.get(a)!.detail}: the node's own event counted, not the forgery`);
      const runs = new Map(sim.runs.slice(before).map((r) => [r.identity, r]));
      assert.ok(runs.get(b)!.startedAt >= runs.get(a)!.finishedAt!, "the second run started only when the first really ended: concurrency 1 held");
    } finally {
      spy.unsubscribe();
      await checked.close();
    }
  });

  it("a node that vanishes mid-run, or was never there, does not block the rest", async () => {
    const nc2 = await connectNats(nats.url, { name: "fleet-sim-vanishing" });
    const sim2 = new SimulatedPuppetFleet({ runMs: () => 60_000 });
    const emu2 = await startEmulator({ nc: nc2, nodes: [{ identity: "aaa-vanishing.test", facts: {}, classes: [], agents: ["puppet"] }], collective: "muster", log: silentLogger, factories: { ...coreAgentFactories, puppet: sim2.factory } });
    sim2.onRunStart = () => {
      // the node accepts its run (the reply goes out), then disappears: no run_complete, no answers
      setTimeout(() => {
        sim2.stop();
        void emu2.stop().then(() => nc2.close());
      }, 50);
    };
    try {
      const nodes = ["aaa-vanishing.test", "aab-never-existed.test", ...ids.slice(0, 5)];
      const { report } = await runAll(client, { concurrency: 2, nodes, order: "name", startTimeoutMs: 1000, pollIntervalMs: 300, maxMissedPolls: 2, runonce: { force: true } });
      const by = new Map(report.nodes.map((n) => [n.identity, n]));
      assert.equal(by.get("aab-never-existed.test")?.outcome, "vanished");
      assert.match(by.get("aab-never-existed.test")!.detail, /no answer to status/);
      assert.equal(by.get("aaa-vanishing.test")?.outcome, "vanished");
      assert.match(by.get("aaa-vanishing.test")!.detail, /stopped answering/);
      for (const id of ids.slice(0, 5)) assert.ok(["changed", "ok", "skipped"].includes(by.get(id)!.outcome), `${id}: ${by.get(id)!.outcome}`);
    } finally {
      sim2.stop();
      if (!nc2.isClosed()) {
        await emu2.stop();
        await nc2.close();
      }
    }
  });
});

describe("muster puppet commands on a simulated fleet", () => {
  it("runall prints mc-puppetd style progress, lists skipped nodes, and exits 0", async () => {
    const r = await runCli(["puppet", "runall", "4", "--broker", nats.url, "-F", "country=de"], { env, timeoutMs: 60_000 });
    assert.equal(r.code, 0, r.stderr + r.stdout);
    assert.match(r.stdout, /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}> Running all nodes with a concurrency of 4$/m);
    assert.match(r.stdout, /> Found 7 nodes$/m);
    assert.match(r.stdout, /> Running sim\d\d\.test, concurrency is 0$/m);
    assert.match(r.stdout, /> Running sim\d\d\.test, concurrency is 3$/m);
    assert.doesNotMatch(r.stdout, /concurrency is [4-9]/);
    assert.match(r.stdout, /Skipped, Puppet disabled \(2\):\n {3}sim03\.test {2}Puppet is disabled: kernel upgrade, ask ops\n {3}sim09\.test {2}Puppet is disabled: frozen for the audit/);
    assert.match(r.stdout, /^7 nodes: .*2 skipped$/m);
    assert.match(r.stdout, /makespan \d+\.\d+ s \(first start to last end\) with concurrency 4, at most 4 at once/);
  });

  it("runall --json --rerun loops for --cycles rounds", async () => {
    const r = await runCli(["puppet", "runall", "5", "--broker", nats.url, "-I", "/sim0[0-4]/", "--json", "--rerun", "0.2", "--cycles", "2"], { env, timeoutMs: 60_000 });
    assert.equal(r.code, 0, r.stderr);
    const rounds = r.stdout.trim().split("\n").map((l) => JSON.parse(l) as { round: number; nodes: { identity: string; outcome: string }[]; maxConcurrency: number });
    assert.deepEqual(rounds.map((x) => x.round), [1, 2]);
    for (const round of rounds) {
      assert.equal(round.nodes.length, 5);
      for (const n of round.nodes) assert.ok(n.identity === "sim03.test" ? n.outcome === "skipped" : ["ok", "changed"].includes(n.outcome), `${n.identity}: ${n.outcome}`);
    }
  });

  it("a node file naming a node that is not there: listed as vanished, exit 2", async () => {
    const file = join(dir, "nodes.txt");
    writeFileSync(file, "sim00.test\nnot-there.test\n");
    // a start timeout that only the node that is not there runs out: sim00 answers whatever the load
    const r = await runCli(["puppet", "runall", "2", "--broker", nats.url, "--nodes", file, "--start-timeout", "15"], { env, timeoutMs: 120_000 });
    assert.equal(r.code, 2, r.stderr + r.stdout);
    assert.match(r.stdout, /Not heard from \(1\):\n {3}not-there\.test {2}no answer to status/);
  });

  it("disable, count, status, the puppet() data plugin and enable", async () => {
    const dis = await runCli(["puppet", "disable", "--broker", nats.url, "-I", "sim01.test", "schema", "change"], { env });
    assert.equal(dis.code, 0, dis.stderr + dis.stdout);
    assert.match(dis.stdout, /Puppet disabled: schema change/);
    const count = await runCli(["puppet", "count", "--broker", nats.url], { env });
    assert.equal(count.code, 0, count.stderr);
    assert.match(count.stdout, /Total Puppet nodes: 14/);
    assert.match(count.stdout, /Nodes currently disabled: 3/);
    const find = await runCli(["find", "--broker", nats.url, "-S", "puppet().enabled=false"], { env });
    assert.equal(find.stdout, "sim01.test\nsim03.test\nsim09.test\n");
    const st = await runCli(["puppet", "status", "--broker", nats.url, "-I", "sim01.test"], { env });
    assert.match(st.stdout, /sim01\.test\s*: Currently disabled \(simulated\) \(schema change\)/);
    assert.match(st.stdout, /Nodes: 1 \/ 1/);
    const en = await runCli(["puppet", "enable", "--broker", nats.url, "-I", "sim01.test"], { env });
    assert.equal(en.code, 0);
    assert.match(en.stdout, /Puppet enabled/);
    const again = await runCli(["puppet", "enable", "--broker", nats.url, "-I", "sim01.test", "--json"], { env });
    const j = JSON.parse(again.stdout) as { replies: { data: { changed: boolean } }[] };
    assert.equal(j.replies[0]?.data.changed, false, "enabling twice is fine and says so");
  });

  it("summary aggregates the last runs; runonce refuses a disabled node with its message", async () => {
    const sum = await runCli(["puppet", "summary", "--broker", nats.url], { env });
    assert.equal(sum.code, 0, sum.stderr);
    assert.match(sum.stdout, /Summary statistics for 14 nodes:/);
    assert.match(sum.stdout, /Total resources:\s+min\s+20\s+avg\s+20\.0\s+max\s+20/);
    const ro = await runCli(["puppet", "runonce", "--broker", nats.url, "-I", "sim03.test"], { env });
    assert.equal(ro.code, 2);
    assert.match(ro.stdout, /Puppet is disabled on sim03\.test: kernel upgrade, ask ops/);
  });

  it("bad arguments: a usage error and nothing sent", async () => {
    for (const args of [["runall", "0"], ["runall", "x"], ["runonce", "--tags", "a b"], ["runall", "2", "--cycles", "2"]]) {
      const r = await runCli(["puppet", ...args, "--broker", nats.url], { env });
      assert.equal(r.code, 64, `${args.join(" ")}: ${r.stderr}`);
    }
    const help = await runCli(["puppet", "runall", "--help"], { env });
    assert.equal(help.code, 0);
    assert.match(help.stdout, /keeping exactly CONCURRENCY runs going/);
  });
});
