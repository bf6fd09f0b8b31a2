import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { bucketsOn } from "../../src/broker/bucket.js";
import { AliveStore } from "../../src/health/stores.js";
import { silentLogger } from "../../src/log.js";
import { DEFAULT_STATE_BUCKET } from "../../src/protocol/buckets.js";
import { encodeHeartbeat, heartbeatSubject } from "../../src/protocol/heartbeat.js";
import { newRecord, type NodeRecord } from "../../src/protocol/provision-record.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { WebConfigSchema } from "../../src/web/config.js";
import { startWeb, type WebHandle } from "../../src/web/daemon.js";
import { eventually } from "../support/collective.js";
import { freePort } from "../support/index.js";
import { startLabBroker, type LabBroker } from "./lab-broker.js";
import { bearer } from "./support.js";

// A gone node's actions in the console (POST /api/board/:identity/retry and /forget), as api.test.ts
// tests a failed node's retry: the console against a real nats-server with the lab's users and
// permissions, the records in the real state bucket, the audit in the console's audit file. A gone
// node is one the provisioner marked `gone` mid-round (docs/provisioner.md, Machines that die): it
// may be retried now, or forgotten, by an operator only.

const OPERATOR = "operator-token-gone-0123456789ab";
const VIEWER = "viewer-token-gone-0123456789abcd";
const RETRY = "gone-retry.test";
const FORGET = "gone-forget.test";

let dir: string;
let lab: LabBroker;
let nc: NatsConnection;
let store: ProvisionState;
let web: WebHandle;
let base: string;
let auditFile: string;

const gone = (identity: string): NodeRecord => ({
  ...newRecord(identity, Date.now() - 60_000),
  status: "in_progress",
  owner: "prov-a",
  current: "bootstrap",
  stage: "sign_csr",
  master: "puppet1.test",
  rounds: 1,
  startedAt: Date.now() - 60_000,
  gone: { since: Date.now() - 30_000, reason: "no answer to 3 pings in 30 s" },
  history: [{ at: Date.now() - 60_000, round: 1, event: "started", by: "prov-a" }],
});

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "muster-web-gone-"));
  process.env.MUSTER_CONFIG_DIR = join(dir, "keys");
  lab = await startLabBroker({ dir });
  // this process (the console, the test's reads) is the lab's admin
  const admin = lab.tls("admin");
  Object.assign(process.env, { MUSTER_TLS_CA: admin.ca, MUSTER_TLS_CERT: admin.cert, MUSTER_TLS_KEY: admin.key });
  nc = await lab.connect("admin");
  store = await ProvisionState.open(bucketsOn(nc), DEFAULT_STATE_BUCKET);
  await store.put(gone(RETRY));
  await store.put(gone(FORGET));
  writeFileSync(join(dir, "tokens"), `${OPERATOR} operator alice\n${VIEWER} viewer bob\n`);
  auditFile = join(dir, "audit.jsonl");
  const cfg = WebConfigSchema.parse({ listen: `127.0.0.1:${await freePort()}`, auth: { tokens_file: join(dir, "tokens") }, registry: { url: `http://127.0.0.1:${await freePort()}` }, state_bucket: DEFAULT_STATE_BUCKET, audit: { file: auditFile } });
  web = await startWeb(cfg, silentLogger, { broker: lab.url, probeMs: 300 });
  base = web.url;
  // the console is up once it reaches the broker and its board holds both records
  await eventually(async () => {
    const s = (await (await fetch(`${base}/api/status`, { headers: bearer(VIEWER) })).json()) as { broker: { ok: boolean } };
    if (!s.broker.ok) return undefined;
    const b = (await (await fetch(`${base}/api/board`, { headers: bearer(VIEWER) })).json()) as { nodes: { identity: string; gone?: unknown }[] };
    return b.nodes.filter((n) => n.identity === RETRY || n.identity === FORGET).length === 2 ? true : undefined;
  }, 15_000, "the console reaching the broker and showing both gone nodes");
  // the node still has a heartbeat on record (its last, before it went): forget drops that too
  nc.publish(heartbeatSubject(FORGET), encodeHeartbeat({ identity: FORGET, time: Date.now(), interval: 10, version: "1", phase: "waiting", state: "up", status: {} }));
  const alive = (await AliveStore.open(bucketsOn(nc)))!;
  await eventually(async () => ((await alive.get(FORGET)) ? true : undefined), 10_000, "the gone node's last heartbeat in the alive bucket");
});

