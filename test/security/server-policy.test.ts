import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { stringify as toYaml } from "yaml";
import { MusterClient } from "../../src/client/client.js";
import { buildRequest, targetHeaders } from "../../src/client/request.js";
import { BROADCAST_TARGET, targetTree } from "../../src/protocol/targets.js";
import { decodeReply } from "../../src/protocol/envelope.js";
import { generateSigningKey, signRequest, type SigningKey } from "../../src/protocol/signing.js";
import { Status } from "../../src/protocol/status.js";
import { emptyFilter, type Reply, type Request } from "../../src/protocol/types.js";
import { cleanEnv, connectNats, eventually, startMusterServer, tempDir, type TestServer } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";

// A real `muster server` with an action policy (from policy_dir) and both audit destinations: who is
// allowed and refused, with which status and message, how refusals are counted, what the audit file
// and the JetStream stream hold afterwards, and every refusal of the intake (unsigned, forged,
// unknown caller, expired, replayed) next to the policy's.

const tmp = tempDir("secpolicy");
const env = cleanEnv(join(tmp.path, "config"));
const ID = "policy1.example.net";
const DIRECT = `muster.node.${ID}`;
const SKEW = 5;
const AUDIT_FILE = join(tmp.path, "log", "audit.jsonl");
const STREAM = "MUSTER_AUDIT";

const keys = {
  admin: generateSigningKey("user=admin").key,
  bob: generateSigningKey("user=bob").key,
  carol: generateSigningKey("user=carol").key,
  mallory: generateSigningKey("user=mallory").key,
};
const stranger = generateSigningKey("user=stranger").key;

// rpcutil's policy, as a file in policy_dir; discovery has none, so everyone may discover
const rpcutilPolicy = {
  rules: [
    { effect: "deny", callers: ["user=mallory"], description: "locked out" },
    { effect: "allow", callers: ["user=admin"] },
    { effect: "allow", callers: ["/^user=(bob|carol)$/"], actions: ["ping"], facts: ["country=de"], classes: ["web"] },
    { effect: "allow", callers: ["user=carol"], actions: ["get_fact"], select: "country=fr" },
  ],
};

let nats: NatsHandle;
let server: TestServer;
let nc: NatsConnection;
const clients: Record<keyof typeof keys, MusterClient> = {} as never;

before(async () => {
  nats = await startNats();
  nc = await connectNats(nats.url);
  const jsm = await jetstreamManager(nc);
  await assert.rejects(jsm.streams.info(STREAM), "the audit stream exists before the server creates it");
  const policyDir = join(tmp.path, "policies");
  mkdirSync(policyDir);
  writeFileSync(join(policyDir, "rpcutil.yaml"), toYaml(rpcutilPolicy));
  server = await startMusterServer(
    {
      identity: ID,
      broker: nats.url,
      facts: { country: "de" },
      classes: ["web"],
      config: {
        security: { trusted_keys: Object.values(keys).map((k) => ({ name: k.name, key: k.publicKey })), trust_local_user: false, max_clock_skew: SKEW },
        policy_dir: policyDir,
        audit: { file: AUDIT_FILE, stream: {} },
      },
    },
    { dir: tmp.path, env },
  );
  for (const [name, key] of Object.entries(keys)) clients[name as keyof typeof keys] = await MusterClient.connect({ nc, key });
});

after(async () => {
  await server?.stop();
  await nc?.drain().catch(() => undefined);
  await nats?.stop();
  tmp.remove();
});

async function call(who: keyof typeof keys, action: string, data: Record<string, unknown> = {}): Promise<Reply> {
  const r = await clients[who].call("rpcutil", action, data, { nodes: [ID], timeoutMs: 10_000 });
  assert.equal(r.replies.length, 1, `${who} ${action}: no reply`);
  return r.replies[0]!;
}

async function stats(): Promise<Record<string, number>> {
  const r = await call("admin", "daemon_stats");
  assert.equal(r.statuscode, Status.OK);
  return r.data as Record<string, number>;
}

function signed(key: SigningKey, over: Partial<Request> = {}): Request {
  // sent on DIRECT only: signed for that node (protocol/targets.ts)
  const base = buildRequest({ key, collective: "muster", agent: "rpcutil", action: "ping", data: {}, filter: emptyFilter(), ttl: 30, target: targetTree([ID]).target });
  const { signature: _s, ...rest } = { ...base, ...over };
  return signRequest(rest, key);
}

const enc = new TextEncoder();
async function direct(body: unknown): Promise<Reply> {
  return decodeReply((await nc.request(DIRECT, enc.encode(JSON.stringify(body)), { timeout: 10_000, headers: targetHeaders(ID, "") })).data);
}

interface AuditLine {
  time: string;
  identity: string;
  requestid: string;
  caller: string;
  sender: string;
  agent: string;
  action: string;
  data: Record<string, unknown>;
  statuscode: number;
  statusmsg: string;
}

