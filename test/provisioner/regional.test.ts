import { test } from "node:test";
import assert from "node:assert/strict";
import { decodeKnownMasters, encodeKnownMasters, KNOWN_MASTERS_KEY, MAX_KNOWN_MASTERS, mergeSeen } from "../../src/protocol/known-masters.js";
import { newRecord, parseNodeRecord, recordKey, type NodeRecord } from "../../src/protocol/provision-record.js";
import { chooseMaster, type ChoiceInput, type MasterCandidate } from "../../src/provisioner/pick-master.js";
import { decide, newRun, type EnginePolicy } from "../../src/provisioner/engine.js";
import { claimRecord } from "../../src/provisioner/claim.js";
import { whileMasterAway } from "../../src/provisioner/liveness.js";
import { KNOWN_MASTER_WAIT_S, markMasterWait, masterWaitUntil, noteFallback } from "../../src/provisioner/waits.js";
import { ProvisionerConfigSchema } from "../../src/provisioner/config.js";
import { Stages } from "../../src/protocol/provision-record.js";

// Each node on its own region's master (docs/provisioner.md#each-node-on-its-regions-master), pure:
// the choice over the masters that answer and the known ones that do not, the wait it asks for and
// its end, the fallback, and the known masters' value as stored (hostile values included).

const T0 = 1_700_000_000_000;
const EU = { identity: "puppet-eu.lab", facts: { country: "de", ec2_placement_region: "eu-central-1" } };
const US = { identity: "puppet-us.lab", facts: { country: "us", ec2_placement_region: "us-east-1" } };
const US2 = { identity: "puppet-us2.lab", facts: { country: "us", ec2_placement_region: "us-west-2" } };
const usNode = { country: "us", ec2_placement_region: "us-east-1" };
const WAIT_MS = 600_000;

const choose = (o: Partial<ChoiceInput<MasterCandidate>>) => chooseMaster<MasterCandidate>({ criteria: ["ec2_placement_region", "country"], facts: usNode, answering: [], known: [], now: T0, waitMs: WAIT_MS, ...o });

test("a known master that does not answer, picked by the node's criteria: the node waits for it, not the master that answered first", () => {
  const d = choose({ answering: [EU], known: [EU, US] });
  assert.deepEqual(d, { type: "wait", master: "puppet-us.lab", criterion: "ec2_placement_region", value: "us-east-1" });
  // nothing answers at all: it waits for its own region's master rather than any
  assert.deepEqual(choose({ answering: [], known: [US] }), { type: "wait", master: "puppet-us.lab", criterion: "ec2_placement_region", value: "us-east-1" });
  // once it answers, it is the one
  const up = choose({ answering: [EU, US], known: [EU, US], waiting: { master: US.identity, since: T0 - 5000 } });
  assert.equal(up.type, "use");
  assert.equal(up.type === "use" && up.master.identity, "puppet-us.lab");
  assert.equal(up.type === "use" && up.fallback, undefined);
});

test("the wait is bounded from when it began: past known_master_wait the node falls back by the usual rule, saying which master and why", () => {
  const waiting = { master: US.identity, since: T0 };
  assert.equal(choose({ answering: [EU], known: [US], waiting, now: T0 + WAIT_MS - 1 }).type, "wait");
  const d = choose({ answering: [EU], known: [US], waiting, now: T0 + WAIT_MS });
  assert.equal(d.type, "use");
  if (d.type !== "use") return;
  assert.equal(d.master.identity, "puppet-eu.lab");
  assert.equal(d.criterion, undefined, "the usual rule: no criterion matches among those that answer, the first by identity");
  assert.deepEqual(d.fallback, { from: "puppet-us.lab", reason: "puppet-us.lab (its ec2_placement_region us-east-1) did not answer within 600s (known_master_wait)" });
  // a wait that began for another master does not count for this one
  assert.equal(choose({ answering: [EU], known: [US], waiting: { master: "puppet-old.lab", since: T0 - 10 * WAIT_MS } }).type, "wait");
  // past the wait with nothing answering: it waits for any master, and says it stopped waiting for this one
  assert.deepEqual(choose({ answering: [], known: [US], waiting, now: T0 + WAIT_MS }), { type: "wait-any", fallback: { from: "puppet-us.lab", reason: "puppet-us.lab (its ec2_placement_region us-east-1) did not answer within 600s (known_master_wait)" } });
});

