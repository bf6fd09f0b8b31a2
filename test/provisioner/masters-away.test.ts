import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { startEmulator, type RunningEmulator } from "../../src/emulator/emulator.js";
import type { FleetNode } from "../../src/emulator/fleet.js";
import { SimulatedCA, simulatedFactories, submitCsr, type SimulationOptions } from "../../src/emulator/simulated.js";
import { silentLogger } from "../../src/log.js";
import type { NodeRecord } from "../../src/protocol/provision-record.js";
import { generateSigningKey, type SigningKey } from "../../src/protocol/signing.js";
import { ProvisionerConfigSchema } from "../../src/provisioner/config.js";
import { MusterCollective } from "../../src/provisioner/muster-collective.js";
import { Provisioner } from "../../src/provisioner/scheduler.js";
import type { ProvisionState } from "../../src/provisioner/state.js";
import { connectNats, runCli } from "../support/collective.js";
import { startSimulatedSite, type SimulatedSite } from "../support/provisioner.js";

// Masters that do not answer (docs/provisioner.md#masters-that-do-not-answer), against a real
// nats-server: each Puppet master is an emulated machine on a connection of its own, cut (its
// connection closed, its address unreachable from the nodes' simulated Puppet) and powered on again
// with the same key and the same CA, as a puppetserver comes back with its CA directory. The nodes
// and the notifier stay up. The provisioner runs in this process and checks every second.

const DE = { identity: "master-de.test", address: "127.3.0.1", country: "de" };
const US = { identity: "master-us.test", address: "127.3.0.2", country: "us" };
type Master = typeof DE;

let site: SimulatedSite;
let store: ProvisionState;
const ca = new SimulatedCA();
/** Addresses of masters that are off: the nodes' Puppet cannot reach them. */
const off = new Set<string>();
/** Hooks of the running test: a CSR reaching the CA, a master about to reply to a sign. */
let onCsr: (identity: string) => void = () => undefined;
let signReplyDelayMs: (certname: string) => number = () => 0;
const sim: SimulationOptions = {
  puppetRunMs: [20, 60],
  csrMs: 5,
  masterUp: (address) => !off.has(address),
  signReplyDelayMs: (certname) => signReplyDelayMs(certname),
  submitCsr: (identity, fingerprint, nodeKey) => {
    submitCsr(ca, identity, fingerprint, nodeKey);
    onCsr(identity);
  },
};
const running = new Map<string, { emu: RunningEmulator; nc: NatsConnection }>();
const masterKeys = new Map<string, SigningKey>();
const groups: { emu: RunningEmulator; nc: NatsConnection }[] = [];
const provisioners: Provisioner[] = [];

before(async () => {
  site = await startSimulatedSite("masters-away", [{ identity: "notifier.test", facts: {}, classes: [], agents: ["notify"] }], sim, { ca });
  store = site.store;
});

after(async () => {
  await Promise.all(provisioners.map((p) => p.stop()));
  for (const m of [...running.keys()]) await powerCut(m);
  for (const g of groups) await g.emu.stop().then(() => g.nc.close());
  await site?.stop();
});

/** Powers a master on: its muster server answers discovery with its own key and the CA it had. */
async function powerOn(m: Master): Promise<void> {
  if (!masterKeys.has(m.identity)) masterKeys.set(m.identity, generateSigningKey(m.identity).key);
  const nc = await connectNats(site.nats.url);
  const node: FleetNode = { identity: m.identity, facts: { ipaddress: m.address, country: m.country }, classes: [], agents: ["puppetca"] };
  const emu = await startEmulator({ nc, nodes: [node], collective: "muster", log: silentLogger, factories: simulatedFactories(ca, sim), nodeKey: () => masterKeys.get(m.identity)! });
  running.set(m.identity, { emu, nc });
  off.delete(m.address);
}

/** Cuts a master's power: its connection drops with no word said, its address is unreachable, whatever it was doing is lost. */
async function powerCut(identity: string): Promise<void> {
  const r = running.get(identity);
  if (!r) return;
  running.delete(identity);
  off.add([DE, US].find((m) => m.identity === identity)!.address);
  const closed = r.nc.close();
  for (const rt of r.emu.runtimes) rt.abortAll();
  await closed;
  await r.emu.stop().catch(() => undefined); // frees what the emulated machine held in this process
}

