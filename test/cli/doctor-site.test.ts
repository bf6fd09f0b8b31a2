import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import { MusterClient } from "../../src/client/client.js";
import { newRecord } from "../../src/protocol/provision-record.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { cleanEnv, runCli, spawnMuster, tempDir, type CliResult, type MusterProcess } from "../support/collective.js";
import { startLabBroker, type LabBroker } from "../web/lab-broker.js";

// `muster doctor` against a site built by hand: a broker that maps each credential to a user (as
// docs/deploy.md's), an operator set up with `muster client setup`, and a real `muster server` (a
// stand-in for a master or the notifier: a machine no provisioner vouches for). Each step of the
// guide left out is named, with the section that does it; done, the check passes.

const tmp = tempDir("doctor-site");
const M1 = "m1.doctor-site.test";
let broker: LabBroker;
let server: MusterProcess | undefined;
const ops = join(tmp.path, "ops");
let opsEnv: NodeJS.ProcessEnv;

interface Report {
  ok: boolean;
  checks: { name: string; state: "ok" | "fail" | "skip"; detail: string; fix?: string }[];
}
const report = (r: CliResult): Report => {
  try {
    return JSON.parse(r.stdout) as Report;
  } catch {
    throw new Error(`not JSON (exit ${r.code}): ${r.stdout}\n${r.stderr}`);
  }
};
const check = (rep: Report, name: string) => {
  const c = rep.checks.find((x) => x.name === name);
  assert.ok(c, `no check ${name} in ${rep.checks.map((x) => x.name).join(", ")}`);
  return c;
};
const doctor = (env = opsEnv) => runCli(["doctor", "--dt", "1", "--json"], { env }).then(report);

before(async () => {
  broker = await startLabBroker({ dir: tmp.path, nodes: [M1] });
  // the operator, as docs/deploy.md#2-credentials sets one up: no MUSTER_BROKER, no MUSTER_TLS_*
  opsEnv = cleanEnv(ops, { MUSTER_TLS_CA: undefined, MUSTER_TLS_CERT: undefined, MUSTER_TLS_KEY: undefined, MUSTER_CALLER: "user=ops" });
  const admin = broker.tls("admin");
  const setup = await runCli(["client", "setup", "--broker", broker.url.replace(/^nats:/, "tls:"), "--ca", admin.ca, "--cert", admin.cert, "--key", admin.key], { env: opsEnv });
  assert.equal(setup.code, 0, setup.stderr);
  assert.match(setup.stdout, /broker credential CN=admin,OU=service,O=muster/);
  assert.equal(statSync(join(ops, "tls", "client.key")).mode & 0o777, 0o600);
  const shown = await runCli(["key", "show"], { env: opsEnv });
  assert.match(shown.stdout, /^user=ops=[A-Za-z0-9+/]{43}=\n$/);
  const opsKey = shown.stdout.trim().slice("user=ops=".length);
  // the machine's node key, made on the workstation as docs/deploy.md says
  const made = await runCli(["key", "create", M1, "--dir", join(ops, "site-keys")], { env: opsEnv });
  assert.equal(made.code, 0, made.stderr);
  const dir = join(tmp.path, "m1");
  mkdirSync(dir, { recursive: true });
  const t = broker.tls("emulator");
  const cfg = {
    identity: M1,
    collectives: ["muster"],
    brokers: [broker.url],
    facts: { facter: false, extra: { role: "puppetmaster" } },
    agents: { builtin: [] },
    tls: t,
    security: { trusted_keys: [{ name: "user=ops", key: opsKey }], trust_local_user: false, node_key: join(ops, "site-keys", `${M1}.pem`) },
    registration: { interval: 0, splay: false },
  };
  writeFileSync(join(dir, "server.yaml"), toYaml(cfg));
  server = spawnMuster(["server", "--config", join(dir, "server.yaml")], { env: cleanEnv(dir) });
  await server.waitForLine(/ready/, 30_000);
});

after(async () => {
  await server?.stop();
  await broker?.stop();
  tmp.remove();
});