test("a round that gave up on a master does not wait for it again; if it answers after all, it is the node's master", () => {
  const d = choose({ answering: [EU], known: [US], gaveUpOn: US.identity });
  assert.equal(d.type === "use" && d.master.identity, "puppet-eu.lab");
  assert.equal(d.type === "use" && d.fallback?.from, "puppet-us.lab");
  assert.equal(choose({ answering: [], known: [US], gaveUpOn: US.identity }).type, "wait-any");
  const back = choose({ answering: [EU, US], known: [US], gaveUpOn: US.identity });
  assert.equal(back.type === "use" && back.master.identity, "puppet-us.lab");
  assert.equal(back.type === "use" && back.fallback, undefined);
});

test("criteria in order, an answering master winning among equals; no criterion match is not waited for", () => {
  // the first criterion matches none of them; the second matches a known one and an answering one: the answering one
  const d = choose({ facts: { ec2_placement_region: "us-west-1", country: "us" }, answering: [EU, US2], known: [US] });
  assert.equal(d.type === "use" && d.master.identity, "puppet-us2.lab");
  assert.equal(d.type === "use" && d.criterion, "country");
  // the first criterion picks the known one over a later criterion's answering one
  assert.equal(choose({ answering: [US2], known: [US] }).type, "wait");
  // a known master that matches no criterion of the node: no wait, the usual rule
  const de = choose({ facts: { country: "br" }, answering: [US2], known: [EU] });
  assert.equal(de.type === "use" && de.master.identity, "puppet-us2.lab");
  assert.equal(choose({ facts: { country: "br" }, answering: [], known: [EU] }).type, "wait-any");
  // known_master_wait 0: the old rule, the first master that answers, no fallback said
  const old = choose({ answering: [EU], known: [US], waitMs: 0 });
  assert.equal(old.type === "use" && old.master.identity, "puppet-eu.lab");
  assert.equal(old.type === "use" && old.fallback, undefined);
  // criteria: objects never match; numbers match by text
  assert.equal(choose({ criteria: ["rack"], facts: { rack: { a: 1 } }, answering: [{ identity: "m1", facts: { rack: { a: 1 } } }], known: [{ identity: "m0", facts: { rack: { a: 1 } } }] }).type, "use");
  assert.equal(choose({ criteria: ["rack"], facts: { rack: 7 }, answering: [EU], known: [{ identity: "m7", facts: { rack: "7" } }] }).type, "wait");
});

test("a node mid-round keeps its master: used when it answers, waited for (as its own, not a known pick) when it does not", () => {
  const kept = choose({ previous: EU.identity, bound: true, answering: [EU, US], known: [US] });
  assert.equal(kept.type === "use" && kept.kept, true);
  assert.equal(kept.type === "use" && kept.master.identity, "puppet-eu.lab", "never moved to its region's master mid-round");
  assert.deepEqual(choose({ previous: EU.identity, bound: true, answering: [US], known: [EU] }), { type: "wait", master: "puppet-eu.lab", own: true });
  // a record's master from an earlier try, not bound: picked afresh
  assert.equal(choose({ previous: "puppet-gone.lab", answering: [EU], known: [US] }).type, "wait");
});

const policy: EnginePolicy = { stages: [...Stages], attempts: 3, backoffS: 2, maxBackoffS: 60, puppetTimeoutS: 900, lockLeaseS: 600, knownMasterWaitS: 600 };
const inProgress = (): NodeRecord => ({ ...newRecord("node02.us.lab", T0), status: "in_progress", owner: "p1", rounds: 1, claimExpires: T0 + 600_000 });

