import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { bucketsOn, type Bucket } from "../../src/broker/bucket.js";
import { newRecord, recordKey, type NodeRecord } from "../../src/protocol/provision-record.js";
import { ProvisionState, type StateChange } from "../../src/provisioner/state.js";
import { startNats, type NatsHandle } from "../support/index.js";
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

test("an empty bucket's watch catches up at once; openExisting does not create", async () => {
  assert.equal(await ProvisionState.openExisting(bucketsOn(nc), "never_made"), undefined);
  const empty = await ProvisionState.open(bucketsOn(nc), "state_empty");
  const w = await empty.watch();
  const first = await w[Symbol.asyncIterator]().next();
  assert.deepEqual(first.value, { type: "caught-up" });
  w.stop();
  assert.deepEqual(await empty.list(), []);
});
