import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import type { NatsConnection } from "@nats-io/transport-node";
import { MusterClient } from "../../src/client/client.js";
import { buildFilter } from "../../src/filter/index.js";
import { decodeJson } from "../../src/protocol/envelope.js";
import { execCommand } from "../../src/puppet/exec.js";
import { cleanEnv, connectNats, eventually, record, runCli, spawnMuster, startBroker, tempDir, type Broker, type MusterProcess, type Recorder } from "../support/collective.js";

// A node's classes come from its own Puppet's classes file (no classes_file configured): the real
// `muster server` asks Puppet where the file is, and follows each rewrite without a restart. The
// rewrites are made by the real Puppet: `puppet apply --write-catalog-summary` writes the classes
// file exactly as an agent run does (Puppet::Resource::Catalog#write_class_file).

const tmp = tempDir("classes");
process.env.MUSTER_CONFIG_DIR = join(tmp.path, "config");
const env = cleanEnv(process.env.MUSTER_CONFIG_DIR);
const identity = "web1.classes.test";
const base = join(tmp.path, identity);
const dirs = { confdir: join(base, "etc"), vardir: join(base, "var"), ssldir: join(base, "ssl") };

let broker: Broker;
let nc: NatsConnection;
let client: MusterClient;
let registration: Recorder;
let server: MusterProcess;

before(async () => {
  broker = await startBroker();
  nc = await connectNats(broker.url);
  registration = record(nc, "muster.registration");
  await nc.flush();
  client = await MusterClient.connect({ nc });
  mkdirSync(dirs.confdir, { recursive: true });
  const configFile = join(tmp.path, "server.yaml");
  // A long poll: every change below must arrive through the watch, not the fallback.
  writeFileSync(
    configFile,
    toYaml({ identity, brokers: [broker.url], facts: { facter: false, refresh_interval: 3600 }, agents: { builtin: ["puppet"] }, plugins: { puppet: dirs }, registration: { interval: 3600, splay: false }, log: { level: "info" } }),
  );
  server = spawnMuster(["server", "--config", configFile], { env });
  await server.waitForLine(/ready/, 60_000);
});

after(async () => {
  await server?.stop();
  await client?.close();
  await nc?.drain().catch(() => undefined);
  await broker?.dispose();
  tmp.remove();
});

/** A real Puppet catalog for the node, with these classes, writing its classes file. */
async function puppetApply(classes: string[]): Promise<void> {
  const code = classes.map((c) => `class ${c} {}\ninclude ${c}`).join("\n");
  const args = ["apply", "--confdir", dirs.confdir, "--vardir", dirs.vardir, "--publicdir", join(dirs.vardir, "public"), "--codedir", join(base, "code"), "--logdir", join(base, "log"), "--rundir", join(base, "run"), "--write-catalog-summary", "-e", code];
  const r = await execCommand("puppet", args, { timeoutMs: 120_000 });
  assert.equal(r.code, 0, r.output);
}

const findByClass = (cls: string) => client.discover({ filter: buildFilter({ class: [cls] }), timeoutMs: 1500 });
const untilFound = (cls: string) => eventually(async () => ((await findByClass(cls)).includes(identity) ? true : undefined), 30_000, `-C ${cls} finding ${identity}`);

test("before Puppet ever ran the node has no classes; after a run -C finds it, with no restart", async () => {
  assert.deepEqual(await findByClass("role_web"), []);
  await puppetApply(["role_web", "profile::base"]);
  await untilFound("role_web");
  assert.deepEqual(await findByClass("profile::base"), [identity]);
  // registration carries the new classes at once, not at the next interval (an hour away)
  const reg = await registration.waitFor((m) => (decodeJson(m.data) as { classes: string[] }).classes.includes("role_web"), 10_000, "a registration with role_web");
  assert.deepEqual((decodeJson(reg.data) as { classes: string[] }).classes, ["profile::base", "role_web", "settings"]);
});

test("a later run replaces the classes; `muster inventory` lists them", async () => {
  await puppetApply(["role_db"]);
  await untilFound("role_db");
  assert.deepEqual(await findByClass("role_web"), []);
  const inv = await runCli(["inventory", identity, "--broker", broker.url], { env, timeoutMs: 60_000 });
  assert.equal(inv.code, 0, inv.stderr);
  assert.match(inv.stdout, /role_db/);
  assert.doesNotMatch(inv.stdout, /role_web/);
});

test("puppet.conf moving the statedir moves the classes file followed, to a directory Puppet makes later", async () => {
  writeFileSync(join(dirs.confdir, "puppet.conf"), `[main]\nstatedir = ${join(base, "state-elsewhere")}\n`);
  // the new location holds no classes file yet: no classes
  await eventually(async () => ((await findByClass("role_db")).length === 0 ? true : undefined), 30_000, "role_db gone after the statedir moved");
  await puppetApply(["role_cache"]);
  await untilFound("role_cache");
  assert.match(server.stderr(), /state-elsewhere\/classes\.txt","msg":"following Puppet's classes file/);
});

test("a node whose Puppet settings are wrong still serves, without classes, and says why", async () => {
  const configFile = join(tmp.path, "bad.yaml");
  writeFileSync(configFile, toYaml({ identity: "bad.classes.test", brokers: [broker.url], facts: { facter: false }, agents: { builtin: ["puppet"] }, plugins: { puppet: { ...dirs, serverport: "not-a-port" } }, registration: { interval: 0 } }));
  const bad = spawnMuster(["server", "--config", configFile], { env });
  try {
    await bad.waitForLine(/ready/, 60_000);
    assert.match(bad.stderr(), /serving without classes/);
    assert.match(bad.stderr(), /plugins\.puppet\.serverport/);
    const found = await client.discover({ filter: buildFilter({ identity: ["bad.classes.test"] }), timeoutMs: 1500 });
    assert.deepEqual(found, ["bad.classes.test"]);
  } finally {
    await bad.stop();
  }
});
