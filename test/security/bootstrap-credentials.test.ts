import { heartbeatSubject } from "../../src/protocol/heartbeat.js";
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { stringify as toYaml } from "yaml";
import { authorizationConfig, bootstrapUser, brokerUsers, type BrokerAuthSpec } from "../../src/broker/auth.js";
import { issueBootstrapCredential, writeBootstrapCredential } from "../../src/broker/bootstrap.js";
import { inboxPrefixFor } from "../../src/broker/connect.js";
import { MusterClient } from "../../src/client/client.js";
import { labBrokerSpec } from "../../src/lab/lab.js";
import { nodeServerConfig } from "../../src/config/node.js";
import { startNats, type NatsHandle } from "../../src/lab/nats.js";
import { spawnMuster, type MusterProcess } from "../../src/lab/processes.js";
import { generateSigningKey, type SigningKey } from "../../src/protocol/signing.js";
import { newRecord } from "../../src/protocol/provision-record.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { AUDIT_STREAM, ensureFleetStores } from "../../src/fleet/stores.js";
import { ensureCA, issueCert, type CA, type CertFiles } from "../../src/security/pki.js";
import { cleanEnv, eventually, rawConnection, runCli, tempDir } from "../support/collective.js";

// One bootstrap credential per node, on a real nats-server with the lab's users (TLS,
// verify_and_map): a process holding node A's credential cannot reach node B's provisioning
// subject, cannot read the provisioner's requests to B and cannot answer them, while B is
// provisioned as usual; a single-use credential is refused once its node is provisioned, and the
// node carries on with its Puppet certificate. (That a reply or event claiming to be B is refused
// for its signature is h-sign's half, test/security/ authenticity tests.)

const tmp = tempDir("bootcreds");
const A = "nodea.test";
const B = "nodeb.test";
/** A waiting node nothing else in this file touches: what it asks the broker for is its own doing. */
const C = "nodec.test";
const SERVICES = ["notifier.test"];
let nats: NatsHandle;
let ca: CA;
let puppetCA: CA;
let spec: BrokerAuthSpec;
const svc: Record<"admin" | "provisioner", CertFiles> = {} as never;
const keys: Record<"admin" | "provisioner", SigningKey> = {} as never;
const boot: Record<string, CertFiles> = {};
const servers: MusterProcess[] = [];

before(async () => {
  ca = ensureCA(join(tmp.path, "ca"));
  puppetCA = ensureCA(join(tmp.path, "puppet-ca"), "/CN=Puppet CA: test");
  for (const n of ["admin", "provisioner"] as const) {
    svc[n] = issueCert(ca, { name: n, subject: `/O=muster/OU=service/CN=${n}`, usage: "client" });
    keys[n] = generateSigningKey(n).key;
  }
  for (const id of [A, B, C]) boot[id] = writeBootstrapCredential(issueBootstrapCredential(ca, id), join(tmp.path, "nodes", id, "bootstrap"));
  const server = issueCert(ca, { name: "nats", subject: "/O=muster/CN=nats", ips: ["127.0.0.1"], dns: ["localhost"], usage: "server" });
  const bundle = join(tmp.path, "clients-ca.pem");
  writeFileSync(bundle, readFileSync(ca.cert, "utf8") + readFileSync(puppetCA.cert, "utf8"));
  spec = labBrokerSpec([A, B, C], SERVICES);
  nats = await startNats({ tls: { ...server, ca: bundle, clients: "map" }, config: authorizationConfig(spec) });
});

after(async () => {
  await Promise.all(servers.map((s) => s.stop("SIGKILL")));
  await nats?.stop();
  tmp.remove();
});

function nodeDir(identity: string) {
  const d = join(tmp.path, "nodes", identity);
  return { dir: d, ssldir: join(d, "ssl"), disable: join(d, "provision.disabled") };
}

