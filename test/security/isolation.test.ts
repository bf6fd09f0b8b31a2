import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { stringify as toYaml } from "yaml";
import { authorizationConfig, brokerUsers, type BrokerAuthSpec } from "../../src/broker/auth.js";
import { MusterClient } from "../../src/client/client.js";
import { nodeServerConfig } from "../../src/config/node.js";
import { startNats, type NatsHandle } from "../../src/lab/nats.js";
import { spawnMuster, type MusterProcess } from "../../src/lab/processes.js";
import { generateSigningKey, type SigningKey } from "../../src/protocol/signing.js";
import { ServerConfigSchema } from "../../src/server/config.js";
import { RegistryConfigSchema } from "../../src/registry/config.js";
import { startRegistry } from "../../src/registry/daemon.js";
import { createLogger } from "../../src/log.js";
import { emptyFilter } from "../../src/protocol/types.js";
import { ensureCA, issueCert, type CA, type CertFiles } from "../../src/security/pki.js";
import { cleanEnv, eventually, rawConnection, runCli, tempDir } from "../support/collective.js";

// Provisioning isolation and broker permissions with a real nats-server (TLS, verify_and_map, the
// users muster generates) and a real `muster server`: who may subscribe and publish where, who a
// waiting node answers, and the node's own switch to its production credential once provisioned.
// The node's "Puppet certificate" comes from a second CA standing in for a Puppet CA; the real
// Puppet flow is covered by test/provisioner/e2e.test.ts.

const tmp = tempDir("isolation");
let nats: NatsHandle;
let ca: CA;
let puppetCA: CA;
const svc: Record<"admin" | "provisioner" | "bootstrap" | "registry", CertFiles> = {} as never;
const keys: Record<"admin" | "provisioner", SigningKey> = {} as never;
const servers: MusterProcess[] = [];

const user = (name: string) => `CN=${name},OU=service,O=muster`;
const spec: BrokerAuthSpec = {
  collectives: ["muster"],
  provisioning_collective: "provisioning",
  nodes: [{ identity: "web1.test" }, { identity: "web2.test" }],
  bootstrap: [{ user: user("bootstrap") }],
  provisioners: [user("provisioner")],
  admins: [user("admin")],
  registries: [user("registry")],
};

before(async () => {
  ca = ensureCA(join(tmp.path, "ca"));
  puppetCA = ensureCA(join(tmp.path, "puppet-ca"), "/CN=Puppet CA: test");
  for (const n of ["admin", "provisioner", "bootstrap", "registry"] as const) svc[n] = issueCert(ca, { name: n, subject: `/O=muster/OU=service/CN=${n}`, usage: "client" });
  for (const n of ["admin", "provisioner"] as const) keys[n] = generateSigningKey(n).key;
  const server = issueCert(ca, { name: "nats", subject: "/O=muster/CN=nats", ips: ["127.0.0.1"], dns: ["localhost"], usage: "server" });
  const bundle = join(tmp.path, "clients-ca.pem");
  writeFileSync(bundle, readFileSync(ca.cert, "utf8") + readFileSync(puppetCA.cert, "utf8"));
  nats = await startNats({ tls: { ...server, ca: bundle, clients: "map" }, config: authorizationConfig(spec) });
  const admin = await raw(svc.admin);
  try {
    await (await jetstreamManager(admin.nc)).streams.add({ name: "MUSTER_AUDIT", subjects: ["muster.audit.>"] });
  } finally {
    await admin.nc.close();
  }
});

after(async () => {
  await Promise.all(servers.map((s) => s.stop("SIGKILL")));
  await nats?.stop();
  tmp.remove();
});

/** A node's Puppet layout: the certificate the Puppet CA issued, where Puppet keeps it. */
function puppetCert(identity: string, ssldir: string): void {
  const c = issueCert(puppetCA, { name: identity, subject: `/CN=${identity}`, usage: "client" });
  mkdirSync(join(ssldir, "certs"), { recursive: true });
  mkdirSync(join(ssldir, "private_keys"), { recursive: true });
  writeFileSync(join(ssldir, "certs", `${identity}.pem`), readFileSync(c.cert));
  writeFileSync(join(ssldir, "private_keys", `${identity}.pem`), readFileSync(c.key));
}

function nodeDir(identity: string) {
  const d = join(tmp.path, "nodes", identity);
  return { dir: d, ssldir: join(d, "ssl"), disable: join(d, "provision.disabled") };
}

