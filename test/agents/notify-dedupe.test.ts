import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { createHash } from "node:crypto";
import { jetstream } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect } from "@nats-io/transport-node";
import { inboxPrefixFor } from "../../src/broker/connect.js";
import { stringify as toYaml } from "yaml";
import { authorizationConfig, type BrokerAuthSpec } from "../../src/broker/auth.js";
import { MusterClient } from "../../src/client/client.js";
import { startNats, type NatsHandle } from "../../src/lab/nats.js";
import { spawnMuster, type MusterProcess } from "../../src/lab/processes.js";
import { DEFAULT_NOTIFY_BUCKET } from "../../src/protocol/buckets.js";
import { generateSigningKey, type SigningKey } from "../../src/protocol/signing.js";
import { ensureCA, issueCert, type CA, type CertFiles } from "../../src/security/pki.js";
import { eventually, tempDir } from "../support/collective.js";

// The notify agent's dedupe keys outlive the notifier: a real nats-server (TLS, the users muster
// generates, the notifier's KV permission), a real `muster server` hosting notify, a real HTTP
// receiver. Deliver, kill the notifier, start it again, send the same notification: one delivery.

const tmp = tempDir("notify-dedupe");
const NOTIFIER = "notifier.test";
const PLAIN = "notifier2.test"; // a node user without the bucket permission
let nats: NatsHandle;
let ca: CA;
let admin: CertFiles;
let key: SigningKey;
let receiver: Server;
let url: string;
const received: { subject: string; message: string }[] = [];
const running = new Map<string, MusterProcess>();

const nodeUser = (id: string) => `CN=${id},OU=node,O=muster`;
const spec: BrokerAuthSpec = {
  collectives: ["muster"],
  nodes: [
    { identity: NOTIFIER, users: [nodeUser(NOTIFIER)], notifier: true },
    { identity: PLAIN, users: [nodeUser(PLAIN)] },
  ],
  admins: ["CN=admin,OU=service,O=muster"],
};

before(async () => {
  ca = ensureCA(join(tmp.path, "ca"));
  admin = issueCert(ca, { name: "admin", subject: "/O=muster/OU=service/CN=admin", usage: "client" });
  key = generateSigningKey("admin").key;
  const server = issueCert(ca, { name: "nats", subject: "/O=muster/CN=nats", ips: ["127.0.0.1"], dns: ["localhost"], usage: "server" });
  nats = await startNats({ tls: { ...server, ca: ca.cert, clients: "map" }, config: authorizationConfig(spec) });
  receiver = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      received.push(JSON.parse(body) as { subject: string; message: string });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
});

after(async () => {
  await Promise.all([...running.values()].map((p) => p.stop("SIGKILL")));
  await nats?.stop();
  await new Promise((r) => receiver?.close(r));
  tmp.remove();
});

const logFile = (id: string) => join(tmp.path, id, "server.log");

function startNotifier(identity: string, notify: Record<string, unknown> = {}): void {
  const dir = join(tmp.path, identity);
  mkdirSync(dir, { recursive: true });
  const cert = issueCert(ca, { name: identity, subject: `/O=muster/OU=node/CN=${identity}`, usage: "client" });
  const file = join(dir, "server.yaml");
  writeFileSync(
    file,
    toYaml({
      identity,
      collectives: ["muster"],
      brokers: [nats.url],
      facts: { facter: false, extra: { role: "notifier" } },
      registration: { interval: 0 },
      agents: { builtin: ["notify"] },
      plugins: { notify: { timeout: 5, ...notify } },
      security: { trusted_keys: [{ name: "admin", key: key.publicKey }], trust_local_user: false },
      tls: { ca: ca.cert, ...cert },
    }),
  );
  running.set(identity, spawnMuster(["server", "--config", file], { logFile: logFile(identity) }));
}

async function crash(identity: string): Promise<void> {
  await running.get(identity)!.stop("SIGKILL"); // no goodbye: whatever was only in memory is gone
  running.delete(identity);
}

async function withClient<T>(fn: (c: MusterClient) => Promise<T>): Promise<T> {
  const c = await MusterClient.connect({ brokers: [nats.url], collective: "muster", tls: { ca: ca.cert, ...admin }, key });
  try {
    return await fn(c);
  } finally {
    await c.close();
  }
}

const up = (c: MusterClient, id: string) =>
  eventually(async () => ((await c.discover({ timeoutMs: 1500, idleMs: 200 })).includes(id) ? true : undefined), 30_000, `${id} answering`).catch((e: Error) => {
    throw new Error(`${e.message}; log: ${readFileSync(logFile(id), "utf8").split("\n").slice(-6).join("\n")}`);
  });

async function send(c: MusterClient, node: string, dedupe_key: string, subject: string): Promise<{ duplicate: boolean; delivered: number }> {
  const r = await c.call("notify", "send", { subject, message: "provisioned", recipients: [url], dedupe_key }, { nodes: [node], timeoutMs: 20_000 });
  assert.equal(r.replies.length, 1, `one reply from ${node}`);
  assert.equal(r.replies[0]!.statuscode, 0, r.replies[0]!.statusmsg);
  return r.replies[0]!.data as { duplicate: boolean; delivered: number };
}

const count = (subject: string) => received.filter((n) => n.subject === subject).length;

