import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { bucketsOn, type Bucket } from "../../src/broker/bucket.js";
import { encodeNodeRecord, newRecord, recordKey, type NodeRecord } from "../../src/protocol/provision-record.js";
import { ProvisionState, type StateChange } from "../../src/provisioner/state.js";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, startNats, type NatsHandle } from "../support/index.js";
import { connectNats } from "../support/collective.js";

// ProvisionState against a real JetStream KV bucket: compare-and-set between two writers, values
// that are not records (the bucket is writable by admins) skipped by readers and overwritten by the
// provisioner, and a watch that says when it has caught up.

let nats: NatsHandle;
let nc: NatsConnection;
let raw: Bucket;
let state: ProvisionState;
const invalid: string[] = [];

before(async () => {
  nats = await startNats({ jetstream: true });
  nc = await connectNats(nats.url);
  state = await ProvisionState.open(bucketsOn(nc), "state_test", { onInvalid: (key, reason) => invalid.push(`${key}: ${reason}`) });
  raw = await bucketsOn(nc).bucket("state_test");
});

after(async () => {
  await nc?.drain().catch(() => undefined);
  await nats?.stop();
});

test("compare-and-set: of two writers at the same revision, one wins", async () => {
  const a = { record: newRecord("cas.test"), revision: 0 };
  assert.ok(await state.compareAndSet(a), "created");
  const b = { record: structuredClone((await state.get("cas.test"))!.record), revision: a.revision };
  a.record.status = "in_progress";
  b.record.status = "failed";
  assert.ok(await state.compareAndSet(a));
  assert.equal(await state.compareAndSet(b), undefined, "the second writer loses");
  assert.equal((await state.get("cas.test"))?.record.status, "in_progress");
  assert.equal(await state.compareAndSet({ record: newRecord("cas.test"), revision: 0 }), undefined, "create loses to an existing record");
});

test("a value that is not a record: skipped by readers, counted, overwritten by a claim", async () => {
  await raw.put(recordKey("junk.test"), JSON.stringify({ identity: "junk.test", status: "exploded" }));
  const before = state.invalid;
  assert.equal(await state.get("junk.test"), undefined);
  assert.equal(state.invalid, before + 1);
  assert.match(invalid.at(-1)!, /junk\.test: unknown status "exploded"/);
  assert.ok(!(await state.list()).some((r) => r.identity === "junk.test"));
  const v = { record: newRecord("junk.test"), revision: 0 };
  assert.ok(await state.compareAndSet(v), "the provisioner writes over it as over no record");
  assert.equal((await state.get("junk.test"))?.record.status, "pending");
});

test("watch: every record, caught-up, then changes; list is sorted", async () => {
  await state.put({ ...newRecord("b.watch"), status: "done" });
  await state.put({ ...newRecord("a.watch"), status: "failed" });
  const w = await state.watch();
  const seen: StateChange[] = [];
  const it = w[Symbol.asyncIterator]();
  for (;;) {
    const c = (await it.next()).value as StateChange;
    seen.push(c);
    if (c.type === "caught-up") break;
  }
  const puts = seen.filter((c): c is Extract<StateChange, { type: "put" }> => c.type === "put").map((c) => c.record.identity);
  assert.ok(puts.includes("a.watch") && puts.includes("b.watch"));
  await state.put({ ...newRecord("c.watch"), status: "pending" });
  const next = (await it.next()).value as StateChange;
  assert.equal(next.type === "put" && next.record.identity, "c.watch");
  await state.remove("c.watch");
  const gone = (await it.next()).value as StateChange;
  assert.deepEqual(gone, { type: "removed", key: "c.watch" });
  w.stop();
  const ids = (await state.list()).map((r: NodeRecord) => r.identity);
  assert.deepEqual(ids, [...ids].sort((x, y) => x.localeCompare(y)));
});

