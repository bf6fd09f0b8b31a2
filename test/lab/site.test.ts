import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { startEmulator, type RunningEmulator } from "../../src/emulator/emulator.js";
import { labNodeSpec, writeSearchNodesConfig } from "../../src/lab/lab.js";
import { labEnvironments } from "../../src/lab/manifests.js";
import { expectedMotd, labRole, roleClasses } from "../../src/lab/roles.js";
import { writeEnvironment } from "../../src/lab/puppetserver.js";
import { silentLogger } from "../../src/log.js";
import { exportedFacts } from "../../src/puppet/facts.js";
import { RegistryConfigSchema } from "../../src/registry/config.js";
import { startRegistry, type RunningRegistry } from "../../src/registry/daemon.js";
import { connectNats, eventually } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";

// The lab's Puppet code (src/lab/manifests.ts with the shipped muster module) in the real
// `puppet apply`, one lab node per role, both stages, with facts exported as the provision and
// puppet agents export them (and classes.txt written, as an agent run writes it), and search_nodes asking a real registry filled by emulated nodes.

const dir = mkdtempSync(join(tmpdir(), "muster-lab-site-"));
const codedir = join(dir, "code");
const conf = join(dir, "master");
let nats: NatsHandle;
let nc: NatsConnection;
let registry: RunningRegistry;
let emu: RunningEmulator;

const others = [
  { identity: "db.acme.dev.example", facts: { customer: "acme", environment: "development", ipaddress: "127.0.2.1" }, classes: ["role::db", "mysql::master"], agents: [] },
  { identity: "db.globex.prod.example", facts: { customer: "globex", environment: "production", ipaddress: "127.0.2.2" }, classes: ["role::db", "mysql::master"], agents: [] },
  { identity: "web.acme.dev.example", facts: { customer: "acme", environment: "development", ipaddress: "127.0.2.3" }, classes: ["role::web", "webapp"], agents: [] },
];

before(async () => {
  for (const [name, files] of Object.entries(labEnvironments())) writeEnvironment({ codedir }, name, files);
  const tokenFile = join(dir, "token");
  writeFileSync(tokenFile, "site-test-token-0123456789abcdef\n");
  nats = await startNats();
  nc = await connectNats(nats.url);
  emu = await startEmulator({ nc, nodes: others, collective: "muster", log: silentLogger, registration: { interval: 3600, splay: true } });
  registry = await startRegistry(RegistryConfigSchema.parse({ collectives: ["muster"], flush_interval: 0.05, http: { host: "127.0.0.1", port: 0, token_file: tokenFile }, log: { level: "silent" } }), silentLogger, { nc });
  await eventually(async () => (registry.store.status("muster").nodes === others.length ? true : undefined), 15_000, "the registry filling");
  mkdirSync(conf, { recursive: true });
  writeSearchNodesConfig(conf, { url: registry.httpAddress!, token_file: tokenFile });
});

