import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connect, type Msg, type NatsConnection } from "@nats-io/transport-node";
import { stringify as toYaml } from "yaml";
import { authorizationConfig, type BrokerAuthSpec } from "../../src/broker/auth.js";
import { MusterClient } from "../../src/client/client.js";
import { startNats, type NatsHandle } from "../../src/lab/nats.js";
import { spawnMuster, type MusterProcess } from "../../src/lab/processes.js";
import { DEFAULT_NODE_KEYS_BUCKET } from "../../src/protocol/buckets.js";
import { decodeRequest, encodeReply } from "../../src/protocol/envelope.js";
import { encodeNodeKeyEntry, nodeKeyName } from "../../src/protocol/node-keys.js";
import { generateSigningKey, signingKeyFromPem, signMessage, type SigningKey } from "../../src/protocol/signing.js";
import { Status } from "../../src/protocol/status.js";
import { REPLY_PROTOCOL, type Reply } from "../../src/protocol/types.js";
import { ensureCA, issueCert, type CA, type CertFiles } from "../../src/security/pki.js";
import { eventually, tempDir } from "../support/collective.js";

// Issue 13 with the lab's permissions: a real nats-server with the users muster generates, each
// waiting node with its own bootstrap credential (confined to its own direct subject), node B a
// real waiting `muster server`. A second process holding node A's bootstrap credential tries to
// answer for B: it cannot read B's directed requests, so the key pinned for B is B's own, and it
// cannot write the key directory the provisioner vouches in. (Its answers under B's name with its
// own key are dropped by the client: test/client/verify.test.ts; refused by the provisioner and
// never signed for: test/security/authenticity.test.ts, test/puppet/csr-binding.test.ts.)

const tmp = tempDir("impostor");
const A = "wait-a.test";
const B = "wait-b.test";
const user = (name: string) => `CN=${name},OU=service,O=muster`;
const spec: BrokerAuthSpec = {
  collectives: ["muster"],
  provisioning_collective: "provisioning",
  nodes: [],
  bootstrap: [
    { user: user("bootstrap-a"), identity: A },
    { user: user("bootstrap-b"), identity: B },
  ],
  provisioners: [user("provisioner")],
  admins: [user("admin")],
  registries: [],
};
let nats: NatsHandle;
let ca: CA;
const certs: Record<string, CertFiles> = {};
const provKey = generateSigningKey("provisioner").key;
const mallory = generateSigningKey("mallory").key;
let nodeB: MusterProcess;
let bKey: SigningKey;

before(async () => {
  ca = ensureCA(join(tmp.path, "ca"));
  for (const n of ["admin", "provisioner", "bootstrap-a", "bootstrap-b"]) certs[n] = issueCert(ca, { name: n, subject: `/O=muster/OU=service/CN=${n}`, usage: "client" });
  const server = issueCert(ca, { name: "nats", subject: "/O=muster/CN=nats", ips: ["127.0.0.1"], dns: ["localhost"], usage: "server" });
  nats = await startNats({ tls: { ...server, ca: ca.cert, clients: "map" }, config: authorizationConfig(spec) });
  const d = join(tmp.path, "b");
  mkdirSync(d, { recursive: true });
  const cfg = {
    identity: B,
    collectives: ["muster"],
    brokers: [nats.url],
    facts: { facter: false, extra: { role: "web" } },
    registration: { interval: 0 },
    agents: { builtin: ["provision"] },
    plugins: { provision: { confdir: join(d, "etc"), vardir: join(d, "var"), ssldir: join(d, "ssl"), lock_file: join(d, "provision.lock"), disable_file: join(d, "provision.disabled") } },
    security: { trusted_keys: [{ name: "provisioner", key: provKey.publicKey }], trust_local_user: false, node_key: join(d, "node.key") },
    tls: { ca: ca.cert, use_puppet_cert: true },
    provisioning: { collective: "provisioning", callers: ["provisioner"], cert: certs["bootstrap-b"]!.cert, key: certs["bootstrap-b"]!.key },
  };
  writeFileSync(join(d, "server.yaml"), toYaml(cfg));
  nodeB = spawnMuster(["server", "--config", join(d, "server.yaml")], { logFile: join(d, "server.log") });
  await eventually(async () => {
    try {
      return (bKey = signingKeyFromPem(B, readFileSync(join(d, "node.key"), "utf8")));
    } catch {
      return undefined;
    }
  }, 30_000, "B's node key created at first start");
});

after(async () => {
  await nodeB?.stop("SIGKILL");
  await nats?.stop();
  tmp.remove();
});

const tlsOf = (c: CertFiles) => ({ ca: ca.cert, cert: c.cert, key: c.key });

async function rawAs(who: string): Promise<{ nc: NatsConnection; errors: string[] }> {
  const nc = await connect({ servers: nats.url, tls: { caFile: ca.cert, certFile: certs[who]!.cert, keyFile: certs[who]!.key } });
  const errors: string[] = [];
  void (async () => {
    for await (const s of nc.status()) if (s.type === "error") errors.push(String((s.error as Error)?.message ?? s.error));
  })();
  return { nc, errors };
}

function inNameOfB(m: Msg): Uint8Array {
  const req = decodeRequest(m.data);
  return encodeReply(signMessage<Reply>({ protocol: REPLY_PROTOCOL, requestid: req.id, sender: B, agent: req.agent, action: req.action, time: Date.now(), statuscode: Status.OK, statusmsg: "OK", data: { has_cert: false, certname: B, fingerprint: null } }, mallory));
}