test("waitFor never goes back in time: a record older than one already seen (a member behind, a watch opened afresh) does not replace it", async () => {
  const [a, b] = ["a.back", "b.back"];
  await state.put({ ...newRecord(a), status: "in_progress", current: "bootstrap" });
  await state.put({ ...newRecord(a), status: "done" });
  await state.put({ ...newRecord(b), status: "in_progress", current: "bootstrap" });
  const doneAt = (await state.get(a))!.record.updatedAt;
  const finished = (r: NodeRecord) => r.status === "done" || r.status === "failed";
  let sawDone: () => void = () => undefined;
  const seenDone = new Promise<void>((r) => (sawDone = r));
  const waiting = state.waitFor([a, b], finished, 20_000, (r) => r.identity === a && r.status === "done" && sawDone());
  await seenDone;
  // then what a lagging copy gives: a's in_progress from before its done, as the bucket's newest value
  await raw.put(recordKey(a), encodeNodeRecord({ ...newRecord(a), status: "in_progress", current: "bootstrap", updatedAt: doneAt - 1000 }));
  await state.put({ ...newRecord(b), status: "done" });
  const got = await waiting;
  assert.deepEqual([got.get(a)?.status, got.get(b)?.status], ["done", "done"]);
});

test("waitFor answers with the nodes asked for only, whatever else the bucket holds", async () => {
  const [a, other] = ["a.only", "other.only"];
  await state.put({ ...newRecord(other), status: "in_progress", current: "bootstrap" });
  await state.put({ ...newRecord(a), status: "done" });
  const got = await state.waitFor([a], (r) => r.status === "done", 20_000);
  assert.deepEqual([...got.keys()], [a]);
});

test("an empty bucket's watch catches up at once; openExisting does not create", async () => {
  assert.equal(await ProvisionState.openExisting(bucketsOn(nc), "never_made"), undefined);
  const empty = await ProvisionState.open(bucketsOn(nc), "state_empty");
  const w = await empty.watch();
  const first = await w[Symbol.asyncIterator]().next();
  assert.deepEqual(first.value, { type: "caught-up" });
  w.stop();
  assert.deepEqual(await empty.list(), []);
});

// Issue 28 §5: one home for the record's operations, every write a compare-and-set.

/**
 * Run `op` while a provisioner writes `rec` (compare-and-set) right after the first read of its
 * key: the write that lands between an operator's read and its own write.
 */
async function afterFirstRead<T>(id: string, rec: NodeRecord, op: () => Promise<T>): Promise<T> {
  const bucket = state.bucket;
  const realGet = bucket.get.bind(bucket);
  let raced = false;
  bucket.get = async (key) => {
    const e = await realGet(key);
    if (!raced && key === recordKey(id)) {
      raced = true;
      assert.ok(await state.compareAndSet({ record: rec, revision: e!.revision }), "the provisioner's write lands");
    }
    return e;
  };
  try {
    return await op();
  } finally {
    bucket.get = realGet;
  }
}