/** Waiting nodes of one country, emulated on a connection of their own; `puppetRunMs` as long as a test needs. */
async function nodes(ids: string[], country: string, puppetRunMs: [number, number] = [20, 60]): Promise<void> {
  const nc = await connectNats(site.nats.url);
  const fleet = ids.map((identity, i): FleetNode => ({ identity, facts: { ipaddress: `127.2.${country === "de" ? 1 : 2}.${groups.length * 10 + i + 1}`, country }, classes: [], agents: ["provision"] }));
  groups.push({ nc, emu: await startEmulator({ nc, nodes: fleet, collective: "muster", log: silentLogger, factories: simulatedFactories(ca, { ...sim, puppetRunMs }) }) });
}

async function provisioner(id: string, settings: Record<string, unknown> = {}): Promise<Provisioner> {
  for (const p of provisioners.splice(0)) await p.stop();
  const cfg = ProvisionerConfigSchema.parse({
    id,
    steps: { lock: true, set_puppet_hostname: true, clean_node_certname: true, send_node_csr: true, sign_node_csr: true, puppet_bootstrap_stage: true, puppet_final_run: true, notify: true },
    master: { criteria: ["country"] },
    notify: { targets: ["http://127.0.0.1:9/"] },
    sleeptime: 1,
    discovery_timeout: 1,
    step_timeout: 5,
    retries: { attempts: 2, backoff: 0.1, max_backoff: 0.2 },
    gone: { check_interval: 1, checks: 2, timeout: 120 },
    ...settings,
  });
  const p = new Provisioner(cfg, new MusterCollective(site.client, cfg, silentLogger), store, silentLogger);
  provisioners.push(p);
  await p.start();
  return p;
}

const until = (ids: string[], done: (r: NodeRecord) => boolean, what: string, timeoutMs = 30_000) =>
  store.waitFor(ids, done, timeoutMs).catch((e: Error) => {
    throw new Error(`${what}: ${e.message}`);
  });

const waitingFor = (master: string) => (r: NodeRecord) => r.status === "in_progress" && r.masterWait?.master === master;

test("no master answers when the nodes arrive: they wait with the reason, no attempt spent; a master appears: they are provisioned unattended", async () => {
  const ids = ["early1.test", "early2.test"];
  await nodes(ids, "de");
  await provisioner("prov-early");
  const waiting = await until(ids, (r) => r.masterWait !== undefined, "waiting for a master");
  for (const r of waiting.values()) {
    assert.equal(r.status, "in_progress", "waiting, not failed");
    assert.equal(r.masterWait!.reason, "waiting for a Puppet master: none answers (agent puppetca)");
    assert.equal(r.masterWait!.master, undefined);
    assert.equal(r.attempts, 0);
    assert.equal(r.lastError, undefined);
  }
  const status = await runCli(["provision", "status", "--broker", site.nats.url], { env: { ...site.env, NO_COLOR: "1" } });
  assert.equal(status.code, 0, status.stderr);
  assert.match(status.stdout, /early1\.test\s+waiting\s+.*waiting for a Puppet master: none answers \(agent puppetca\) \(\d+s\)/);
  assert.match(status.stdout, /\(2 waiting for a master\)/);

  await powerOn(DE); // nobody retries anything
  const done = await until(ids, (r) => r.status === "done", "provisioned once a master answers");
  for (const id of ids) {
    const r = done.get(id)!;
    assert.equal(r.masterWait, undefined);
    assert.equal(r.master, DE.identity);
    assert.equal(r.rounds, 1, "the same round");
    assert.equal(ca.certs.get(id)?.signings, 1);
    assert.ok(r.log.some((l) => /a Puppet master answers after \d+s of waiting \(master-de\.test\)$/.test(l)), r.log.join("\n"));
  }
});