test("A's bootstrap credential cannot read B's directed requests, so B's own key answers them; a bootstrap credential cannot write the key directory (the provisioner vouches, admins enroll), admins read it, and B's replies verify against it", async () => {
  const imp = await rawAs("bootstrap-a");
  const seen: string[] = [];
  // what it may not read: B's direct subject
  imp.nc.subscribe(`provisioning.node.${B}`, {
    callback: (err, m) => {
      if (err) return; // the broker's refusal arrives here too
      seen.push(m.subject);
      if (m.reply) m.respond(inNameOfB(m));
    },
  });
  // what it may: broadcasts, which it answers in B's name
  let answered = 0;
  const asB = imp.nc.subscribe("provisioning.broadcast.agent.>", {
    callback: (_e, m) => {
      if (!m.reply) return;
      answered++;
      m.respond(inNameOfB(m));
    },
  });
  await eventually(async () => (await imp.nc.flush(), imp.errors.some((e) => /permissions violation.*provisioning\.node\.wait-b\.test/i.test(e)) ? true : undefined), 10_000, "the broker refuses A's credential B's subject");

  const prov = await MusterClient.connect({ brokers: [nats.url], collective: "provisioning", tls: tlsOf(certs.provisioner!), key: provKey });
  try {
    // B waiting: discovery finds it (possibly twice over, once from the impostor: discovery is a listing)
    await eventually(async () => ((await prov.discover({ timeoutMs: 1500, idleMs: 200 })).includes(B) ? true : undefined), 30_000, "B answering discovery");
    assert.ok(answered > 0, "the impostor saw the broadcasts and answered them as B");
    // the provisioner's first directed request to B: only B reads it, so only B's key can be pinned
    const first = await prov.call("provision", "has_cert", {}, { nodes: [B], timeoutMs: 10_000 });
    assert.equal(first.replies.length, 1);
    assert.equal(first.replies[0]!.pubkey, bKey.publicKey, "the reply on B's subject is signed by B's own key");
    assert.deepEqual(first.rejected, []);
    assert.deepEqual(seen, [], `nothing of B's subject reached the impostor (${imp.errors.join(" | ")})`);

    // the provisioner vouches for B's key; a bootstrap credential cannot write the directory
    const kv = await prov.bucket(DEFAULT_NODE_KEYS_BUCKET, { create: { history: 1 } });
    await kv.put(nodeKeyName(B), encodeNodeKeyEntry({ identity: B, pubkey: bKey.publicKey, source: "pinned", time: Date.now(), by: "test" }));
    imp.nc.publish(`$KV.${DEFAULT_NODE_KEYS_BUCKET}.${nodeKeyName(B)}`, encodeNodeKeyEntry({ identity: B, pubkey: mallory.publicKey, source: "certified", time: Date.now(), by: "mallory" }));
    await eventually(async () => (await imp.nc.flush(), imp.errors.some((e) => /permissions violation.*KV\.muster_node_keys/i.test(e)) ? true : undefined), 10_000, "the broker refuses the impostor's directory write");
    assert.equal(JSON.parse(new TextDecoder().decode((await kv.get(nodeKeyName(B)))!.value)).pubkey, bKey.publicKey);

    // an admin reads the directory; a directed call to B is verified; the impostor's answers, sent to a
    // broadcast call's inbox in B's name, are dropped as another key than the directory's
    const admin = await MusterClient.connect({ brokers: [nats.url], collective: "muster", tls: tlsOf(certs.admin!), key: generateSigningKey("admin").key });
    try {
      const entry = await (await admin.bucket(DEFAULT_NODE_KEYS_BUCKET)).get(nodeKeyName(B));
      assert.equal(JSON.parse(new TextDecoder().decode(entry!.value)).pubkey, bKey.publicKey, "admins read the directory");
    } finally {
      await admin.close();
    }
    const prov2 = await MusterClient.connect({ brokers: [nats.url], collective: "provisioning", tls: tlsOf(certs.provisioner!), key: provKey });
    try {
      const again = await prov2.call("provision", "has_cert", {}, { nodes: [B], timeoutMs: 10_000 });
      assert.equal(again.stats.verified, 1, "B's reply verified against the directory");
      assert.deepEqual(again.unverified, []);
      // broadcast listings are display-only and not verified (docs/security.md): an answer in the name
      // of a node the directory knows, signed by another key, shows. (Answers in B's name race B's
      // own, and a listing keeps a sender's first: a name only the impostor answers for is certain.
      // The broker lets a bootstrap credential answer a request once, so it stops answering as B.)
      asB.unsubscribe();
      const C = "wait-c.test";
      await kv.put(nodeKeyName(C), encodeNodeKeyEntry({ identity: C, pubkey: bKey.publicKey, source: "pinned", time: Date.now(), by: "test" }));
      imp.nc.subscribe("provisioning.broadcast.agent.provision", {
        callback: (_e, m) => {
          if (!m.reply) return;
          const req = decodeRequest(m.data);
          m.respond(encodeReply(signMessage<Reply>({ protocol: REPLY_PROTOCOL, requestid: req.id, sender: C, agent: req.agent, action: req.action, time: Date.now(), statuscode: Status.OK, statusmsg: "OK", data: { has_cert: false, certname: C, fingerprint: null } }, mallory)));
        },
      });
      await imp.nc.flush();
      const res = await prov2.broadcastRequest("provision", "has_cert", {}, { fact: [], class: [], identity: [], agent: [], compound: [] }, { timeoutMs: 3000, idleMs: 500 });
      assert.ok(res.some((r) => r.sender === C && r.pubkey === mallory.publicKey), "broadcast listings are not verified: the impostor's answer is there, as documented");
    } finally {
      await prov2.close();
    }
  } finally {
    await prov.close();
    await imp.nc.close();
  }
});