/** What the provisioning steps leave behind: the node's certificate from the (stand-in) Puppet CA. */
function puppetCert(identity: string): void {
  const n = nodeDir(identity);
  const c = issueCert(puppetCA, { name: identity, subject: `/CN=${identity}`, usage: "client" });
  mkdirSync(join(n.ssldir, "certs"), { recursive: true });
  mkdirSync(join(n.ssldir, "private_keys"), { recursive: true });
  writeFileSync(join(n.ssldir, "certs", `${identity}.pem`), readFileSync(c.cert));
  writeFileSync(join(n.ssldir, "private_keys", `${identity}.pem`), readFileSync(c.key));
}

/** A waiting node with its own bootstrap credential. */
function startNode(identity: string): MusterProcess {
  const n = nodeDir(identity);
  mkdirSync(n.dir, { recursive: true });
  // The lab's and cloud-init's generator, hosting only the provision agent (nothing here is provisioned).
  const cfg = {
    ...nodeServerConfig({
      identity,
      collectives: ["muster"],
      brokers: [nats.url],
      ca: ca.cert,
      bootstrap: boot[identity]!,
      provisioning: { collective: "provisioning", callers: ["provisioner"] },
      security: { trusted_keys: [{ name: "admin", key: keys.admin.publicKey }, { name: "provisioner", key: keys.provisioner.publicKey }], trust_local_user: false },
      facts: { facter: false, extra: { role: "web" } },
      plugins: { provision: { confdir: join(n.dir, "etc"), vardir: join(n.dir, "var"), ssldir: n.ssldir, lock_file: join(n.dir, "provision.lock"), disable_file: n.disable } },
      registration: { interval: 0, splay: false },
    }),
    agents: { builtin: ["provision"] },
  };
  const file = join(n.dir, "server.yaml");
  writeFileSync(file, toYaml(cfg));
  const p = spawnMuster(["server", "--config", file], { logFile: join(n.dir, "server.log") });
  servers.push(p);
  return p;
}

const client = (who: "admin" | "provisioner", collective: string) => MusterClient.connect({ brokers: [nats.url], collective, tls: { ca: ca.cert, ...svc[who] }, key: keys[who] });

/** An attacker's own program: it gets no reconnects to hide a refusal behind. */
const raw = (cert: CertFiles) => rawConnection(nats.url, { ca: ca.cert, ...cert }, { reconnect: false });

const present = (c: MusterClient, id: string) => eventually(async () => ((await c.discover({ timeoutMs: 1500, idleMs: 200 })).includes(id) ? true : undefined), 30_000, `${id} answering in ${c.collective}`);
const tail = (id: string) => readFileSync(join(nodeDir(id).dir, "server.log"), "utf8").split("\n").slice(-8).join("\n");

test("each node's bootstrap user reaches its own provisioning subject and collides with no other user", () => {
  const users = brokerUsers(spec);
  const names = users.map((u) => u.user);
  assert.equal(new Set(names).size, names.length);
  for (const id of [A, B]) {
    const u = users.find((x) => x.user === bootstrapUser(id).user);
    assert.ok(u, `a bootstrap user for ${id}`);
    assert.equal(u.user, `CN=${id},OU=bootstrap,O=muster`);
    assert.notEqual(u.user, `CN=${id}`, "never the node's Puppet certificate user");
    assert.deepEqual(u.permissions.subscribe.allow.filter((s) => s.includes(".node.")), [`provisioning.node.${id}`]);
    // the provisioning collective's subjects, and its own inbox (JetStream's answers) and no other's
    assert.deepEqual(u.permissions.subscribe.allow.filter((s) => !s.startsWith("provisioning.")), [`${inboxPrefixFor(id)}.>`]);
    // no requests; of JetStream only its own heartbeat key and audit subject (plain publishes) and the stream lookup the audit needs
    const own = [heartbeatSubject(id), `muster.audit.${id}`, "$JS.API.INFO", "$JS.API.STREAM.INFO.*"];
    assert.ok(!u.permissions.publish.allow.some((s) => s.includes(".node.") || s.includes("broadcast") || ((s.startsWith("$KV") || s.startsWith("$JS")) && !own.includes(s))), "no requests, no JetStream but its own heartbeat");
    for (const s of own) assert.ok(u.permissions.publish.allow.includes(s), `its own ${s}`);
  }
  // single use: a provisioned node's bootstrap user is left out, its Puppet user stays
  const retired = brokerUsers({ ...spec, provisioned: [B] }).map((u) => u.user);
  assert.ok(!retired.includes(bootstrapUser(B).user));
  assert.ok(retired.includes(bootstrapUser(A).user) && retired.includes(`CN=${B}`));
  // the certificate maps to exactly that user: its subject is the user's, in openssl's form
  assert.equal(bootstrapUser(A).subject, "/O=muster/OU=bootstrap/CN=nodea.test");
  assert.throws(() => brokerUsers({ bootstrap: [{}] }), /give identity/);
  assert.throws(() => bootstrapUser("a/b"), /not a node identity/);
  assert.equal(statSync(boot[A]!.key).mode & 0o777, 0o600);
});