after(async () => {
  await registry?.stop();
  await emu?.stop();
  await nc?.drain().catch(() => undefined);
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** puppet apply of the lab's site for lab node `index` in `stage`; the node's dir and its detailed exit code. */
async function applySite(index: number, stage: "bootstrap" | "production"): Promise<{ code: number; out: string; node: string; identity: string; country: string }> {
  const spec = labNodeSpec(join(dir, "lab"), index, { ca: "/nonexistent", cert: "/nonexistent", key: "/nonexistent" });
  mkdirSync(spec.dir, { recursive: true });
  const plugin = (spec.server.plugins as { provision: { export_facts: string[] } }).provision;
  const facts = { ...exportedFacts(plugin.export_facts, spec.facts), lifecycle_stage: stage };
  const env: NodeJS.ProcessEnv = { ...process.env, LANG: "C.UTF-8" };
  for (const [k, v] of Object.entries(facts)) env[`FACTER_${k}`] = v;
  const args = ["apply", "--confdir", conf, "--vardir", join(spec.dir, "var"), "--publicdir", join(spec.dir, "var", "public"), "--environmentpath", join(codedir, "environments"), "--environment", stage, "--certname", spec.identity, "--color=false", "--detailed-exitcodes", "--write_catalog_summary", join(codedir, "environments", stage, "manifests", "site.pp")];
  return new Promise((resolve) => {
    execFile("puppet", args, { env, timeout: 120_000 }, (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, out: `${stdout}${stderr}`, node: spec.dir, identity: spec.identity, country: spec.region.country }));
  });
}

const classes = (node: string) => readFileSync(join(node, "var", "state", "classes.txt"), "utf8").split("\n").filter(Boolean);

test("labRole: any lab of 4 or more has one acme development master, web nodes, a monitor; masters stay unique", () => {
  for (const n of [4, 5, 6, 7, 13]) {
    const roles = Array.from({ length: n }, (_, i) => labRole(i));
    const masters = roles.filter((r) => r.mysql === "master");
    assert.equal(masters.filter((r) => r.customer === "acme" && r.environment === "development").length, 1, `n=${n}`);
    assert.equal(new Set(masters.map((r) => `${r.customer}/${r.environment}`)).size, masters.length, `one master per customer and environment, n=${n}`);
    assert.ok(roles.some((r) => r.role === "web" && r.customer === "acme" && r.environment === "development"), `n=${n}`);
    assert.ok(roles.some((r) => r.role === "monitor"), `n=${n}`);
    assert.deepEqual(new Set(roles.map((r) => r.customer)), new Set(["acme", "globex"]));
    assert.deepEqual(new Set(roles.map((r) => r.environment)), new Set(["development", "production"]));
  }
  assert.deepEqual(labRole(1), labRole(1), "deterministic");
});

test("web node: bootstrap leaves out webapp (search_nodes); production writes its customer's database master", async () => {
  const boot = await applySite(1, "bootstrap");
  assert.equal(boot.code, 2, boot.out);
  assert.equal(readFileSync(join(boot.node, "motd"), "utf8"), expectedMotd(boot.identity, boot.country, labRole(1), "bootstrap"));
  assert.equal(readFileSync(join(boot.node, "bootstrap-stage"), "utf8"), "lifecycle_stage=bootstrap\n");
  assert.ok(classes(boot.node).includes("role::web"));
  assert.ok(!classes(boot.node).includes("webapp"), "webapp is not bootstrap-aware");
  assert.equal(existsSync(join(boot.node, "webapp.conf")), false);

  const prod = await applySite(1, "production");
  assert.equal(prod.code, 2, prod.out);
  assert.match(readFileSync(join(prod.node, "webapp.conf"), "utf8"), /^database_host = db\.acme\.dev\.example$/m);
  assert.equal(readFileSync(join(prod.node, "motd"), "utf8"), expectedMotd(prod.identity, prod.country, labRole(1)));
  for (const c of roleClasses(labRole(1))) assert.ok(classes(prod.node).includes(c), c);
  // converged: a second run changes nothing
  const again = await applySite(1, "production");
  assert.equal(again.code, 0, again.out);
});

test("db master, db slave, globex web and monitor nodes get their classes, files and motd", async () => {
  const master = await applySite(0, "production");
  assert.equal(master.code, 2, master.out);
  assert.ok(classes(master.node).includes("mysql::master"));
  assert.match(readFileSync(join(master.node, "my.cnf"), "utf8"), /log-bin/);
  assert.equal(readFileSync(join(master.node, "motd"), "utf8"), expectedMotd(master.identity, master.country, labRole(0)));
  assert.match(readFileSync(join(master.node, "motd"), "utf8"), /- MySQL master \(mysql::master\)\n$/);

  const slave = await applySite(5, "production");
  assert.equal(slave.code, 2, slave.out);
  assert.match(readFileSync(join(slave.node, "my.cnf"), "utf8"), /master-host = db\.acme\.dev\.example/);

  const globex = await applySite(2, "production");
  assert.equal(globex.code, 2, globex.out);
  assert.match(readFileSync(join(globex.node, "webapp.conf"), "utf8"), /^database_host = db\.globex\.prod\.example$/m);

  const monitor = await applySite(3, "production");
  assert.equal(monitor.code, 2, monitor.out);
  assert.equal(readFileSync(join(monitor.node, "monitored-nodes"), "utf8"), "db.acme.dev.example 127.0.2.1 acme development\ndb.globex.prod.example 127.0.2.2 globex production\nweb.acme.dev.example 127.0.2.3 acme development\n");
  assert.equal(readFileSync(join(monitor.node, "motd"), "utf8"), expectedMotd(monitor.identity, monitor.country, labRole(3)));
});

test("an unreachable registry fails the web node's production catalog and says where it looked", async () => {
  const saved = readFileSync(join(conf, "muster.yaml"), "utf8");
  writeSearchNodesConfig(conf, { url: "http://127.0.0.1:9", token_file: join(dir, "token") });
  try {
    const r = await applySite(1, "production");
    assert.equal(r.code, 1, r.out);
    assert.match(r.out, /search_nodes: cannot reach the muster registry at http:\/\/127\.0\.0\.1:9/);
  } finally {
    writeFileSync(join(conf, "muster.yaml"), saved);
  }
});