test("engine: waiting for the known master parks the node with the reason; its wait ends after known_master_wait and never fails it", () => {
  const rec = inProgress();
  const run = newRun(rec, policy);
  const a = decide(run, { type: "master-away", master: "puppet-us.lab", looking: "agent puppetca", criterion: "country", value: "us" }, policy, T0);
  assert.deepEqual(a, { type: "persist", leaseS: 600 });
  assert.deepEqual(rec.masterWait, { since: T0, reason: "waiting for puppet-us.lab, the master its country us picks, which does not answer", master: "puppet-us.lab", criterion: "country" });
  assert.match(rec.log.at(-1)!, /waiting up to 600s, then it falls back to a master that answers \(known_master_wait\), holding no slot$/);
  assert.deepEqual(decide(run, { type: "persisted" }, policy, T0), { type: "park", until: T0 + 600_000, awaiting: "master", master: "puppet-us.lab" });
  assert.equal(masterWaitUntil(rec, { lockLeaseS: 600 }), T0 + KNOWN_MASTER_WAIT_S * 1000, "the default");
  // the scheduler takes it up when that master answers, or when its wait ended (to fall back)
  assert.equal(whileMasterAway("puppet-us.lab", ["puppet-eu.lab"], T0 + 1000, T0 + 600_000), "keep-waiting");
  assert.equal(whileMasterAway("puppet-us.lab", ["puppet-eu.lab", "puppet-us.lab"], T0 + 1000, T0 + 600_000), "back");
  assert.equal(whileMasterAway("puppet-us.lab", ["puppet-eu.lab"], T0 + 600_000, T0 + 600_000), "give-up");
  // asked again past the end (a look that raced it): parked again, not failed, its start kept
  const again = newRun(rec, policy);
  assert.deepEqual(decide(again, { type: "master-away", master: "puppet-us.lab", looking: "agent puppetca", criterion: "country", value: "us" }, policy, T0 + 700_000), { type: "persist", leaseS: 600 });
  assert.equal(rec.masterWait.since, T0);
  assert.equal(rec.status, "in_progress");
  // the wait for its own master keeps master_wait: a known pick that becomes its own is a new wait
  markMasterWait(rec, { lockLeaseS: 600, masterWaitS: 3600 }, T0 + 800_000, "puppet-us.lab", "agent puppetca");
  assert.deepEqual(rec.masterWait, { since: T0 + 800_000, reason: "waiting for its master puppet-us.lab, which does not answer", master: "puppet-us.lab" });
});

test("the fallback: said once in the node's log, kept on the record for the notice, the wait over; a new round forgets it", () => {
  const rec = inProgress();
  markMasterWait(rec, policy, T0, "puppet-us.lab", "agent puppetca", { criterion: "country", value: "us" });
  const fb = { from: "puppet-us.lab", reason: "puppet-us.lab (its country us) did not answer within 600s (known_master_wait)" };
  noteFallback(rec, fb, undefined, T0 + 600_000);
  assert.equal(rec.masterWait, undefined);
  assert.deepEqual(rec.masterFallback, { ...fb, at: T0 + 600_000 });
  assert.match(rec.log.at(-1)!, /fell back to any master that answers: puppet-us\.lab \(its country us\) did not answer within 600s \(known_master_wait\)$/);
  noteFallback(rec, fb, undefined, T0 + 601_000);
  assert.equal(rec.log.filter((l) => l.includes("fell back")).length, 1, "a look with nothing new says nothing");
  noteFallback(rec, fb, "puppet-eu.lab", T0 + 602_000);
  assert.match(rec.log.at(-1)!, /fell back to puppet-eu\.lab \(puppet-us\.lab did not answer in time\)$/);
  assert.ok(parseNodeRecord(JSON.parse(JSON.stringify(rec))).ok, "the record as stored is valid");
  rec.status = "pending"; // retried, or re-queued by its restart
  const next = claimRecord({ record: rec, revision: 3 }, rec.identity, "p1", T0 + 10_000_000, 600)!;
  assert.equal(next.v.record.masterFallback, undefined);
  assert.equal(parseNodeRecord({ ...inProgress(), masterFallback: { from: 3 } }).ok, false, "a forged fallback is refused");
  assert.equal(parseNodeRecord({ ...inProgress(), masterWait: { since: T0, reason: "x", criterion: 5 } }).ok, false);
});