test("node A's bootstrap credential cannot subscribe to, receive or answer the provisioner's requests to node B", async () => {
  startNode(B);
  const prov = await client("provisioner", "provisioning");
  const impostor = await raw(boot[A]!);
  const provRaw = await raw(svc.provisioner);
  try {
    await present(prov, B).catch((e: Error) => {
      throw new Error(`${e.message}; ${B} log: ${tail(B)}`);
    });
    // subscribing to B's subject, or to every node's, is refused by the broker
    impostor.nc.subscribe(`provisioning.node.${B}`);
    await impostor.saw(new RegExp(`Permissions Violation for Subscription to "provisioning\\.node\\.${B.replace(/\./g, "\\.")}"`));
    impostor.nc.subscribe("provisioning.node.>");
    await impostor.saw(/Permissions Violation for Subscription to "provisioning\.node\.>"/);
    impostor.nc.subscribe("provisioning.>");
    await impostor.saw(/Permissions Violation for Subscription to "provisioning\.>"/);
    // what it may subscribe to carries nothing addressed to B
    const seen: string[] = [];
    for (const s of [`provisioning.node.${A}`, "provisioning.broadcast.agent.>"]) {
      const sub = impostor.nc.subscribe(s);
      void (async () => {
        for await (const m of sub) seen.push(m.subject);
      })();
    }
    await impostor.nc.flush();
    // the honest path: the provisioner's directed call reaches B and B's reply comes back
    const r = await prov.call("provision", "is_disabled", {}, { nodes: [B], timeoutMs: 10_000 });
    assert.equal(r.replies.length, 1);
    assert.equal(r.replies[0]?.sender, B);
    assert.equal(r.replies[0]?.statuscode, 0, r.replies[0]?.statusmsg);
    await impostor.nc.flush();
    assert.deepEqual(seen.filter((s) => s.includes(B)), [], "no request to B reached A's credential");
    // answering: its publish rights are replies to requests it received (allow_responses) and nothing else
    const inbox = "_INBOX.provisioner-test.1";
    const got: string[] = [];
    const sub = provRaw.nc.subscribe(inbox);
    void (async () => {
      for await (const m of sub) got.push(m.string());
    })();
    await provRaw.nc.flush();
    impostor.nc.publish(inbox, JSON.stringify({ sender: B, statuscode: 0, data: { disabled: true } }));
    await impostor.saw(/Permissions Violation for Publish to "_INBOX\.provisioner-test\.1"/);
    // nor can it send requests of its own, to B or anyone
    impostor.nc.publish(`provisioning.node.${B}`, "{}");
    await impostor.saw(/Permissions Violation for Publish to "provisioning\.node\.nodeb\.test"/);
    await provRaw.nc.flush();
    assert.deepEqual(got, [], "the forged answer never reached the provisioner's inbox");
    assert.ok(!impostor.nc.isClosed(), "a refused operation is logged, the connection stays (and keeps being refused)");
  } finally {
    await Promise.all([prov.close(), impostor.nc.close(), provRaw.nc.close()]);
  }
});