function auditFile(): AuditLine[] {
  if (!existsSync(AUDIT_FILE)) return [];
  return readFileSync(AUDIT_FILE, "utf8")
    .split("\n")
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as AuditLine);
}

async function auditedInFile(requestid: string): Promise<AuditLine> {
  return eventually(async () => auditFile().find((l) => l.requestid === requestid), 10_000, `audit line for ${requestid}`);
}

describe("action policies on a running server", () => {
  test("allowed: the admin may call anything; bob and carol may ping because the node is in de with class web", async () => {
    assert.equal((await call("admin", "ping")).statuscode, Status.OK);
    assert.equal((await call("admin", "get_fact", { fact: "country" })).data.value, "de");
    assert.equal((await call("bob", "ping")).statuscode, Status.OK);
    assert.equal((await call("carol", "ping")).statuscode, Status.OK);
  });

  test("denied: status 1 (Aborted), a message naming caller, agent#action and the rule, and the denied counter", async () => {
    const before = await stats();
    const m = await call("mallory", "ping");
    assert.equal(m.statuscode, Status.Aborted);
    assert.equal(m.statusmsg, `denied by policy on ${ID}: user=mallory may not call rpcutil#ping (rule 1)`);
    assert.deepEqual(m.data, {});

    const b = await call("bob", "get_fact", { fact: "country" }); // only ping is allowed to bob
    assert.equal(b.statuscode, Status.Aborted);
    assert.match(b.statusmsg, /^denied by policy on policy1\.example\.net: user=bob may not call rpcutil#get_fact \(no rule allows it\)$/);

    const c = await call("carol", "get_fact", { fact: "country" }); // rule 4 needs country=fr
    assert.equal(c.statuscode, Status.Aborted);
    assert.match(c.statusmsg, /no rule allows it/);

    // the policy runs before validation: a refused caller learns nothing about the inputs
    const v = await call("bob", "get_fact", { fact: 42 });
    assert.equal(v.statuscode, Status.Aborted);

    const now = await stats();
    assert.equal(now.denied! - before.denied!, 4);
    assert.equal(now.invalid_input! - before.invalid_input!, 0);
    // the denied requests were not dispatched: only the two daemon_stats calls passed
    assert.equal(now.passed! - before.passed!, 1);
  });

  test("denied on broadcast too: the refusal is a reply, and the agent never runs", async () => {
    const req = signed(keys.mallory, { target: BROADCAST_TARGET });
    const m = await nc.request("muster.broadcast.agent.rpcutil", enc.encode(JSON.stringify(req)), { timeout: 10_000 });
    const r = decodeReply(m.data);
    assert.equal(r.statuscode, Status.Aborted);
    assert.match(r.statusmsg, /denied by policy/);
    // discovery has no policy: mallory still finds the node
    assert.deepEqual(await clients.mallory.discover({ timeoutMs: 3000 }), [ID]);
  });
});

describe("refusals, each with its status, message and counter", () => {
  // [name, message, status, reason, counter]
  const cases: [string, () => unknown, number, RegExp, string][] = [
    ["unsigned: no signature field", () => { const { signature: _s, ...rest } = signed(keys.admin); return rest; }, Status.InvalidData, /field 'signature' must be a string/, "unvalidated"],
    ["unsigned: empty signature", () => ({ ...signed(keys.admin), signature: "" }), Status.Aborted, /signature does not verify/, "badsig"],
    ["bad signature: data changed after signing", () => ({ ...signed(keys.admin), data: { x: 1 } }), Status.Aborted, /signature does not verify/, "badsig"],
    ["bad signature: signed by another key", () => ({ ...signed(keys.admin), signature: signed(keys.bob).signature }), Status.Aborted, /signature does not verify/, "badsig"],
    ["unknown caller: key not trusted", () => signed(stranger), Status.Aborted, /caller "user=stranger" is not trusted/, "badsig"],
    ["unknown caller: trusted key under another name", () => signed(keys.bob, { caller: "user=admin" }), Status.Aborted, /caller "user=admin" is not trusted/, "badsig"],
    ["expired", () => signed(keys.admin, { time: Date.now() - (30 + SKEW + 30) * 1000 }), Status.Aborted, /expired/, "ttlexpired"],
    ["from the future", () => signed(keys.admin, { time: Date.now() + (SKEW + 30) * 1000 }), Status.Aborted, /future/, "ttlexpired"],
    ["policy denied", () => signed(keys.mallory), Status.Aborted, /denied by policy/, "denied"],
  ];
  for (const [name, make, status, reason, counter] of cases) {
    test(name, async () => {
      const before = await stats();
      const r = await direct(make());
      assert.equal(r.statuscode, status, r.statusmsg);
      assert.match(r.statusmsg, reason);
      assert.equal(r.sender, ID);
      const now = await stats();
      assert.equal(now[counter]! - before[counter]!, 1, counter);
    });
  }

  test("replayed: the same signed bytes twice; the second is refused", async () => {
    const req = signed(keys.admin);
    assert.equal((await direct(req)).statuscode, Status.OK);
    const before = await stats();
    const again = await direct(req);
    assert.equal(again.statuscode, Status.Aborted);
    assert.match(again.statusmsg, new RegExp(`request ${req.id} was already received \\(replay\\)`));
    assert.equal((await stats()).replayed! - before.replayed!, 1);
  });
});

describe("the audit trail", () => {
  test("the file holds one JSON line per handled request: allowed, denied and invalid", async () => {
    const started = Date.now();
    const ok = await call("admin", "get_fact", { fact: "country" });
    const denied = await call("mallory", "get_fact", { fact: "country" });
    const invalid = await call("admin", "get_fact", { fact: "$(reboot)" });
    assert.equal(invalid.statuscode, Status.InvalidData);

    const a = await auditedInFile(ok.requestid);
    assert.equal(a.identity, ID);
    assert.equal(a.caller, "user=admin");
    assert.equal(a.agent, "rpcutil");
    assert.equal(a.action, "get_fact");
    assert.deepEqual(a.data, { fact: "country" });
    assert.equal(a.statuscode, 0);
    assert.equal(a.statusmsg, "OK");
    assert.match(a.sender, /:\d+$/);
    assert.ok(Date.parse(a.time) >= started && Date.parse(a.time) <= Date.now(), `${a.time}: written while this test ran`);
    assert.match(a.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

    const d = await auditedInFile(denied.requestid);
    assert.equal(d.caller, "user=mallory");
    assert.equal(d.statuscode, Status.Aborted);
    assert.match(d.statusmsg, /denied by policy/);
    assert.deepEqual(d.data, { fact: "country" });

    const i = await auditedInFile(invalid.requestid);
    assert.equal(i.statuscode, Status.InvalidData);
    assert.deepEqual(i.data, { fact: "$(reboot)" }, "the arguments as sent, not as validated");

    // refusals before the pipeline (forged, stale, replayed) carry no authenticated caller: counted, not audited
    const forged = { ...signed(keys.admin), data: { forged: true } };
    await direct(forged);
    const s = await stats();
    assert.equal(s.audit_dropped, 0);
    assert.ok(s.audit_written! >= 3, `audit_written ${s.audit_written}`);
    assert.equal(auditFile().filter((l) => l.requestid === forged.id).length, 0);
    for (const l of auditFile()) assert.deepEqual(Object.keys(l).sort(), ["action", "agent", "caller", "data", "identity", "requestid", "sender", "statuscode", "statusmsg", "time"]);
  });

  test("the server created the JetStream stream and publishes the same records to it", async () => {
    const ok = await call("bob", "ping");
    const denied = await call("mallory", "ping");
    const jsm = await jetstreamManager(nc);
    const info = await jsm.streams.info(STREAM);
    assert.deepEqual(info.config.subjects, ["muster.audit.>"]);
    const found = await eventually(
      async () => {
        const last = (await jsm.streams.info(STREAM)).state.last_seq;
        const records: (AuditLine & { subject: string })[] = [];
        for (let seq = 1; seq <= last; seq++) {
          const m = await jsm.streams.getMessage(STREAM, { seq });
          if (m) records.push({ ...(m.json() as AuditLine), subject: m.subject });
        }
        const a = records.find((r) => r.requestid === ok.requestid);
        const b = records.find((r) => r.requestid === denied.requestid);
        return a && b ? { a, b, records } : undefined;
      },
      10_000,
      "records in the audit stream",
    );
    assert.equal(found.a.subject, `muster.audit.${ID}`);
    assert.equal(found.a.caller, "user=bob");
    assert.equal(found.a.statuscode, 0);
    assert.equal(found.b.caller, "user=mallory");
    assert.equal(found.b.statuscode, Status.Aborted);
    // every record of the file reached the stream too, once (msg ids deduplicate retries)
    const inFile = new Set(auditFile().map((l) => `${l.requestid}|${l.statuscode}`));
    const inStream = found.records.map((r) => `${r.requestid}|${r.statuscode}`);
    assert.equal(new Set(inStream).size, inStream.length);
    for (const k of inStream) assert.ok(inFile.has(k), `${k} in the stream but not in the file`);
    const s = await stats();
    assert.ok(s.audit_published! >= 2, `audit_published ${s.audit_published}`);
    assert.equal(s.audit_dropped, 0);
  });

  test("the server is still well: no crash, no unexpected errors in its log", () => {
    assert.equal(server.child.exitCode, null);
    assert.doesNotMatch(server.stderr(), /unhandled|uncaught|TypeError|RangeError|cannot write the audit|audit stream unavailable/i);
  });
});