function startNode(identity: string, over: Record<string, unknown> = {}): MusterProcess {
  const n = nodeDir(identity);
  mkdirSync(n.dir, { recursive: true });
  // The lab's and cloud-init's generator, hosting only the provision agent (nothing here is provisioned).
  const cfg: Record<string, unknown> = {
    ...nodeServerConfig({
      identity,
      collectives: ["muster"],
      brokers: [nats.url],
      ca: ca.cert,
      bootstrap: svc.bootstrap,
      provisioning: { collective: "provisioning", callers: ["provisioner"] },
      security: { trusted_keys: [{ name: "admin", key: keys.admin.publicKey }, { name: "provisioner", key: keys.provisioner.publicKey }], trust_local_user: false },
      facts: { facter: false, extra: { role: "web" } },
      plugins: { provision: { confdir: join(n.dir, "etc"), vardir: join(n.dir, "var"), ssldir: n.ssldir, lock_file: join(n.dir, "provision.lock"), disable_file: n.disable } },
      registration: { interval: 0, splay: false },
    }),
    agents: { builtin: ["provision"] },
    // the stream an admin created; the node publishes only its own subject, once in production
    audit: { file: join(n.dir, "audit.jsonl"), stream: { name: "MUSTER_AUDIT" } },
    ...over,
  };
  const file = join(n.dir, "server.yaml");
  writeFileSync(file, toYaml(cfg));
  const p = spawnMuster(["server", "--config", file], { logFile: join(n.dir, "server.log") });
  servers.push(p);
  return p;
}

const tlsOf = (c: CertFiles) => ({ ca: ca.cert, cert: c.cert, key: c.key });

async function client(who: "admin" | "provisioner", collective: string, key = keys[who]): Promise<MusterClient> {
  return MusterClient.connect({ brokers: [nats.url], collective, tls: tlsOf(svc[who]), key });
}

const raw = (cert: CertFiles) => rawConnection(nats.url, { ca: ca.cert, ...cert });

const present = (c: MusterClient, id: string) => eventually(async () => ((await c.discover({ timeoutMs: 1500, idleMs: 200 })).includes(id) ? true : undefined), 30_000, `${id} answering in ${c.collective}`);

test("generated users: one role per credential, node subjects confined to the node", () => {
  const users = brokerUsers(spec);
  const web1 = users.find((u) => u.user === "CN=web1.test")!;
  assert.deepEqual(web1.permissions.subscribe.allow.filter((s) => s.includes(".node.")), ["muster.node.web1.test"]);
  assert.equal(web1.permissions.allow_responses, true);
  assert.ok(!web1.permissions.publish.allow.some((s) => s.includes(".node.") || s.includes("broadcast")), "nodes never publish requests");
  const boot = users.find((u) => u.user === user("bootstrap"))!;
  // a waiting node hears only provisioning subjects, and its own inbox (replies to what it asks)
  assert.ok(boot.permissions.subscribe.allow.every((s) => s.startsWith("provisioning.") || s.startsWith("_INBOX_")));
  const admin = users.find((u) => u.user === user("admin"))!;
  assert.ok(!admin.permissions.publish.allow.some((s) => s.startsWith("provisioning.")), "admins cannot reach waiting nodes");
  assert.throws(() => brokerUsers({ ...spec, admins: [user("provisioner")] }), /appears twice/);
  const confined = brokerUsers({ bootstrap: [{ user: "CN=boot-web9", identity: "web9.test" }] })[0]!;
  assert.deepEqual(confined.permissions.subscribe.allow, ["provisioning.broadcast.agent.>", "provisioning.node.web9.test", "provisioning.registration.solicit", "_INBOX_776562392e74657374.>"], "its own inbox only: web9.test in hex, not _INBOX_.>");
});

test("muster broker users prints the same users for nats-server, and names a bad spec", async () => {
  const file = join(tmp.path, "spec.yaml");
  writeFileSync(file, toYaml(spec));
  const env = cleanEnv(join(tmp.path, "cli"));
  const ok = await runCli(["broker", "users", "--spec", file], { env });
  assert.equal(ok.code, 0, ok.stderr);
  assert.equal(ok.stdout, authorizationConfig(spec));
  writeFileSync(file, toYaml({ ...spec, admins: [user("bootstrap")] }));
  const dup = await runCli(["broker", "users", "--spec", file], { env });
  assert.notEqual(dup.code, 0);
  assert.match(dup.stderr, /appears twice/);
  writeFileSync(file, toYaml({ nodes: [{ identity: "bad id" }] }));
  const bad = await runCli(["broker", "users", "--spec", file], { env });
  assert.notEqual(bad.code, 0);
  assert.match(bad.stderr, /nodes\.0\.identity/);
});

