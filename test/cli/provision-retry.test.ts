import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { newRecord, type NodeRecord } from "../../src/protocol/provision-record.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { bucketsOn } from "../../src/broker/bucket.js";
import { startNats, type NatsHandle } from "../support/index.js";
import { cleanEnv, connectNats, runCli, tempDir } from "../support/collective.js";

// `muster provision retry` against records in a real JetStream KV bucket: only failed nodes are
// retried, an unknown identity is refused, and a done node stays done unless --force.

const tmp = tempDir("provision-retry");
const BUCKET = "muster_provision_retry_test";
let nats: NatsHandle;
let nc: NatsConnection;
let store: ProvisionState;
let env: NodeJS.ProcessEnv;

const rec = (identity: string, status: NodeRecord["status"], extra: Partial<NodeRecord> = {}): NodeRecord => ({ ...newRecord(identity), status, rounds: 1, ...extra });

before(async () => {
  nats = await startNats({ jetstream: true });
  nc = await connectNats(nats.url);
  store = await ProvisionState.open(bucketsOn(nc), BUCKET);
  env = cleanEnv(join(tmp.path, "config"), { MUSTER_BROKER: nats.url });
  await store.put(rec("failed.test", "failed", { stage: "request_csr", attempts: 5, lastError: "CSR never arrived" }));
  await store.put(rec("failed2.test", "failed", { lastError: "boom" }));
  await store.put(rec("done.test", "done", { stage: "notify", finishedAt: Date.now() }));
  await store.put(rec("done2.test", "done", { stage: "notify", finishedAt: Date.now() }));
  await store.put(rec("pending.test", "pending"));
  await store.put(rec("busy.test", "in_progress", { owner: "prov-a", current: "bootstrap" }));
});

after(async () => {
  await nc?.drain().catch(() => undefined);
  await nats?.stop();
  tmp.remove();
});

const retry = (...args: string[]) => runCli(["provision", "retry", "--bucket", BUCKET, ...args], { env, cwd: tmp.path });
const status = async (id: string) => (await store.get(id))?.record;

test("an unknown identity is refused with a clear error, exit 1, and no record is created", async () => {
  const r = await retry("nosuch.node");
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.match(r.stderr, /the provisioner has no record of nosuch\.node: check the spelling against `muster provision status`/);
  assert.doesNotMatch(r.stdout, /queued/);
  assert.equal(await status("nosuch.node"), undefined);
});

test("a done node is refused and stays done", async () => {
  const r = await retry("done.test");
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.match(r.stderr, /done\.test is done; retry applies to failed and gone nodes \(--force/);
  assert.equal((await status("done.test"))!.status, "done");
});

test("pending and in-progress nodes are refused", async () => {
  const p = await retry("pending.test");
  assert.equal(p.code, 1);
  assert.match(p.stderr, /pending\.test is pending/);
  const b = await retry("busy.test", "--force");
  assert.equal(b.code, 1);
  assert.match(b.stderr, /busy\.test is being provisioned right now \(by prov-a\)/);
  assert.equal((await status("busy.test"))!.status, "in_progress");
});

test("a failed node is queued: pending, stage, attempts and error cleared", async () => {
  const r = await retry("failed.test");
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, "failed.test: queued for provisioning\n");
  const after = (await status("failed.test"))!;
  assert.equal(after.status, "pending");
  assert.equal(after.stage, undefined);
  assert.equal(after.attempts, 0);
  assert.equal(after.lastError, undefined);
  assert.match(after.log.at(-1)!, /retry requested by \S+ \(muster provision retry\)$/, "who asked");
  assert.equal(after.history?.at(-1)?.event, "retried");
});

test("one refused identity among several: nothing changes", async () => {
  const r = await retry("failed2.test", "nosuch.node", "done.test");
  assert.equal(r.code, 1);
  assert.match(r.stderr, /no record of nosuch\.node/);
  assert.match(r.stderr, /done\.test is done/);
  assert.match(r.stderr, /Nothing was changed/);
  assert.equal((await status("failed2.test"))!.status, "failed");
});

test("--force starts a done node over; an unknown one is still refused", async () => {
  const unknown = await retry("--force", "nosuch.node");
  assert.equal(unknown.code, 1);
  const r = await retry("--force", "done2.test");
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /done2\.test: was done; queued for provisioning once it waits in the provisioning collective/);
  const after = (await status("done2.test"))!;
  assert.equal(after.status, "pending");
  assert.equal(after.finishedAt, undefined);
});

test("provision status of an unknown node: exit 1 with the same advice", async () => {
  const r = await runCli(["provision", "status", "--bucket", BUCKET, "nosuch.node"], { env, cwd: tmp.path });
  assert.equal(r.code, 1);
  assert.match(r.stderr, /no record of nosuch\.node/);
});