test("a master loses power mid-bootstrap: its nodes wait for it (holding no slot) while the other region is provisioned; back, they complete, each certificate signed once", async () => {
  await powerOn(US);
  const de = ["de1.test", "de2.test", "de3.test"];
  const us = ["us1.test", "us2.test", "us3.test"];
  // three slots in all: the other region gets one only if the waiting nodes hold none
  await provisioner("prov-cut", { concurrency: 3, per_master_limit: 3 });
  await nodes(de, "de", [1500, 2500]);
  await until(de, (r) => r.master === DE.identity && (r.current === "bootstrap" || r.status === "done"), "every de node bound to its master, in bootstrap");
  await powerCut(DE.identity);

  const cut = await until(de, (r) => r.status === "done" || waitingFor(DE.identity)(r), "the de nodes waiting for their master");
  const waiting = de.filter((id) => cut.get(id)!.status !== "done");
  assert.ok(waiting.length > 0, "at least one node was mid-bootstrap when its master went");
  for (const id of waiting) {
    const r = cut.get(id)!;
    assert.equal(r.masterWait!.reason, "waiting for its master master-de.test, which does not answer");
    assert.equal(r.attempts, 0, `${id}: no attempt spent on the master's failure`);
    assert.equal(r.current, "bootstrap");
    assert.ok(r.log.some((l) => l.includes("bootstrap: its master master-de.test does not answer")), r.log.join("\n"));
  }

  await nodes(us, "us");
  const other = await until(us, (r) => r.status === "done", "the other region provisioned meanwhile");
  for (const id of us) assert.equal(other.get(id)!.master, US.identity);
  for (const id of waiting) assert.ok(waitingFor(DE.identity)((await store.get(id))!.record), `${id} still waits for master-de.test`);

  await powerOn(DE);
  const back = await until(de, (r) => r.status === "done", "the de nodes provisioned once their master is back");
  for (const id of de) {
    const r = back.get(id)!;
    assert.equal(r.master, DE.identity, "never moved to another master");
    assert.equal(r.rounds, 1);
    assert.equal(ca.certs.get(id)?.signings, 1, `${id}: signed exactly once`);
    assert.equal(ca.certs.get(id)?.signedBy, DE.identity);
  }
  for (const id of waiting) assert.ok(back.get(id)!.log.some((l) => /its master master-de\.test answers after \d+s of waiting; repeating bootstrap$/.test(l)), back.get(id)!.log.join("\n"));
  assert.equal(ca.doubleSigned, 0);
});

test("a master back with the node's CSR still pending, or with its certificate signed but the reply lost: signed once", async () => {
  await provisioner("prov-csr");
  // 1. The master goes the moment the node's CSR reaches it: the CSR is pending there when it is back.
  let cutting: Promise<void> | undefined;
  let csrArrived!: () => void;
  const arrived = new Promise<void>((r) => (csrArrived = r));
  onCsr = (id) => {
    if (id !== "csr.test" || cutting) return;
    cutting = powerCut(DE.identity); // before the node's reply is even sent
    csrArrived();
  };
  await nodes(["csr.test"], "de");
  await arrived;
  await cutting;
  const w1 = await until(["csr.test"], waitingFor(DE.identity), "waiting for its master with its CSR there");
  assert.equal(ca.certs.get("csr.test")?.state, "requested");
  assert.equal(w1.get("csr.test")!.stage, "request_csr");
  await powerOn(DE);
  await until(["csr.test"], (r) => r.status === "done", "its pending CSR signed once the master is back");
  assert.equal(ca.certs.get("csr.test")?.signings, 1);

  // 2. The master signs, then dies before it answers: the certificate is there when it is back.
  let signed!: () => void;
  const wasSigned = new Promise<void>((r) => (signed = r));
  signReplyDelayMs = (certname) => (certname === "sign.test" ? (signed(), (signReplyDelayMs = () => 0), 60_000) : 0);
  await nodes(["sign.test"], "de");
  await wasSigned;
  await powerCut(DE.identity);
  const w2 = await until(["sign.test"], waitingFor(DE.identity), "waiting for its master, which signed before it died");
  assert.equal(w2.get("sign.test")!.current, "sign_csr");
  assert.equal(w2.get("sign.test")!.attempts, 0);
  await powerOn(DE);
  const done = await until(["sign.test"], (r) => r.status === "done", "provisioned once the master is back");
  assert.equal(ca.certs.get("sign.test")?.signings, 1, "not signed a second time");
  assert.ok(done.get("sign.test")!.log.some((l) => l.includes("sign_csr ok: already signed")), done.get("sign.test")!.log.join("\n"));
  assert.equal(ca.doubleSigned, 0);
});