test("a retry racing a provisioner's write never loses that write: the retry is told, the provisioner's record stays", async () => {
  const id = "race.test";
  const seeded = { record: { ...newRecord(id), status: "failed" as const, stage: "sign_csr" as const, lastError: "no CSR" }, revision: 0 };
  assert.ok(await state.compareAndSet(seeded));
  // The retry reads the failed record; before it writes, a provisioner (a restarted node re-queued
  // and claimed) writes the record. The retry's write must lose, and say so.
  const r = await afterFirstRead(id, { ...structuredClone(seeded.record), status: "in_progress", owner: "prov-a", current: "lock", log: ["claimed by prov-a"] }, () => state.retry([id], "alice"));
  assert.deepEqual(r.changed, [id], "the retry says the node changed meanwhile");
  assert.deepEqual(r.retried, []);
  const now = (await state.get(id))!.record;
  assert.deepEqual([now.status, now.owner, now.log.at(-1)], ["in_progress", "prov-a", "claimed by prov-a"], "the provisioner's write is intact");

  // Round after round, a provisioner and a retry both read the record, then write in either order:
  // exactly one lands, and when the provisioner's did, the stored record is exactly its write.
  const id2 = "race2.test";
  assert.ok(await state.compareAndSet({ record: { ...newRecord(id2), status: "failed" as const }, revision: 0 }));
  let provisionerWon = 0;
  for (let round = 0; round < 20; round++) {
    const seen = (await state.get(id2))!;
    if (seen.record.status !== "failed") {
      seen.record.status = "failed"; // set it up as a failed node again
      assert.ok(await state.compareAndSet(seen));
    }
    const v = (await state.get(id2))!;
    v.record = structuredClone(v.record);
    v.record.status = "in_progress";
    v.record.log = [...v.record.log, `provisioner write ${round}`];
    const provisionerWrite = () => state.compareAndSet(v);
    const retry = () => state.retry([id2], "bob");
    const [p, r] = round % 2 ? await Promise.all([provisionerWrite(), retry()]) : await Promise.all([retry(), provisionerWrite()]).then(([x, y]) => [y, x] as const);
    const retried = r.retried.length === 1;
    assert.notEqual(p !== undefined, retried, `round ${round}: exactly one write lands`);
    const stored = (await state.get(id2))!.record;
    if (p !== undefined) {
      provisionerWon++;
      // it read the record after the provisioner wrote (refused: being provisioned) or before (changed meanwhile)
      assert.ok(r.changed.includes(id2) || r.refused.some((x) => x.identity === id2), `round ${round}: the retry says why it did not land: ${JSON.stringify(r)}`);
      assert.equal(stored.log.at(-1), `provisioner write ${round}`, `round ${round}: the provisioner's write is what is stored`);
    } else assert.equal(stored.status, "pending");
  }
  assert.ok(provisionerWon > 0, "the provisioner won some rounds");
});

test("forget drops a gone or failed node's record by compare-and-set, and refuses one being provisioned", async () => {
  const gone = { record: { ...newRecord("gone.test"), status: "in_progress" as const, current: "bootstrap" as const, gone: { since: Date.now(), reason: "no answer" } }, revision: 0 };
  assert.ok(await state.compareAndSet(gone));
  const r = await state.forget("gone.test");
  assert.equal(r.ok, true);
  assert.equal(await state.get("gone.test"), undefined);
  const busy = { record: { ...newRecord("busy.test"), status: "in_progress" as const, owner: "p" }, revision: 0 };
  assert.ok(await state.compareAndSet(busy));
  const refused = await state.forget("busy.test");
  assert.deepEqual([refused.ok, !refused.ok && refused.code], [false, "refused"]);
  assert.deepEqual((await state.forget("nobody.test")).ok, false);
  // a gone node is retried at once (not after its wait), and its history says who
  const g2 = { record: { ...newRecord("gone2.test"), status: "in_progress" as const, current: "bootstrap" as const, rounds: 1, gone: { since: Date.now(), reason: "no answer" } }, revision: 0 };
  assert.ok(await state.compareAndSet(g2));
  const rr = await state.retry(["gone2.test"], "carol");
  assert.deepEqual(rr.retried, [{ identity: "gone2.test", was: "in_progress" }]);
  const after = (await state.get("gone2.test"))!.record;
  assert.deepEqual([after.status, after.gone, after.history?.at(-1)?.event, after.history?.at(-1)?.by], ["pending", undefined, "retried", "carol"]);
});

test("decommission removes by compare-and-set: a write between its read and its purge is read again, and what it reports is what it dropped", async () => {
  const id = "decom.test";
  const v = { record: { ...newRecord(id), status: "done" as const, stage: "notify" as const }, revision: 0 };
  assert.ok(await state.compareAndSet(v));
  // a provisioner takes the node up again before the purge lands
  const was = await afterFirstRead(id, { ...structuredClone(v.record), status: "in_progress", owner: "prov-b", log: ["claimed by prov-b"] }, () => state.remove(id));
  assert.deepEqual([was?.status, was?.owner], ["in_progress", "prov-b"], "the record dropped is the provisioner's, not the stale one read first");
  assert.equal(await state.get(id), undefined, "removed");
  assert.equal(await state.remove(id), undefined, "nothing to remove twice");
});