after(async () => {
  await web?.stop();
  await nc?.drain().catch(() => undefined);
  await lab?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const post = (path: string, headers: Record<string, string>) => fetch(`${base}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: "{}" });
const csrfOf = async (token: string) => ((await (await fetch(`${base}/api/session`, { headers: bearer(token) })).json()) as { csrf: string }).csrf;
const asOperator = async () => ({ ...bearer(OPERATOR), "x-csrf-token": await csrfOf(OPERATOR) });

interface AuditLine {
  caller: string;
  action: string;
  identity: string;
  statuscode: number;
  statusmsg: string;
  data: Record<string, unknown>;
}
/** The audit file's records matching, once there are `n` of them. */
const audited = (n: number, pred: (l: AuditLine) => boolean, what: string) =>
  eventually(
    async () => {
      const lines = readFileSync(auditFile, "utf8").trim().split("\n").filter(Boolean).map((l) => JSON.parse(l) as AuditLine).filter(pred);
      return lines.length >= n ? lines : undefined;
    },
    10_000,
    what,
  );

test("a gone node's retry and forget are refused to a viewer (403) and without the CSRF token (403), and change nothing", async () => {
  for (const [action, identity] of [["retry", RETRY], ["forget", FORGET]] as const) {
    const viewer = await post(`/api/board/${identity}/${action}`, { ...bearer(VIEWER), "x-csrf-token": await csrfOf(VIEWER) });
    assert.equal(viewer.status, 403, action);
    assert.equal(((await viewer.json()) as { error: { code: string } }).error.code, "forbidden", action);
    const noCsrf = await post(`/api/board/${identity}/${action}`, bearer(OPERATOR));
    assert.equal(noCsrf.status, 403, action);
    assert.equal(((await noCsrf.json()) as { error: { code: string } }).error.code, "csrf", action);
    const rec = (await store.get(identity))!.record;
    assert.deepEqual([rec.status, rec.gone?.reason, rec.history?.length], ["in_progress", "no answer to 3 pings in 30 s", 1], `${action}: the record as it was`);
  }
  // each refusal is in the audit, naming who
  const refused = await audited(4, (l) => (l.action === "retry" || l.action === "forget") && l.statuscode !== 0, "the four refusals in the audit file");
  for (const action of ["retry", "forget"]) {
    assert.ok(refused.some((l) => l.action === action && l.caller === "web:bob" && /forbidden/.test(l.statusmsg)), JSON.stringify(refused));
    assert.ok(refused.some((l) => l.action === action && l.caller === "web:alice" && /csrf/.test(l.statusmsg)), JSON.stringify(refused));
  }
});

test("an operator's retry of a gone node queues it at once: the record pending, no longer gone, the retry noted with who, and audited", async () => {
  const r = await post(`/api/board/${RETRY}/retry`, await asOperator());
  assert.equal(r.status, 200, await r.clone().text());
  assert.deepEqual(await r.json(), { ok: true });
  const rec = (await store.get(RETRY))!.record;
  assert.equal(rec.status, "pending");
  assert.equal(rec.gone, undefined);
  assert.equal(rec.current, undefined);
  assert.match(rec.log.at(-1)!, /retry requested by alice \(web console\) \(was gone\)$/);
  assert.deepEqual(
    rec.history?.map((h) => [h.event, h.by, h.detail]),
    [
      ["started", "prov-a", undefined],
      ["retried", "alice (web console)", "was gone"],
    ],
  );
  // a pending node is not retried again
  assert.equal((await post(`/api/board/${RETRY}/retry`, await asOperator())).status, 409);
  const [line] = await audited(1, (l) => l.action === "retry" && l.identity === RETRY && l.statuscode === 0, "the retry in the audit file");
  assert.equal(line!.caller, "web:alice");
  assert.ok(line!.data.signature, "signed with the console's key");
});

test("an operator's forget of a gone node drops its record and its heartbeat, and is audited with who and what it was", async () => {
  const r = await post(`/api/board/${FORGET}/forget`, await asOperator());
  assert.equal(r.status, 200, await r.clone().text());
  assert.deepEqual(await r.json(), { ok: true });
  assert.equal(await store.get(FORGET), undefined, "no record in the state bucket");
  assert.equal(await (await AliveStore.open(bucketsOn(nc)))!.get(FORGET), undefined, "no heartbeat in the alive bucket");
  // the board stops listing it
  await eventually(async () => {
    const b = (await (await fetch(`${base}/api/board`, { headers: bearer(VIEWER) })).json()) as { nodes: { identity: string }[] };
    return b.nodes.some((n) => n.identity === FORGET) ? undefined : true;
  }, 10_000, "the forgotten node off the board");
  assert.equal((await post(`/api/board/${FORGET}/forget`, await asOperator())).status, 404, "nothing left to forget");
  const [line] = await audited(1, (l) => l.action === "forget" && l.identity === FORGET && l.statuscode === 0, "the forget in the audit file");
  assert.equal(line!.caller, "web:alice");
  assert.deepEqual([line!.data.was, line!.data.gone], ["in_progress", "no answer to 3 pings in 30 s"]);
});

test("the broker refused nothing the console asked for (the lab's permissions)", () => {
  assert.deepEqual(lab.violations(), []);
});