test("a waiting node asks only for what its own bootstrap credential permits: its audit records reach the stream, and neither side logs a permissions violation", async () => {
  // the fleet's stores exist (an admin made them), as on a site built in docs/deploy.md's order
  const admin = await client("admin", "muster");
  const prov = await client("provisioner", "provisioning");
  try {
    await ensureFleetStores(admin);
    startNode(C);
    await present(prov, C).catch((e: Error) => {
      throw new Error(`${e.message}; ${C} log: ${tail(C)}`);
    });
    const r = await prov.call("provision", "is_disabled", {}, { nodes: [C], timeoutMs: 10_000 });
    assert.equal(r.replies[0]?.statuscode, 0, r.replies[0]?.statusmsg);
    // the node looked the stream up and published its record on its own credential: each JetStream
    // answer (the lookup, the publish's acknowledgement) came back on the node's own inbox
    const streams = await admin.streams();
    const records = await eventually(async () => {
      const all = (await streams.tail(AUDIT_STREAM.name, 50, 5000)) ?? [];
      const mine = all.filter((l) => l.includes(`"identity":"${C}"`) && l.includes('"action":"is_disabled"'));
      return mine.length ? mine : undefined;
    }, 30_000, `${C}'s audit record of is_disabled in ${AUDIT_STREAM.name}`);
    assert.equal(records.length, 1);
    const violations = (text: string, ...about: string[]) => text.split("\n").filter((l) => /violation/i.test(l) && (!about.length || about.some((a) => l.includes(a))));
    assert.deepEqual(violations(nats.log(), C, inboxPrefixFor(C)), [], "the broker refused the node nothing");
    assert.deepEqual(violations(readFileSync(join(nodeDir(C).dir, "server.log"), "utf8")), [], "the node was refused nothing");
  } finally {
    await Promise.all([admin.close(), prov.close()]);
  }
});

test("single use: once B is provisioned its bootstrap credential is retired and refused, B carries on with its Puppet certificate", async () => {
  const prov = await client("provisioner", "provisioning");
  const admin = await client("admin", "muster");
  try {
    // B is provisioned: its Puppet certificate is in place, the provisioner disables provisioning,
    // and the provisioner's record says so (what `--retire-provisioned` reads). Its notification,
    // the moment a notify exec: target retires the credential, comes before the record says done.
    puppetCert(B);
    const r = await prov.call("provision", "disable_provisioner", { reason: "test" }, { nodes: [B], timeoutMs: 10_000 });
    assert.equal(r.replies[0]?.statuscode, 0, r.replies[0]?.statusmsg);
    await present(admin, B).catch((e: Error) => {
      throw new Error(`${e.message}; ${B} log: ${tail(B)}`);
    });
    const store = await ProvisionState.open(admin, "muster_provision");
    await store.put({ ...newRecord(B), status: "in_progress", stage: "disable", current: "notify" });
    await store.put({ ...newRecord(A), status: "in_progress", stage: "production" });
    await store.put({ ...newRecord("gone.test"), status: "done", stage: "notify" });
  } finally {
    await prov.close();
  }
  try {
    // the operator (or a notify exec: target) regenerates the users and reloads nats-server
    const specFile = join(tmp.path, "spec.yaml");
    writeFileSync(specFile, toYaml(spec));
    const env = cleanEnv(join(tmp.path, "cli"), { MUSTER_BROKER: nats.url, MUSTER_TLS_CA: ca.cert, MUSTER_TLS_CERT: svc.admin.cert, MUSTER_TLS_KEY: svc.admin.key });
    const out = await runCli(["broker", "users", "--spec", specFile, "--retire-provisioned"], { env });
    assert.equal(out.code, 0, out.stderr);
    assert.ok(!out.stdout.includes(bootstrapUser(B).user), "B's bootstrap user is left out");
    assert.ok(out.stdout.includes(bootstrapUser(A).user), "A is still waiting: its credential stays");
    assert.equal(out.stdout, authorizationConfig({ ...spec, provisioned: [B, "gone.test"] }));
    await nats.reload(out.stdout);
    // the retired credential is refused at connect, once the broker has reloaded
    const refusal = await eventually(async () => {
      try {
        const nc = await connect({ servers: nats.url, tls: { caFile: ca.cert, certFile: boot[B]!.cert, keyFile: boot[B]!.key }, reconnect: false, timeout: 3000 });
        await nc.close();
        return undefined;
      } catch (e) {
        return (e as Error).message;
      }
    }, 15_000, "the retired bootstrap credential refused");
    assert.match(refusal, /Authorization Violation/i);
    // A's, not retired, still connects
    const a = await raw(boot[A]!);
    await a.nc.close();
    // B works on: it answers in the fleet over its Puppet certificate
    const ping = await admin.call("rpcutil", "ping", {}, { nodes: [B], timeoutMs: 10_000 });
    assert.equal(ping.replies[0]?.statuscode, 0, `${ping.replies[0]?.statusmsg}; ${B} log: ${tail(B)}`);
    assert.ok(existsSync(nodeDir(B).disable));
    assert.doesNotMatch(readFileSync(join(nodeDir(B).dir, "server.log"), "utf8"), /Authorization Violation/);
  } finally {
    await admin.close();
  }
});