test("a restarted notifier still delivers each notification once: the dedupe key is in KV", async () => {
  startNotifier(NOTIFIER);
  await withClient(async (c) => {
    await up(c, NOTIFIER);
    const first = await send(c, NOTIFIER, "web1.test#1#done", "web1 done");
    assert.deepEqual([first.duplicate, first.delivered], [false, 1]);
    assert.equal(count("web1 done"), 1);
    // the key is in the bucket, with the window as its TTL (default one day)
    const st = await (await c.bucket(DEFAULT_NOTIFY_BUCKET)).status();
    assert.equal(st.values, 1);
    assert.equal(st.ttlMs, 86_400_000);
  });
  await crash(NOTIFIER);
  startNotifier(NOTIFIER);
  await withClient(async (c) => {
    await up(c, NOTIFIER);
    const again = await send(c, NOTIFIER, "web1.test#1#done", "web1 done");
    assert.equal(again.duplicate, true, "answered from the bucket");
    assert.equal(again.delivered, 1, "with the first delivery's outcome");
    // a reply comes after any delivery it made: had it sent again, the receiver would have it now
    assert.equal(count("web1 done"), 1, "delivered once across the restart");
    const other = await send(c, NOTIFIER, "web2.test#1#done", "web2 done");
    assert.deepEqual([other.duplicate, count("web2 done")], [false, 1], "a new key is delivered");
  });
  assert.doesNotMatch(readFileSync(logFile(NOTIFIER), "utf8"), /unavailable|Permissions Violation/, "the notifier's broker user reaches its bucket");
});

test("a changed dedupe window changes the bucket's TTL; dedupe_bucket: false keeps keys in memory only", async () => {
  await crash(NOTIFIER);
  startNotifier(NOTIFIER, { dedupe_window: 3600 });
  await withClient(async (c) => {
    await up(c, NOTIFIER);
    const r = await send(c, NOTIFIER, "web1.test#1#done", "web1 done");
    assert.equal(r.duplicate, true, "still within the new window");
    assert.equal((await (await c.bucket(DEFAULT_NOTIFY_BUCKET)).status()).ttlMs, 3_600_000);
  });
  // the control: without the bucket a crash forgets, and the repeat is sent again
  await crash(NOTIFIER);
  startNotifier(NOTIFIER, { dedupe_bucket: false });
  await withClient(async (c) => {
    await up(c, NOTIFIER);
    assert.equal((await send(c, NOTIFIER, "web3.test#1#done", "web3 done")).duplicate, false);
    assert.equal((await send(c, NOTIFIER, "web3.test#1#done", "web3 done")).duplicate, true, "memory still dedupes while it runs");
  });
  await crash(NOTIFIER);
  startNotifier(NOTIFIER, { dedupe_bucket: false });
  await withClient(async (c) => {
    await up(c, NOTIFIER);
    assert.equal((await send(c, NOTIFIER, "web3.test#1#done", "web3 done")).duplicate, false);
    assert.equal(count("web3 done"), 2, "memory only: a restart forgets");
  });
});

test("a notifier whose broker user may not reach the bucket still delivers, deduplicating in memory, and says why", async () => {
  startNotifier(PLAIN, { dedupe_bucket: "muster_notify_plain" });
  await withClient(async (c) => {
    await up(c, PLAIN);
    assert.equal((await send(c, PLAIN, "db1.test#1#done", "db1 done")).duplicate, false);
    assert.equal((await send(c, PLAIN, "db1.test#1#done", "db1 done")).duplicate, true);
    assert.equal(count("db1 done"), 1);
  });
  const log = readFileSync(logFile(PLAIN), "utf8");
  assert.match(log, /notify dedupe bucket unavailable/);
  assert.equal(log.match(/notify dedupe bucket unavailable/g)?.length, 1, "warned once per outage, not per request");
  assert.ok(running.get(PLAIN)!.pid > 0);
});

test("a garbled record in the bucket is a miss, not a crash: the notification is sent and the record rewritten", async () => {
  await crash(NOTIFIER);
  startNotifier(NOTIFIER);
  // written over the notifier's own credential, the only one with rights to its bucket
  const cert = { cert: join(ca.dir, `${NOTIFIER}.pem`), key: join(ca.dir, `${NOTIFIER}.key`) };
  const nc = await connect({ servers: nats.url, tls: { caFile: ca.cert, certFile: cert.cert, keyFile: cert.key }, inboxPrefix: inboxPrefixFor(NOTIFIER) });
  const dedupeKey = "web4.test#1#done";
  try {
    const kv = await new Kvm(jetstream(nc)).open(DEFAULT_NOTIFY_BUCKET);
    await kv.put(createHash("sha256").update(dedupeKey).digest("hex"), "{not json");
    await withClient(async (c) => {
      await up(c, NOTIFIER);
      assert.equal((await send(c, NOTIFIER, dedupeKey, "web4 done")).duplicate, false);
      assert.equal((await send(c, NOTIFIER, dedupeKey, "web4 done")).duplicate, true);
    });
    assert.equal(count("web4 done"), 1);
    const stored = JSON.parse((await kv.get(createHash("sha256").update(dedupeKey).digest("hex")))!.string()) as { key: string };
    assert.equal(stored.key, dedupeKey, "rewritten once delivered");
  } finally {
    await nc.close();
  }
  assert.match(readFileSync(logFile(NOTIFIER), "utf8"), /unreadable dedupe record/);
});