test("each step of the guide left out is named with its section, and passes once done", async () => {
  const first = await doctor();
  assert.equal(first.ok, false);
  assert.equal(check(first, "signing key").state, "ok", "made by muster client setup");
  assert.equal(check(first, "discovery").state, "ok", check(first, "discovery").detail);
  assert.equal(check(first, "trust").state, "ok");
  // the stores: nodes may not make them
  assert.equal(check(first, "stores").state, "fail");
  assert.match(check(first, "stores").detail, /missing: .*KV_muster_alive|missing: .*muster_alive/);
  assert.match(check(first, "stores").detail, /MUSTER_AUDIT/);
  assert.match(check(first, "stores").fix!, /muster broker stores .*docs\/deploy\.md#3-the-broker/);
  // the machine's replies: no key in the directory
  assert.equal(check(first, "replies verified").state, "fail");
  assert.match(check(first, "replies verified").detail, new RegExp(`replies from ${M1.replace(/\./g, "\\.")} do not verify`));
  assert.match(check(first, "replies verified").fix!, /muster key enroll .*docs\/deploy\.md#2-credentials/);
  assert.equal(check(first, "masters").state, "skip", "no puppetca here");
  assert.equal(check(first, "puppet CAs").state, "skip", "no node provisioned");

  const stores = await runCli(["broker", "stores"], { env: opsEnv });
  assert.equal(stores.code, 0, stores.stderr);
  const enroll = await runCli(["key", "enroll", M1, "--key", join(ops, "site-keys", `${M1}.pub`)], { env: opsEnv });
  assert.equal(enroll.code, 0, enroll.stderr);
  assert.match(enroll.stdout, new RegExp(`${M1.replace(/\./g, "\\.")} enrolled`));

  const done = await doctor();
  assert.equal(check(done, "stores").state, "ok", check(done, "stores").detail);
  assert.equal(check(done, "replies verified").state, "ok", check(done, "replies verified").detail);
  assert.equal(done.ok, true, JSON.stringify(done.checks.filter((c) => c.state === "fail")));
  // the CLI says so too: the reply is verified
  const ping = await runCli(["rpc", "rpcutil", "ping", "--json", "-I", M1], { env: opsEnv });
  const replies = (JSON.parse(ping.stdout) as { replies: { sender: string; verified: boolean }[] }).replies;
  assert.deepEqual(replies.map((r) => [r.sender, r.verified]), [[M1, true]]);
});

test("enroll refuses another key for an enrolled machine without --replace, and a non-key", async () => {
  const other = await runCli(["key", "create", "other", "--dir", join(ops, "site-keys")], { env: opsEnv });
  assert.equal(other.code, 0, other.stderr);
  const r = await runCli(["key", "enroll", M1, "--key", join(ops, "site-keys", "other.pub")], { env: opsEnv });
  assert.equal(r.code, 64, r.stdout + r.stderr);
  assert.match(r.stderr, /names another key for .*--replace/);
  const again = await runCli(["key", "enroll", M1, "--key", join(ops, "site-keys", `${M1}.pub`)], { env: opsEnv });
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stdout, /enrolled with this key already/);
  writeFileSync(join(tmp.path, "junk.pub"), "not a key\n");
  const junk = await runCli(["key", "enroll", M1, "--key", join(tmp.path, "junk.pub")], { env: opsEnv });
  assert.equal(junk.code, 64);
  assert.match(junk.stderr, /not an ed25519 public key/);
});

test("a node on its Puppet certificate that reaches no broker: its master's Puppet CA is named", async () => {
  const t = broker.tls("admin");
  const client = await MusterClient.connect({ brokers: [broker.url], tls: t, name: "doctor-site-test" });
  try {
    const store = await ProvisionState.open(client, "muster_provision");
    await store.put({ ...newRecord(M1), status: "done", stage: "notify", master: "puppet-a.doctor-site.test" });
    await store.put({ ...newRecord("dark1.doctor-site.test"), status: "done", stage: "notify", master: "puppet-b.doctor-site.test" });
  } finally {
    await client.close();
  }
  const rep = await doctor();
  const c = check(rep, "puppet CAs");
  assert.equal(c.state, "fail");
  assert.match(c.detail, /^dark1\.doctor-site\.test switched to their Puppet certificates/, "the node that answers is not named");
  assert.match(c.fix!, /puppet-b\.doctor-site\.test to clients-ca\.pem on every broker .*docs\/deploy\.md#4-puppet-masters/);
});

test("an operator with no key of their own: doctor makes one and says no machine names it", async () => {
  const fresh = cleanEnv(join(tmp.path, "fresh"), { MUSTER_TLS_CA: undefined, MUSTER_TLS_CERT: undefined, MUSTER_TLS_KEY: undefined, MUSTER_CALLER: "user=root", MUSTER_CONFIG: join(ops, "client.yaml") });
  const rep = await doctor(fresh);
  const c = check(rep, "signing key");
  assert.equal(c.state, "fail");
  assert.match(c.detail, /no signing key for caller user=root: made one now/);
  assert.match(c.fix!, /--trusted-key "\$\(muster key show\)".*docs\/deploy\.md#2-credentials/);
  assert.equal(check(rep, "trust").state, "fail", "and the machine does refuse it");
  assert.match(readFileSync(join(tmp.path, "fresh", "keys", "user=root.pub"), "utf8"), /^[A-Za-z0-9+/]{43}=\n$/);
});