test("the PKI keeps private keys private and reuses what exists", () => {
  assert.equal(statSync(ca.key).mode & 0o777, 0o600);
  assert.equal(statSync(svc.provisioner.key).mode & 0o777, 0o600);
  const before = readFileSync(svc.provisioner.cert, "utf8");
  assert.equal(readFileSync(issueCert(ca, { name: "provisioner", subject: "/O=muster/OU=service/CN=provisioner", usage: "client" }).cert, "utf8"), before, "the same name is the same credential");
  assert.throws(() => issueCert(ca, { name: "../x", subject: "/CN=x" }), /letters, digits/);
});

test("config: the provisioning collective must differ from the fleet's; use_puppet_cert excludes cert", () => {
  const bad = ServerConfigSchema.safeParse({ collectives: ["muster"], provisioning: { collective: "muster", callers: ["p"] } });
  assert.equal(bad.success, false);
  assert.match(JSON.stringify(bad.error?.issues), /must differ/);
  const both = ServerConfigSchema.safeParse({ tls: { use_puppet_cert: true, cert: "a", key: "b" } });
  assert.equal(both.success, false);
  assert.equal(ServerConfigSchema.safeParse({ provisioning: { callers: [] } }).success, false, "an empty callers list would lock the node out");
});

test("a waiting node: bootstrap credential, provisioning collective only, the provisioner's key only", async () => {
  startNode("web1.test");
  const prov = await client("provisioner", "provisioning");
  const admin = await client("admin", "muster");
  // the admin key over the provisioner's credential: past the broker, refused by the node
  const adminKeyViaProvCred = await client("provisioner", "provisioning", keys.admin);
  try {
    await present(prov, "web1.test");
    assert.ok(!(await admin.discover({ timeoutMs: 1000, idleMs: 200 })).includes("web1.test"), "not in the fleet collective");
    const ok = await prov.call("provision", "is_disabled", {}, { nodes: ["web1.test"], timeoutMs: 10_000 });
    assert.equal(ok.replies[0]?.statuscode, 0, ok.replies[0]?.statusmsg);
    assert.equal(ok.replies[0]?.data.disabled, false);
    const denied = await adminKeyViaProvCred.call("provision", "is_disabled", {}, { nodes: ["web1.test"], timeoutMs: 10_000 });
    assert.notEqual(denied.replies[0]?.statuscode, 0);
    assert.match(denied.replies[0]?.statusmsg ?? "", /denied by policy on web1\.test: admin may not call provision#is_disabled/);
    const rpc = await adminKeyViaProvCred.call("rpcutil", "inventory", {}, { nodes: ["web1.test"], timeoutMs: 10_000 });
    assert.match(rpc.replies[0]?.statusmsg ?? "", /denied by policy/, "every agent of a waiting node, not only provision");
  } finally {
    await Promise.all([prov.close(), admin.close(), adminKeyViaProvCred.close()]);
  }
});

test("the broker refuses what a credential may not do", async () => {
  puppetCert("web2.test", join(tmp.path, "web2-ssl"));
  const web2 = { cert: join(tmp.path, "web2-ssl", "certs", "web2.test.pem"), key: join(tmp.path, "web2-ssl", "private_keys", "web2.test.pem") };
  const node = await raw(web2);
  const admin = await raw(svc.admin);
  const boot = await raw(svc.bootstrap);
  try {
    // a node subscribing outside its permissions: another node's subject
    node.nc.subscribe("muster.node.web1.test");
    await node.saw(/Permissions Violation for Subscription to "muster\.node\.web1\.test"/);
    // its own and the broadcast subjects are fine
    node.nc.subscribe("muster.node.web2.test");
    node.nc.subscribe("muster.broadcast.agent.provision");
    await node.nc.flush();
    assert.ok(!node.errors.some((e) => /web2\.test"|broadcast/.test(e)), node.errors.join("; "));
    // nodes publish no requests
    node.nc.publish("muster.node.web1.test", new Uint8Array(1));
    await node.saw(/Permissions Violation for Publish to "muster\.node\.web1\.test"/);
    // the bootstrap credential reaches nothing of the fleet
    boot.nc.subscribe("muster.broadcast.agent.>");
    await boot.saw(/Permissions Violation for Subscription to "muster\.broadcast\.agent\.>"/);
    // admins do not reach waiting nodes
    admin.nc.publish("provisioning.node.web1.test", new Uint8Array(1));
    await admin.saw(/Permissions Violation for Publish to "provisioning\.node\.web1\.test"/);
  } finally {
    await Promise.all([node.nc.close(), admin.nc.close(), boot.nc.close()]);
  }
  // a certificate from no trusted CA does not connect at all
  const stranger = ensureCA(join(tmp.path, "stranger"));
  const s = issueCert(stranger, { name: "x", subject: "/O=muster/OU=service/CN=admin", usage: "client" });
  await assert.rejects(connect({ servers: nats.url, tls: { caFile: ca.cert, certFile: s.cert, keyFile: s.key }, timeout: 3000 }));
});

test("once provisioned the node leaves the provisioning collective and reconnects with its Puppet certificate", async (t) => {
  const n = nodeDir("web1.test");
  puppetCert("web1.test", n.ssldir); // what the provisioning steps leave behind
  const prov = await client("provisioner", "provisioning");
  const admin = await client("admin", "muster");
  try {
    const r = await prov.call("provision", "disable_provisioner", { reason: "test" }, { nodes: ["web1.test"], timeoutMs: 10_000 });
    assert.equal(r.replies[0]?.statuscode, 0, r.replies[0]?.statusmsg);
    await present(admin, "web1.test");
    assert.ok(!(await prov.discover({ timeoutMs: 1000, idleMs: 200 })).includes("web1.test"), "gone from the provisioning collective");
    const st = await admin.call("provision", "is_disabled", {}, { nodes: ["web1.test"], timeoutMs: 10_000 });
    assert.equal(st.replies[0]?.data.disabled, true);
    // in production the node's user may publish its audit records (acknowledged on its own inbox)
    const adminRaw = await raw(svc.admin);
    t.after(() => adminRaw.nc.close());
    const jsm = await jetstreamManager(adminRaw.nc);
    const audited = await eventually(async () => {
      const m = await jsm.streams.getMessage("MUSTER_AUDIT", { last_by_subj: "muster.audit.web1.test" }).catch(() => undefined);
      return m && (m.json() as { action?: string }).action === "is_disabled" ? m : undefined;
    }, 15_000, "the node's audit record in the stream").catch((e: Error) => {
      throw new Error(`${e.message}; node log tail: ${readFileSync(join(n.dir, "server.log"), "utf8").split("\n").slice(-8).join("\n")}`);
    });
    assert.equal((audited.json() as { caller: string }).caller, "admin");
    // while it was provisioning, the file was the record: the provisioner's calls are there, not in the stream
    const lines = readFileSync(join(n.dir, "audit.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as { caller: string; action: string });
    assert.ok(lines.some((l) => l.caller === "provisioner" && l.action === "disable_provisioner"));
    const log = readFileSync(join(n.dir, "server.log"), "utf8");
    assert.match(log, /"phase":"production"/);
    assert.ok(log.includes(join(n.ssldir, "certs", "web1.test.pem")), "connected with the Puppet certificate");
  } finally {
    await Promise.all([prov.close(), admin.close()]);
  }
  // a restart comes straight up in production
  await servers[0]!.stop("SIGTERM");
  startNode("web1.test");
  const admin2 = await client("admin", "muster");
  try {
    await present(admin2, "web1.test");
  } finally {
    await admin2.close();
  }
});

test("a provisioned node without its Puppet certificate stops with a clear error", async () => {
  const n = nodeDir("web3.test");
  mkdirSync(n.dir, { recursive: true });
  writeFileSync(n.disable, JSON.stringify({ since: Date.now() }));
  const p = startNode("web3.test");
  const code = await p.exited;
  assert.notEqual(code, 0);
  const log = readFileSync(join(n.dir, "server.log"), "utf8");
  assert.match(log, /no Puppet certificate yet/);
  assert.ok(!existsSync(join(n.ssldir, "certs", "web3.test.pem")));
});

test("the registry works within its user: nodes register, it stores, admins query", async () => {
  // web4 is provisioned already (no provisioning section) and registers every second
  const n = nodeDir("web4.test");
  puppetCert("web4.test", n.ssldir);
  spec.nodes!.push({ identity: "web4.test" });
  await nats.reload(authorizationConfig(spec)); // a node added to a running broker: its user, then a reload
  const regLog = join(tmp.path, "registry.log");
  const reg = await startRegistry(RegistryConfigSchema.parse({ brokers: [nats.url], tls: tlsOf(svc.registry) }), createLogger({ level: "debug", file: regLog, name: "registry" }));
  const admin = await client("admin", "muster");
  try {
    startNode("web4.test", { provisioning: undefined, registration: { interval: 1, splay: false } });
    const source = await admin.registry({ via: "service" });
    await eventually(async () => ((await source.discover(emptyFilter(), { timeoutMs: 2000, idleMs: 200 })).includes("web4.test") ? true : undefined), 30_000, "web4.test in the registry").catch((e: Error) => {
      throw new Error(`${e.message}; node log tail: ${readFileSync(join(n.dir, "server.log"), "utf8").split("\n").slice(-6).join("\n")}; registry log tail: ${readFileSync(regLog, "utf8").split("\n").slice(-6).join("\n")}`);
    });
    const records = await (await admin.registry({ via: "bucket" })).records(emptyFilter());
    assert.ok(records.some((r) => r.identity === "web4.test"), "the admin reads the bucket too");
  } finally {
    await admin.close();
    await reg.stop();
  }
});

test("a registry started after a node asks it to register, within the broker's permissions", async () => {
  // web5 registers once an hour, first at a random point of it: only the registry's request brings it in soon
  const n = nodeDir("web5.test");
  puppetCert("web5.test", n.ssldir);
  spec.nodes!.push({ identity: "web5.test" });
  await nats.reload(authorizationConfig(spec));
  const admin = await client("admin", "muster");
  let reg: Awaited<ReturnType<typeof startRegistry>> | undefined;
  try {
    startNode("web5.test", { provisioning: undefined, registration: { interval: 3600, splay: true } });
    await present(admin, "web5.test");
    reg = await startRegistry(RegistryConfigSchema.parse({ brokers: [nats.url], tls: tlsOf(svc.registry), log: { level: "silent" } }), createLogger({ level: "silent", name: "registry" }));
    const source = await admin.registry({ via: "service" });
    await eventually(async () => ((await source.discover(emptyFilter(), { timeoutMs: 2000, idleMs: 200 })).includes("web5.test") ? true : undefined), 15_000, "web5.test registering on request").catch((e: Error) => {
      throw new Error(`${e.message}; node log tail: ${readFileSync(join(n.dir, "server.log"), "utf8").split("\n").slice(-6).join("\n")}`);
    });
    assert.doesNotMatch(readFileSync(join(n.dir, "server.log"), "utf8"), /Permissions Violation/);
  } finally {
    await admin.close();
    await reg?.stop();
  }
});

test("PuppetDB through the registry: an admin may ask (muster.registry.*.puppetdb); a node's credential may not", async () => {
  // a PuppetDB nobody listens on: the registry's answer (an error naming it) is proof enough that the request reached it
  const reg = await startRegistry(RegistryConfigSchema.parse({ brokers: [nats.url], tls: tlsOf(svc.registry), log: { level: "silent" }, fill_on_start: false, puppetdb: { url: "http://127.0.0.1:9", timeout: 5 } }), createLogger({ level: "silent", name: "registry" }));
  let admin: MusterClient | undefined;
  let node: Awaited<ReturnType<typeof raw>> | undefined;
  try {
    admin = await client("admin", "muster");
    const n = nodeDir("web6.test");
    puppetCert("web6.test", n.ssldir);
    spec.nodes!.push({ identity: "web6.test" });
    await nats.reload(authorizationConfig(spec)); // its user exists once this returns
    node = await raw({ cert: join(n.ssldir, "certs", "web6.test.pem"), key: join(n.ssldir, "private_keys", "web6.test.pem") });
    await assert.rejects((await admin.puppetdb()).discover(emptyFilter(), { timeoutMs: 10_000, idleMs: 200 }), /could not ask PuppetDB: cannot reach PuppetDB at http:\/\/127\.0\.0\.1:9/);
    node.nc.publish("muster.registry.muster-registry.puppetdb", new TextEncoder().encode('{"op":"discover","filter":{}}'));
    await node.saw(/permissions violation.*muster\.registry\.muster-registry\.puppetdb/i);
  } finally {
    // whatever failed above, nothing is left connected: a client left reconnecting keeps the file from ending
    await node?.nc.close();
    await admin?.close();
    await reg.stop();
  }
});