test("compare-and-set through a broker outage: tried again for as long as it is told (the claim held), the same write; past that it rejects, not 'lost'", async () => {
  const dir = mkdtempSync(join(tmpdir(), "muster-state-outage-"));
  const port = await freePort();
  let broker = await startNats({ jetstream: true, dir: join(dir, "nats"), port });
  const c = await connectNats(broker.url);
  try {
    const s = await ProvisionState.open(bucketsOn(c), "outage_test");
    const v = { record: { ...newRecord("outage.test"), status: "in_progress" as const, owner: "prov-a" }, revision: 0 };
    assert.ok(await s.compareAndSet(v));
    await broker.stop();
    // gone for longer than it is told to try: rejected (the caller keeps its claim), not reported as another's write
    v.record.log = [...v.record.log, "short"];
    await assert.rejects(s.compareAndSet(v, { withinMs: 1500 }), (e: Error) => /timeout|disconnect|no responders|closed/i.test(e.message) || e.name === "TimeoutError");
    // back while it still tries: the write lands once, at the next revision
    const before = v.revision;
    v.record.log = [...v.record.log, "through the outage"];
    const writing = s.compareAndSet(v, { withinMs: 60_000 });
    broker = await startNats({ jetstream: true, dir: join(dir, "nats"), port });
    assert.equal(await writing, before + 1);
    assert.equal((await s.get("outage.test"))?.record.log.at(-1), "through the outage");
  } finally {
    await c.close();
    await broker.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("known masters: remembered by two writers without losing either, kept beside the records but never read as one; a bad value ignored with a reason, then overwritten; a decommissioned master forgotten", async () => {
  const known = await ProvisionState.open(bucketsOn(nc), "state_masters", { onInvalid: (key, reason) => invalid.push(`${key}: ${reason}`) });
  await known.put({ ...newRecord("node1.test"), status: "done" });
  // two provisioners seeing one master each at the same moment: both kept (compare-and-set, merged)
  await Promise.all([known.masters.remember([{ identity: "puppet-eu.test", facts: { country: "de" } }], ["country"]), known.masters.remember([{ identity: "puppet-us.test", facts: { country: "us" } }], ["country"])]);
  assert.deepEqual((await known.masters.list()).map((m) => [m.identity, m.facts]), [["puppet-eu.test", { country: "de" }], ["puppet-us.test", { country: "us" }]]);
  assert.equal(await known.masters.remember([{ identity: "puppet-us.test", facts: { country: "us" } }], ["country"]), undefined, "nothing new: nothing written");
  // readers of records never see it: list, watch
  const before = known.invalid;
  assert.deepEqual((await known.list()).map((r) => r.identity), ["node1.test"]);
  const w = await known.watch();
  const seen: StateChange[] = [];
  for await (const c of w) {
    seen.push(c);
    if (c.type === "caught-up") break;
  }
  w.stop();
  assert.deepEqual(seen.map((c) => (c.type === "put" ? c.record.identity : c.type)), ["node1.test", "caught-up"]);
  assert.equal(known.invalid, before);
  // decommission forgets one
  assert.equal(await known.masters.forget("puppet-us.test"), true);
  assert.equal(await known.masters.forget("puppet-us.test"), false);
  assert.deepEqual((await known.masters.list()).map((m) => m.identity), ["puppet-eu.test"]);
  // an admin writes garbage there: read as none (said why), and the next remembered master replaces it
  const rawKnown = await bucketsOn(nc).bucket("state_masters");
  await rawKnown.put("muster/known-masters", JSON.stringify({ masters: [{ identity: "x", facts: { country: ["de"] }, seen: 1 }] }));
  assert.deepEqual(await known.masters.list(), []);
  assert.match(invalid.at(-1)!, /^muster\/known-masters: masters\[0\]: a fact that is not text/);
  await known.masters.remember([{ identity: "puppet-eu.test", facts: { country: "de" } }], ["country"]);
  assert.deepEqual((await known.masters.list()).map((m) => m.identity), ["puppet-eu.test"]);
});