test("known masters as stored: merged from what answered (criterion facts only), a write only when something changed; hostile values refused with a reason", () => {
  assert.ok(!recordKey("puppet-us.lab").includes("/") && KNOWN_MASTERS_KEY.includes("/"), "no node's key");
  const first = mergeSeen([], [{ identity: "puppet-us.lab", facts: { country: "us", ec2_placement_region: "us-east-1", os: { family: "Debian" }, memory: 9 } }], ["ec2_placement_region", "country"], T0)!;
  assert.deepEqual(first, [{ identity: "puppet-us.lab", facts: { country: "us", ec2_placement_region: "us-east-1" }, seen: T0 }]);
  assert.equal(mergeSeen(first, [{ identity: "puppet-us.lab", facts: { country: "us", ec2_placement_region: "us-east-1" } }], ["ec2_placement_region", "country"], T0 + 60_000), undefined, "nothing new: no write");
  const moved = mergeSeen(first, [{ identity: "puppet-us.lab", facts: { country: "ca" } }, { identity: "puppet-eu.lab", facts: { country: "de" } }], ["country"], T0 + 60_000)!;
  assert.deepEqual(moved.map((m) => [m.identity, m.facts.country]), [["puppet-eu.lab", "de"], ["puppet-us.lab", "ca"]]);
  assert.equal(mergeSeen(first, [{ identity: "puppet-us.lab", facts: { country: "us", ec2_placement_region: "us-east-1" } }], ["country"], T0 + 86_400_000)?.[0]?.seen, T0 + 86_400_000, "seen refreshed once a day");
  const round = decodeKnownMasters(encodeKnownMasters(moved));
  assert.deepEqual(round, { ok: true, masters: moved });
  const bad = (v: unknown) => {
    const r = decodeKnownMasters(new TextEncoder().encode(typeof v === "string" ? v : JSON.stringify(v)));
    return r.ok ? "ok" : r.reason;
  };
  assert.equal(bad("{not json"), "not JSON");
  assert.equal(bad({ masters: "all" }), "no masters list");
  assert.equal(bad(null), "no masters list");
  assert.equal(bad({ masters: [{ identity: "../etc", facts: {}, seen: 1 }] }), "masters[0]: no valid identity");
  assert.equal(bad({ masters: [{ identity: "m1", facts: { country: { $gt: "" } }, seen: 1 }] }), "masters[0]: a fact that is not text of at most 256 characters");
  assert.equal(bad({ masters: [{ identity: "m1", facts: [], seen: 1 }] }), "masters[0]: facts is not an object");
  assert.equal(bad({ masters: [{ identity: "m1", facts: {}, seen: "now" }] }), "masters[0]: seen is not a time in ms");
  assert.equal(bad({ masters: Array.from({ length: MAX_KNOWN_MASTERS + 1 }, (_, i) => ({ identity: `m${i}`, facts: {}, seen: 1 })) }), `${MAX_KNOWN_MASTERS + 1} masters (at most ${MAX_KNOWN_MASTERS})`);
});

test("config: known_master_wait defaults to 10 minutes; known_masters are checked (identity, facts); mcprovision's keys unchanged", () => {
  const cfg = ProvisionerConfigSchema.parse({});
  assert.equal(cfg.known_master_wait, 600);
  assert.equal(cfg.known_masters, undefined);
  const with_ = ProvisionerConfigSchema.parse({ known_master_wait: 0, known_masters: [{ identity: "puppet-us.lab", facts: { country: "us", rack: 7 } }] });
  assert.deepEqual(with_.known_masters, [{ identity: "puppet-us.lab", facts: { country: "us", rack: 7 } }]);
  assert.throws(() => ProvisionerConfigSchema.parse({ known_masters: [{ identity: "a b" }] }), /not a valid identity/);
  assert.throws(() => ProvisionerConfigSchema.parse({ known_masters: [{ identity: "m1", fact: {} }] }), /unknown known_masters entry .{0,2}fact.{0,2}; did you mean .{0,2}facts/);
  assert.throws(() => ProvisionerConfigSchema.parse({ known_master_wait: -1 }));
});