test("rotation: a second generation works beside the first, then the first is retired and refused", async () => {
  const gen2 = writeBootstrapCredential(issueBootstrapCredential(ca, A, { generation: 2 }), join(tmp.path, "nodes", A, "bootstrap-2"));
  const base = { ...spec, provisioned: [B] };
  const refusedAtConnect = (c: CertFiles) =>
    eventually(async () => {
      try {
        const nc = await connect({ servers: nats.url, tls: { caFile: ca.cert, certFile: c.cert, keyFile: c.key }, reconnect: false, timeout: 3000 });
        await nc.close();
        return undefined;
      } catch (e) {
        return (e as Error).message;
      }
    }, 15_000, "the credential refused");
  // 1. issue the new one and list both generations; 2. reload
  await nats.reload(authorizationConfig({ ...base, bootstrap: [{ identity: A }, { identity: A, generation: 2 }] }));
  // 3. the node swaps to the new files: the new user reaches exactly what the old one did
  const fresh = await eventually(async () => raw(gen2).catch(() => undefined), 15_000, "generation 2 accepted");
  fresh.nc.subscribe(`provisioning.node.${A}`);
  fresh.nc.subscribe(`provisioning.node.${B}`);
  await fresh.saw(/Permissions Violation for Subscription to "provisioning\.node\.nodeb\.test"/);
  assert.ok(!fresh.errors.some((e) => e.includes(`provisioning.node.${A}`)), fresh.errors.join("; "));
  await fresh.nc.close();
  // 4. retire the old generation and reload: its certificate, still valid, maps to no user
  await nats.reload(authorizationConfig({ ...base, bootstrap: [{ identity: A, generation: 2 }] }));
  assert.match(await refusedAtConnect(boot[A]!), /Authorization Violation/i);
  const still = await raw(gen2);
  await still.nc.close();
  assert.equal(bootstrapUser(A, "muster", 2).user, "CN=nodea.test,OU=bootstrap-2,O=muster");
});

