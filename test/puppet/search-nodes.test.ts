import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { startEmulator, type RunningEmulator } from "../../src/emulator/emulator.js";
import { silentLogger } from "../../src/log.js";
import { RegistryConfigSchema } from "../../src/registry/config.js";
import { startRegistry, type RunningRegistry } from "../../src/registry/daemon.js";
import { connectNats, eventually, repoRoot } from "../support/collective.js";
import { freePort, startNats, type NatsHandle } from "../support/index.js";

// The search_nodes Puppet function (puppet/modules/muster) in the real `puppet apply`, against a
// real registry daemon (HTTP with a bearer token) filled by emulated nodes over a real nats-server.

const modulepath = join(repoRoot, "puppet", "modules");
const dir = mkdtempSync(join(tmpdir(), "muster-search-nodes-"));
const token = "lab-token-0123456789abcdef0123";
const tokenFile = join(dir, "registry.token");
let nats: NatsHandle;
let nc: NatsConnection;
let registry: RunningRegistry;
let emu: RunningEmulator;

const fleet = [
  { identity: "db1.acme.dev", facts: { customer: "acme", environment: "development", ipaddress: "127.0.1.1" }, classes: ["role::db", "mysql::master"], agents: [] },
  { identity: "db2.acme.dev", facts: { customer: "acme", environment: "development", ipaddress: "127.0.1.2" }, classes: ["role::db", "mysql::slave"], agents: [] },
  { identity: "db1.acme.prod", facts: { customer: "acme", environment: "production", ipaddress: "127.0.1.3" }, classes: ["role::db", "mysql::master"], agents: [] },
  { identity: "db1.globex.dev", facts: { customer: "globex", environment: "development", ipaddress: "127.0.1.4" }, classes: ["role::db", "mysql::master"], agents: [] },
  { identity: "web1.acme.dev", facts: { customer: "acme", environment: "development", ipaddress: "127.0.1.5" }, classes: ["role::web"], agents: [] },
];

before(async () => {
  writeFileSync(tokenFile, `${token}\n`);
  nats = await startNats();
  nc = await connectNats(nats.url);
  emu = await startEmulator({ nc, nodes: fleet, collective: "muster", log: silentLogger, registration: { interval: 3600, splay: true } });
  registry = await startRegistry(RegistryConfigSchema.parse({ collectives: ["muster"], flush_interval: 0.05, http: { host: "127.0.0.1", port: 0, token_file: tokenFile }, log: { level: "silent" } }), silentLogger, { nc });
  // filled by asking the nodes (fill_on_start), not by their hourly registration
  await eventually(async () => (registry.store.status("muster").nodes === fleet.length ? true : undefined), 15_000, "the registry filling");
});

after(async () => {
  await registry?.stop();
  await emu?.stop();
  await nc?.drain().catch(() => undefined);
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A confdir whose muster.yaml points at `url` with `tokenPath`. */
function confdir(name: string, cfg: Record<string, unknown> | undefined): string {
  const d = join(dir, name);
  mkdirSync(d, { recursive: true });
  if (cfg) writeFileSync(join(d, "muster.yaml"), Object.entries(cfg).map(([k, v]) => `${k}: ${JSON.stringify(v)}\n`).join(""));
  return d;
}

/** The real puppet apply with the shipped module; resolves with its exit code and output. */
function apply(conf: string, manifest: string): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(
      "puppet",
      ["apply", "--confdir", conf, "--vardir", join(conf, "var"), "--publicdir", join(conf, "var", "public"), "--modulepath", modulepath, "--color=false", "--detailed-exitcodes", "-e", manifest],
      { timeout: 120_000, env: { ...process.env, LANG: "C.UTF-8" } },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, out: `${stdout}${stderr}` }),
    );
  });
}

test("search_nodes returns identities for a -W filter, full records on request, and takes the other flags as a Hash", async () => {
  const conf = confdir("ok", { registry_url: registry.httpAddress, token_file: tokenFile });
  const out = join(dir, "ok-out");
  const manifest = `
    $customer = 'acme'
    $env = 'development'
    $masterdb = search_nodes("customer=\${customer} environment=\${env} mysql::master")
    $all_acme = search_nodes('customer=acme')
    $records = search_nodes({ 'select' => 'mysql::master and not customer=globex' }, { 'full' => true })
    $none = search_nodes('customer=nobody')
    file { '${out}':
      content => "masterdb=\${masterdb.join(',')}\\nacme=\${all_acme.join(',')}\\nrecords=\${records.map |$r| { "\${r['identity']}@\${r['facts']['ipaddress']}" }.join(',')}\\nnone=\${none.length}\\n",
    }`;
  const r = await apply(conf, manifest);
  assert.ok(r.code === 0 || r.code === 2, r.out);
  assert.equal(
    readFileSync(out, "utf8"),
    "masterdb=db1.acme.dev\nacme=db1.acme.dev,db1.acme.prod,db2.acme.dev,web1.acme.dev\nrecords=db1.acme.dev@127.0.1.1,db1.acme.prod@127.0.1.3\nnone=0\n",
  );
});

test("the wrong token fails the catalog with a clear error naming the registry", async () => {
  const wrong = join(dir, "wrong.token");
  writeFileSync(wrong, "not-the-token-0123456789\n");
  const r = await apply(confdir("wrong", { registry_url: registry.httpAddress, token_file: wrong }), "notice(search_nodes('mysql::master'))");
  assert.equal(r.code, 1, r.out);
  assert.match(r.out, new RegExp(`search_nodes: the muster registry at ${registry.httpAddress} refused the token in ${wrong} \\(HTTP 401\\)`));
  const none = await apply(confdir("notoken", { registry_url: registry.httpAddress }), "notice(search_nodes('mysql::master'))");
  assert.equal(none.code, 1, none.out);
  assert.match(none.out, /wants a token: set token_file in .*muster\.yaml \(HTTP 401\)/);
});

test("an unreachable registry fails the catalog, naming the URL", async () => {
  const url = `http://127.0.0.1:${await freePort("127.0.0.1")}`;
  const r = await apply(confdir("down", { registry_url: url, token_file: tokenFile, timeout: 5 }), "file { '/nonexistent/never': content => search_nodes('mysql::master').join(',') }");
  assert.equal(r.code, 1, r.out);
  assert.match(r.out, new RegExp(`Error: .*search_nodes: cannot reach the muster registry at ${url}: .*(refused|ECONNREFUSED)`, "i"));
});

test("a bad filter, bad arguments and a missing configuration are Puppet errors that say what to fix", async () => {
  const conf = confdir("bad", { registry_url: registry.httpAddress, token_file: tokenFile });
  const bad = await apply(conf, "notice(search_nodes({ 'select' => '(web' }))");
  assert.equal(bad.code, 1, bad.out);
  assert.match(bad.out, /search_nodes: the muster registry at .* rejected the query .*select.*\(web/);
  const key = await apply(conf, "notice(search_nodes({ 'eval' => 'x' }))");
  assert.match(key.out, /search_nodes: unknown query key eval/);
  const missing = await apply(confdir("missing", undefined), "notice(search_nodes('x'))");
  assert.equal(missing.code, 1);
  assert.match(missing.out, /search_nodes: no muster registry configured: .*missing\/muster\.yaml is missing/);
});