test("master_wait ends the wait: the node fails naming its master and how long it waited, and the admins are told", async () => {
  await provisioner("prov-short", { master_wait: 2 });
  const notices = ca.notifications;
  await nodes(["late.test"], "de", [1500, 2500]);
  await until(["late.test"], (r) => r.current === "bootstrap", "in bootstrap");
  await powerCut(DE.identity);
  const failed = (await until(["late.test"], (r) => r.status === "failed", "failed once master_wait ended")).get("late.test")!;
  assert.ok(failed.log.some((l) => l.includes("waiting for its master master-de.test, which does not answer; waiting up to 2s")), failed.log.join("\n"));
  assert.match(failed.lastError!, /^its master master-de\.test did not answer for \d+s \(master_wait\)$/);
  assert.equal(failed.masterWait, undefined);
  assert.equal(failed.current, "bootstrap", "the step it waited at");
  assert.ok([...ca.notified].some((k) => /^late\.test#1#failed(#\d+)?$/.test(k)), "a failure notice went out");
  assert.ok(ca.notifications > notices);
  await powerOn(DE);
});

test("a provisioner that stops while its nodes wait for a master: its claims were renewed meanwhile, and another takes them over once the claim expires", async () => {
  await powerCut(DE.identity);
  await powerCut(US.identity);
  const lease = { lock_lease: 6 }; // renewed with 3 s left, at a cycle's master check
  await provisioner("prov-first", lease);
  await nodes(["orphan.test"], "de");
  const first = (await until(["orphan.test"], (r) => r.masterWait !== undefined, "waiting for a master")).get("orphan.test")!;
  assert.equal(first.owner, "prov-first");
  const renewed = (await until(["orphan.test"], (r) => (r.claimExpires ?? 0) > first.claimExpires! + 2000, "its claim renewed while it waits", 20_000)).get("orphan.test")!;
  assert.equal(renewed.owner, "prov-first");
  assert.ok(renewed.masterWait, "still waiting");

  await provisioner("prov-heir", lease); // stops prov-first, which leaves its claim as it was
  await powerOn(DE);
  const done = (await until(["orphan.test"], (r) => r.status === "done", "provisioned by the other provisioner")).get("orphan.test")!;
  assert.equal(done.owner, "prov-heir");
  assert.ok(done.log.some((l) => l.includes("taken over from prov-first, whose claim expired")), done.log.join("\n"));
  assert.equal(done.rounds, 1);
  assert.equal(ca.certs.get("orphan.test")?.signings, 1);
  await powerOn(US);
});

test("--once takes up its own nodes waiting for a master that answers again, and leaves them waiting when none does", async () => {
  await powerCut(DE.identity);
  await powerCut(US.identity);
  await provisioner("prov-once");
  await nodes(["once.test"], "de");
  await until(["once.test"], (r) => r.masterWait !== undefined && r.owner === "prov-once", "waiting for a master");
  for (const p of provisioners.splice(0)) await p.stop();

  const cfg = ProvisionerConfigSchema.parse({ id: "prov-once", steps: { lock: true, set_puppet_hostname: true, send_node_csr: true, sign_node_csr: true, puppet_bootstrap_stage: true, puppet_final_run: true }, master: { criteria: ["country"] }, sleeptime: 1, discovery_timeout: 1 });
  const once = () => new Provisioner(cfg, new MusterCollective(site.client, cfg, silentLogger), store, silentLogger).runOnce();
  await once();
  const still = (await store.get("once.test"))!.record;
  assert.equal(still.status, "in_progress");
  assert.ok(still.masterWait, "no master: --once leaves it waiting, claimed");
  await powerOn(DE);
  await once();
  const done = (await store.get("once.test"))!.record;
  assert.equal(done.status, "done", done.log.join("\n"));
  assert.equal(done.master, DE.identity);
  await powerOn(US);
});

// Each node on its region's master (docs/provisioner.md#each-node-on-its-regions-master).

test("masters started staggered on a new site: with the us master configured, the eu one answering first, every node ends on its own region's master", async () => {
  await powerCut(DE.identity);
  await powerCut(US.identity);
  // a new site: no master seen yet (the earlier tests' forgotten, as decommission does); the us master is in the config only
  for (const m of [DE, US]) await store.masters.forget(m.identity);
  await provisioner("prov-staggered", { known_masters: [{ identity: US.identity, facts: { country: "us" } }] });
  const de = ["stag-de1.test", "stag-de2.test"];
  const us = ["stag-us1.test", "stag-us2.test"];
  await nodes(de, "de");
  await nodes(us, "us");
  await powerOn(DE); // the eu master answers first
  const eu = await until(de, (r) => r.status === "done", "the de nodes provisioned on the master that answers");
  for (const id of de) assert.equal(eu.get(id)!.master, DE.identity);
  const waiting = await until(us, (r) => r.masterWait?.master === US.identity, "the us nodes waiting for their region's master");
  for (const id of us) {
    const r = waiting.get(id)!;
    assert.equal(r.status, "in_progress");
    assert.equal(r.master, undefined, "not sent to the master that answered");
    assert.equal(r.masterWait!.criterion, "country");
    assert.equal(r.masterWait!.reason, "waiting for master-us.test, the master its country us picks, which does not answer");
    assert.equal(r.attempts, 0);
  }

  await powerOn(US); // nobody retries anything
  const done = await until(us, (r) => r.status === "done", "the us nodes provisioned once their master answers");
  for (const id of us) {
    const r = done.get(id)!;
    assert.equal(r.master, US.identity);
    assert.equal(r.masterFallback, undefined);
    assert.equal(r.rounds, 1);
    assert.equal(ca.certs.get(id)?.signedBy, US.identity);
    assert.ok(r.log.some((l) => /master-us\.test, the master its country picks, answers after \d+s of waiting$/.test(l)), r.log.join("\n"));
  }
  // both are remembered now, for the next restart
  assert.deepEqual((await store.masters.list()).map((m) => [m.identity, m.facts.country]), [[DE.identity, "de"], [US.identity, "us"]]);
});

test("a master remembered from before (a restarted provisioner knows it) that stays off: its region's node waits known_master_wait, then falls back, and the log, the record and the notice say why", async () => {
  // the masters the earlier tests' provisioners saw are in the state bucket
  assert.ok((await store.masters.list()).some((m) => m.identity === US.identity && m.facts.country === "us"), "the us master is remembered");
  await powerCut(US.identity);
  await provisioner("prov-fallback", { known_master_wait: 2 }); // a new instance: it knows the us master only from the bucket
  await nodes(["fb-us.test"], "us");
  await until(["fb-us.test"], (r) => r.masterWait?.master === US.identity && r.masterWait.criterion === "country", "waiting for the remembered us master");
  const r = (await until(["fb-us.test"], (x) => x.status === "done", "provisioned on the other master once the wait ended")).get("fb-us.test")!;
  const why = "master-us.test (its country us) did not answer within 2s (known_master_wait)";

  assert.equal(r.master, DE.identity);
  assert.deepEqual({ from: r.masterFallback?.from, reason: r.masterFallback?.reason }, { from: US.identity, reason: why });
  assert.ok(r.log.some((l) => l.endsWith(`fell back to ${DE.identity}: ${why}`)), r.log.join("\n"));
  const notice = [...ca.notices].find(([k]) => /^fb-us\.test#1#provisioned(#\d+)?$/.test(k))?.[1];
  assert.ok(notice, "the admins were told it is provisioned");
  assert.equal(notice.subject, `Provisioned fb-us.test against ${DE.identity} (fell back from ${US.identity})`);
  assert.ok(notice.message.endsWith(`It fell back to ${DE.identity}: ${why}.`), notice.message);
  await powerOn(US);
});