test("muster broker bootstrap-credential issues per-node files and refuses bad input without writing", async () => {
  const env = cleanEnv(join(tmp.path, "cli2"));
  const out = join(tmp.path, "issued");
  const ok = await runCli(["broker", "bootstrap-credential", "--identity", "web7.test", "--identity", "web8.test", "--ca-cert", ca.cert, "--ca-key", ca.key, "--out", out, "--days", "7"], { env });
  assert.equal(ok.code, 0, ok.stderr);
  assert.match(ok.stdout, /^web7\.test: user CN=web7\.test,OU=bootstrap,O=muster -> /m);
  for (const id of ["web7.test", "web8.test"]) {
    assert.equal(statSync(join(out, id, "bootstrap.key")).mode & 0o777, 0o600);
    assert.equal(readFileSync(join(out, id, "ca.pem"), "utf8"), readFileSync(ca.cert, "utf8"));
  }
  const json = await runCli(["broker", "bootstrap-credential", "--identity", "web9.test", "--ca-cert", ca.cert, "--ca-key", ca.key], { env });
  assert.equal(json.code, 0, json.stderr);
  const [c] = JSON.parse(json.stdout) as { identity: string; user: string; cert: string; key: string }[];
  assert.equal(c?.user, "CN=web9.test,OU=bootstrap,O=muster");
  assert.match(c?.cert ?? "", /BEGIN CERTIFICATE/);
  assert.match(c?.key ?? "", /PRIVATE KEY/);
  const bad = await runCli(["broker", "bootstrap-credential", "--identity", "../etc", "--ca-cert", ca.cert, "--ca-key", ca.key, "--out", out], { env });
  assert.notEqual(bad.code, 0);
  assert.match(bad.stderr, /not a node identity/);
  const noCa = await runCli(["broker", "bootstrap-credential", "--identity", "web10.test", "--ca-cert", join(tmp.path, "missing.pem"), "--ca-key", ca.key, "--out", out], { env });
  assert.notEqual(noCa.code, 0);
  assert.match(noCa.stderr, /CA certificate .*missing\.pem does not exist/);
  assert.ok(!existsSync(join(out, "web10.test")));
});

test("muster broker users --issue writes the credentials the spec's waiting nodes lack, and keeps those already issued", async () => {
  const env = cleanEnv(join(tmp.path, "cli3"));
  const dir = join(tmp.path, "fleet-creds");
  const specFile = join(tmp.path, "issue-spec.yaml");
  writeFileSync(specFile, toYaml({ bootstrap: [{ identity: "app1.test" }, { identity: "app2.test" }, { identity: "app2.test", generation: 2 }, { identity: "done.test" }], provisioned: ["done.test"] }));
  const args = ["broker", "users", "--spec", specFile, "--issue", dir, "--ca-cert", ca.cert, "--ca-key", ca.key];
  const first = await runCli(args, { env });
  assert.equal(first.code, 0, first.stderr);
  assert.match(first.stdout, /^authorization \{/, "the users still go to stdout");
  assert.equal(first.stderr.match(/^issued /gm)?.length, 3, first.stderr);
  const subject = (f: string) => {
    const c = new X509Certificate(readFileSync(f));
    assert.ok(c.verify(new X509Certificate(readFileSync(ca.cert)).publicKey), `${f} signed by the CA`);
    return c.subject.replace(/\n/g, ",");
  };
  assert.equal(subject(join(dir, "app1.test", "bootstrap.pem")), "O=muster,OU=bootstrap,CN=app1.test");
  assert.equal(subject(join(dir, "app2.test", "generation-2", "bootstrap.pem")), "O=muster,OU=bootstrap-2,CN=app2.test");
  assert.ok(!existsSync(join(dir, "done.test")), "a provisioned node gets none");
  const before = readFileSync(join(dir, "app1.test", "bootstrap.pem"), "utf8");
  const again = await runCli(args, { env });
  assert.equal(again.code, 0, again.stderr);
  assert.doesNotMatch(again.stderr, /issued/);
  assert.equal(readFileSync(join(dir, "app1.test", "bootstrap.pem"), "utf8"), before, "what a node may hold already is not replaced");
  const noCa = await runCli(["broker", "users", "--spec", specFile, "--issue", dir], { env });
  assert.notEqual(noCa.code, 0);
  assert.match(noCa.stderr, /--issue needs --ca-cert and --ca-key/);
});
