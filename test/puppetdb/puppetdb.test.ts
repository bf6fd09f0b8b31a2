import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { request } from "node:https";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { MusterClient } from "../../src/client/client.js";
import { startEmulator, type RunningEmulator } from "../../src/emulator/emulator.js";
import type { FleetNode } from "../../src/emulator/fleet.js";
import { buildFilter, type FilterOptions } from "../../src/filter/index.js";
import { shippedModule } from "../../src/lab/manifests.js";
import { startPuppetserver, type PuppetserverHandle } from "../../src/lab/puppetserver.js";
import { silentLogger } from "../../src/log.js";
import { CertificateAuthority, PuppetAgent, caSettingsFromSsldir } from "../../src/puppet/index.js";
import { PuppetDb, PuppetDbRefused } from "../../src/puppetdb/http.js";
import { RegistryConfigSchema } from "../../src/registry/config.js";
import { startRegistry, type RunningRegistry } from "../../src/registry/daemon.js";
import { ensureCA, issueCert, signCertificate } from "../../src/security/pki.js";
import { puppetDbTlsScript } from "../../src/config/puppetdb-site.js";
import { cleanEnv, connectNats, eventually, runCli, tempDir } from "../support/collective.js";
import { docCommandsRunBy, pathWithMuster } from "../support/doc-run.js";
import { freePort, startNats, type NatsHandle } from "../support/index.js";
import { startPuppetDb, storeNode, storeReport, type PuppetDbHandle } from "../support/puppetdb.js";
import { WebConfigSchema } from "../../src/web/config.js";
import { startWeb } from "../../src/web/daemon.js";
import { Semaphore } from "../../src/semaphore.js";

// --dm puppetdb, search_nodes and decommission against one real PuppetDB (Debian's package, its own
// PostgreSQL), shared by every test of this file: a real puppetserver sends it facts, catalogs and
// reports (puppet-terminus-puppetdb, over TLS with the master's certificate), and the registry
// daemon asks it over TLS with a certificate of another CA PuppetDB trusts, as on the site. The
// fleet's nodes are emulated (they answer broadcast discovery); the same facts and classes reach
// PuppetDB through its command API, so every filter can be asked both ways and compared.

const host = "127.0.0.74";
const tmp = tempDir("puppetdb");
process.env.MUSTER_CONFIG_DIR = join(tmp.path, "keys");
const env = cleanEnv(process.env.MUSTER_CONFIG_DIR);
const token = "puppetdb-test-token-0123456789abcdef";
const tokenFile = join(tmp.path, "registry.token");

let nats: NatsHandle;
let nc: NatsConnection;
let master: PuppetserverHandle;
let pdb: PuppetDbHandle;
let registry: RunningRegistry;
let emu: RunningEmulator;
let client: MusterClient;
/** PuppetDB's TLS URL, by name (https://localhost:PORT), as the master and the registry reach it. */
let pdbUrl: string;
/** PuppetDB's TLS files and the registry's credential (another CA PuppetDB trusts). */
let tls: { puppetCa: string; musterCa: string; registryCert: string; registryKey: string; strangerCert: string; strangerKey: string; intruderCert: string; intruderKey: string };

// Facts of every JSON type PuppetDB keeps apart, numbers as strings among them (os.release.major is
// a string from facter: "12" >= 11 is true for muster), arrays, structures, a flat dotted name.
const COUNTRIES = ["de", "uk", "us", "fr"];
/** The fact muster's servers write (maps of names: src/server/server.ts), as the muster module reports it. */
const musterFact = (agents: string[], collectives: string[]) => ({ agents: Object.fromEntries(agents.map((a) => [a, true])), collectives: Object.fromEntries(collectives.map((c) => [c, true])) });
function fleetNode(i: number): FleetNode & { collectives: string[] } {
  const id = `node${String(i).padStart(2, "0")}.${i % 2 ? "eu" : "us"}.lab`;
  const role = i % 3 === 0 ? "db" : i % 3 === 1 ? "web" : "app";
  const agents = ["nrpe", ...(i % 2 ? ["puppet"] : [])];
  const collectives = i === 17 ? ["other"] : ["muster"];
  const facts: Record<string, unknown> = {
    country: COUNTRIES[i % 4],
    role: i % 5 === 0 ? [role, "cache"] : role,
    customer: i % 4 < 2 ? "acme" : "globex",
    environment: i % 2 ? "development" : "production",
    os: { family: i % 6 === 0 ? "RedHat" : "Debian", release: { major: String(9 + (i % 5)) } },
    processorcount: i === 7 ? "16" : [2, 4, 8][i % 3],
    memorysize_mb: i % 4 === 0 ? 8192.0 : i % 4 === 1 ? "8192" : 4096,
    is_virtual: i % 3 !== 0,
    disks: [{ name: i % 2 ? "sda" : "vda", size: 100 * i }],
    // what every muster node's fact says (the muster module's lib/facter/muster.rb)
    muster: musterFact(["discovery", "rpcutil", ...agents], collectives),
  };
  if (i === 4) facts["os.name"] = "Debian GNU/Linux";
  const classes = ["base", `role::${role}`, ...(role === "db" ? [i % 2 ? "mysql::master" : "mysql::slave"] : []), ...(role === "web" && i % 2 ? ["apache", "apache::mod::ssl"] : [])];
  return { identity: id, facts, classes, agents, collectives };
}
const fleet = Array.from({ length: 24 }, (_, i) => fleetNode(i + 1));

before(async () => {
  mkdirSync(process.env.MUSTER_CONFIG_DIR!, { recursive: true });
  writeFileSync(tokenFile, `${token}\n`);
  nats = await startNats();
  nc = await connectNats(nats.url);
  // PuppetDB's port is known before the master starts: its puppetdb.conf names it. PuppetDB listens
  // on 127.0.0.1, reached as localhost: a name, so clients ask for its certificate by name (SNI)
  const sslPort = await freePort("127.0.0.1");
  pdbUrl = `https://localhost:${sslPort}`;
  master = await startPuppetserver({ host, puppetdb: [pdbUrl], environments: { production: { manifest: SITE, modules: { muster: shippedModule("muster"), ...SITE_MODULES } } } });
  console.log(`# puppetserver ready in ${master.startMs} ms`);
  // TLS as a site's (config/puppetdb-site.ts): PuppetDB holds a certificate from the master's CA
  // (the terminus checks it against that CA) and one from muster's CA for another name, picked by
  // the name a client asks for; it trusts both CAs' clients, and lets in the names it lists only
  const puppetCa = { cert: join(master.cadir, "ca_crt.pem"), key: join(master.cadir, "ca_key.pem") };
  const musterCa = ensureCA(join(tmp.path, "muster-ca"), "/O=muster/CN=muster test CA");
  const forMaster = signCertificate(puppetCa, "/CN=localhost", { usage: "server", dns: ["localhost"] });
  const other = signCertificate(musterCa, "/CN=puppetdb-other.test", { usage: "server", dns: ["puppetdb-other.test"] });
  const reg = issueCert(musterCa, { name: "registry", subject: "/O=muster/OU=service/CN=registry", usage: "client" });
  const intruder = issueCert(musterCa, { name: "intruder", subject: "/O=muster/OU=service/CN=intruder", usage: "client" });
  const stranger = issueCert(ensureCA(join(tmp.path, "stranger-ca"), "/CN=a CA PuppetDB does not trust"), { name: "stranger", subject: "/CN=registry", usage: "client" });
  tls = { puppetCa: puppetCa.cert, musterCa: musterCa.cert, registryCert: reg.cert, registryKey: reg.key, strangerCert: stranger.cert, strangerKey: stranger.key, intruderCert: intruder.cert, intruderKey: intruder.key };
  const script = (etc: string, p: { host: string; plain: number; ssl: number }) => {
    // the masters' files where an operator copies them (docs/deploy.md section 10), then the site's script
    const incoming = join(etc, "ssl-incoming");
    mkdirSync(incoming, { recursive: true });
    const put = (name: string, text: string) => writeFileSync(join(incoming, name), text, { mode: 0o600 });
    put("localhost.pem", forMaster.cert);
    put("localhost.key", forMaster.key);
    put("puppetdb-other.test.pem", other.cert);
    put("puppetdb-other.test.key", other.key);
    put("ca-puppet.pem", readFileSync(puppetCa.cert, "utf8"));
    put("ca-muster.pem", readFileSync(musterCa.cert, "utf8"));
    return puppetDbTlsScript({ names: ["localhost", "puppetdb-other.test"], allow: [master.certname, "registry"], etc, plain: { host: p.host, port: p.plain }, ssl: { host: p.host, port: p.ssl }, restart: false });
  };
  pdb = await startPuppetDb({
    sslPort,
    tls: {
      configure: async (etc, p) => {
        const r = spawnSync("sh", ["-s"], { input: script(etc, p), encoding: "utf8" });
        assert.equal(r.status, 0, `the site's PuppetDB TLS script: ${r.stderr}`);
      },
    },
    // a node silent for an hour is expired, and the expiry runs every 1.2 s (instead of hourly)
    database: { "node-ttl": "1h", "gc-interval-expire-nodes": "0.02" },
  });
  console.log(`# PuppetDB running in ${pdb.startMs} ms (its JVM's resident memory ${Math.round(pdb.rssKb() / 1024)} MiB)`);
  registry = await startRegistry(
    RegistryConfigSchema.parse({
      collectives: ["muster"],
      flush_interval: 0.05,
      http: { host: "127.0.0.1", port: 0, token_file: tokenFile },
      puppetdb: { url: pdbUrl, ca: tls.puppetCa, cert: tls.registryCert, key: tls.registryKey },
      log: { level: "silent" },
    }),
    silentLogger,
    { nc },
  );
  // the alive bucket, as docs/fleet.md#health has a fleet without a console make it: heartbeats for health
  const stores = await runCli(["broker", "stores", "--broker", nats.url], { env });
  assert.equal(stores.code, 0, stores.stderr);
  emu = await startEmulator({ nc, nodes: fleet, collective: "muster", log: silentLogger, registration: { interval: 3600, splay: true }, heartbeat: 1 });
  await Promise.all(fleet.map((n) => storeNode(pdb.db, { identity: n.identity, facts: n.facts, classes: n.classes })));
  client = await MusterClient.connect({ nc });
});

after(async () => {
  await client?.close();
  await emu?.stop();
  await registry?.stop();
  await nc?.drain().catch(() => undefined);
  await nats?.stop();
  await pdb?.stop();
  await master?.stop();
  tmp.remove();
});

const cli = (args: string[], timeoutMs = 60_000) => runCli([...args, "--broker", nats.url], { env, timeoutMs });
/** docs/puppetdb.md's commands, as written: through /bin/sh with `muster` on PATH and the broker in MUSTER_BROKER, as a shell on the fleet would. */
let docsCache: ReturnType<typeof docCommandsRunBy> | undefined;
const docs = () => {
  if (docsCache) return docsCache;
  return (docsCache = docCommandsRunBy("test/puppetdb/puppetdb.test.ts", { cwd: tmp.path, env: { ...env, MUSTER_BROKER: nats.url, PATH: pathWithMuster(tmp.path, env.PATH) }, timeoutMs: 90_000 }));
};
const puppetdbSource = () => client.source({ method: "puppetdb" });

async function both(o: FilterOptions): Promise<{ broadcast: string[]; puppetdb: string[] }> {
  const filter = buildFilter(o);
  const [broadcast, puppetdb] = await Promise.all([client.discover({ filter, timeoutMs: 5000, anticipate: undefined }), client.discover({ filter, source: await puppetdbSource(), timeoutMs: 120_000 })]);
  return { broadcast, puppetdb };
}

test("--dm puppetdb selects what broadcast discovery selects, filter by filter", async () => {
  const filters: FilterOptions[] = [
    {},
    { fact: ["country=de"] },
    { fact: ["country!=de"] },
    { fact: ["processorcount>4"] },
    { fact: ["processorcount<=4"] },
    { fact: ["os.release.major>=11"] },
    { fact: ["os.release.major<10"] },
    { fact: ["memorysize_mb=8192"] },
    { fact: ["is_virtual=true"] },
    { fact: ["role=web"] },
    { fact: ["role!=web"] },
    { fact: ["role=/^ca/"] },
    { fact: ["disks.0.name=sda"] },
    { fact: ["os.name=~Deb"] },
    { fact: ["customer>b"] },
    { class: ["mysql::master"] },
    { class: ["/^apache/"] },
    { class: ["/::M/"] },
    { class: ["Apache"] },
    { agent: ["puppet"] },
    { agent: ["/^nr/"] },
    { identity: ["node03.eu.lab", "/^node1\\d\\.us/"] },
    { with: ["environment=development customer=acme mysql::master"] },
    { select: ["(country=de or country=uk) and not role=db"] },
    { select: ["not os.release.major>=11 and processorcount>=4"] },
    { select: ["fact('os').value.family=RedHat or agent('puppet').present=true"] },
    { select: ["agent('puppet').present=false and not /^role::w/"] },
    { fact: ["country=de"], class: ["base"], agent: ["nrpe"], select: ["memorysize_mb>=8192 or is_virtual=false"] },
  ];
  // four filters at a time, each a registry request with a deadline that catches a hang, not a
  // measure: 28 at once queued behind each other in PuppetDB past 30 s on a loaded machine, and
  // four at a time took up to about 20 s each beside the site (run 31: 148 s for the test)
  const four = new Semaphore(4);
  const answers = await Promise.all(
    filters.map(async (f) => {
      await four.acquire();
      try {
        return await both(f);
      } finally {
        four.release();
      }
    }),
  );
  filters.forEach((f, i) => {
    const r = answers[i]!;
    assert.deepEqual(r.puppetdb, r.broadcast, `${JSON.stringify(f)}: PuppetDB found ${r.puppetdb.join(" ")}; broadcast ${r.broadcast.join(" ")}`);
  });
  assert.ok(new Set(answers.map((a) => a.broadcast.join(" "))).size > filters.length / 2, "the filters select different sets");
  // not vacuous: the filters select different, non-empty sets
  assert.equal((await both({})).puppetdb.length, fleet.length - 1, "every node but the one in another collective");
  assert.deepEqual((await both({ with: ["environment=development customer=acme mysql::master"] })).puppetdb, ["node09.eu.lab", "node21.eu.lab"].filter((n) => fleet.find((x) => x.identity === n)!.facts.customer === "acme"));
});

test("the CLI: `muster find --dm puppetdb` prints what PuppetDB found; a -S PuppetDB cannot answer is refused before anything is asked", async () => {
  const r = await docs().run('muster find --dm puppetdb -W "environment=development customer=acme mysql::master"');
  assert.equal(r.stdout, `${(await both({ with: ["environment=development customer=acme mysql::master"] })).broadcast.join("\n")}\n`);
  const refused = await cli(["find", "--dm", "puppetdb", "-S", "country=de and provision().locked=false"]);
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, /-S\[0\]: the data plugin provision\(\) runs on the node, and PuppetDB holds facts, classes and reports only; use broadcast discovery \(--dm broadcast\)/);
  const regex = await cli(["find", "--dm", "puppetdb", "-F", "country=~/(?<c>de)/"]);
  assert.equal(regex.code, 1);
  assert.match(regex.stderr, /PostgreSQL \(PuppetDB\) reads differently/);
});

test("pql: identities: PuppetDB's own queries, ORed with the other identities; the nodes are called without them", async () => {
  const q = 'pql:inventory[certname] { facts.country = "de" }';
  const viaPql = await docs().run(`muster find --dm puppetdb -I '${q}'`);
  assert.equal(viaPql.stdout, `${(await both({ fact: ["country=de"] })).broadcast.join("\n")}\n`);
  const or = await cli(["find", "--dm", "puppetdb", "-I", q, "-I", "node02.us.lab", "-C", "base", "--json"]);
  assert.deepEqual(JSON.parse(or.stdout), [...(await both({ fact: ["country=de"] })).broadcast, "node02.us.lab"].sort());
  // the call reaches the nodes, which could not evaluate a pql: identity themselves
  const ping = await cli(["rpc", "rpcutil", "ping", "--dm", "puppetdb", "-I", q, "--json"]);
  assert.equal(ping.code, 0, ping.stderr + ping.stdout);
  const res = JSON.parse(ping.stdout) as { replies: { sender: string; statuscode: number }[] };
  assert.deepEqual(res.replies.map((x) => [x.sender, x.statuscode]).sort(), (await both({ fact: ["country=de"] })).broadcast.map((n) => [n, 0]));
  for (const dm of ["broadcast", "registry"]) {
    const other = await cli(["find", "--dm", dm, "-I", q]);
    assert.equal(other.code, 1);
    assert.match(other.stderr, /a pql: identity is a PuppetDB query: discover with --dm puppetdb/);
  }
  const bad = await cli(["find", "--dm", "puppetdb", "-I", "pql:nodes[certname] { facts.x ==== 1 }"]);
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /PuppetDB refused the pql: query: .*PQL parse error/s);
  const rows = await cli(["find", "--dm", "puppetdb", "-I", "pql:fact_paths[path] {}"]);
  assert.equal(rows.code, 1);
  assert.match(rows.stderr, /rows carry no certname; ask for certnames/);
});

test("a node PuppetDB lists that does not answer is reported by the call, as --dm registry does", async () => {
  const ghost = fleetNode(40);
  ghost.identity = "ghost.eu.lab";
  await storeNode(pdb.db, { identity: ghost.identity, facts: { ...ghost.facts, country: "nl" }, classes: ghost.classes });
  // as docs/puppetdb.md writes it, which holds it to exit 3 (discovered, no responses)
  const r = await docs().run("muster rpc rpcutil ping --dm puppetdb -F country=nl");
  assert.match(r.stdout + r.stderr, /No response from:\s+ghost\.eu\.lab/);
  docs().ranAll();
});

test("deactivated and expired nodes are left out, though they still answer", async () => {
  const retired = { identity: "retired.us.lab", facts: { country: "se", muster: musterFact(["discovery", "rpcutil"], ["muster"]) }, classes: ["base"], agents: [] };
  const stale = { identity: "stale.us.lab", facts: { country: "se", muster: musterFact(["discovery", "rpcutil"], ["muster"]) }, classes: ["base"], agents: [] };
  const more = await startEmulator({ nc, nodes: [retired, stale], collective: "muster", log: silentLogger, registration: { interval: 3600, splay: true } });
  try {
    await storeNode(pdb.db, retired);
    assert.deepEqual((await both({ fact: ["country=se"] })).puppetdb, ["retired.us.lab"]);
    await pdb.db.command("deactivate node", 3, retired.identity, { certname: retired.identity, producer_timestamp: new Date().toISOString() }, { waitSeconds: 30 });
    // last heard of two days ago: PuppetDB's expiry (node-ttl 1h) takes it at its next pass
    await storeNode(pdb.db, { ...stale, at: new Date(Date.now() - 2 * 86400_000) });
    await eventually(async () => ((await pdb.db.get(`/pdb/query/v4/nodes/${stale.identity}`)) as { expired?: string | null } | undefined)?.expired ?? undefined, 60_000, "PuppetDB expiring stale.us.lab");
    const r = await both({ fact: ["country=se"] });
    assert.deepEqual(r.broadcast, ["retired.us.lab", "stale.us.lab"], "both still answer");
    assert.deepEqual(r.puppetdb, [], "PuppetDB lists neither");
  } finally {
    await more.stop();
  }
});

test("no registry with PuppetDB, or PuppetDB refusing the registry's certificate: an error that says what to do; hostile requests get a clear answer", async () => {
  const none = await cli(["find", "--dm", "puppetdb", "--config", writeClientConfig("no-pdb", { registry_bucket: "nothing_here" })]);
  assert.equal(none.code, 1);
  assert.match(none.stderr, /MUSTER_PUPPETDB_UNAVAILABLE|--dm puppetdb asks the registry on muster\.registry\.nothing_here\.puppetdb: no registry daemon with a puppetdb: section answers there\. Start `muster registry serve` with puppetdb: in its config/);
  const stranger = await startRegistry(
    RegistryConfigSchema.parse({ bucket: "stranger", puppetdb: { url: pdbUrl, ca: tls.puppetCa, cert: tls.strangerCert, key: tls.strangerKey }, log: { level: "silent" }, fill_on_start: false }),
    silentLogger,
    { nc },
  );
  try {
    const refused = await cli(["find", "--dm", "puppetdb", "--config", writeClientConfig("stranger", { registry_bucket: "stranger" })]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, new RegExp(`the registry on muster\\.registry\\.stranger\\.puppetdb could not ask PuppetDB: cannot reach PuppetDB at ${pdbUrl.replace(/\./g, "\\.")}: `));
  } finally {
    await stranger.stop();
  }
  const ask = async (body: string) => JSON.parse(new TextDecoder().decode((await nc.request("muster.registry.muster-registry.puppetdb", new TextEncoder().encode(body), { timeout: 30_000 })).data)) as { error?: string; code?: string };
  assert.deepEqual(await ask("not json"), { error: "request is not JSON", code: "bad_request" });
  assert.equal((await ask('{"op":"drop tables"}')).code, "bad_request");
  assert.equal((await ask('{"op":"discover","filter":{"fact":[{"fact":"x","operator":"===","value":"1"}]}}')).code, "MUSTER_FILTER_INVALID");
  assert.equal((await ask('{"op":"discover","filter":{},"collective":"../x"}')).code, "bad_request");
  assert.equal((await ask(JSON.stringify({ op: "discover", filter: {}, pad: "x".repeat(300 * 1024) }))).code, "bad_request");
  // still answering after all that
  assert.equal((await both({ fact: ["country=de"] })).puppetdb.length > 0, true);
});

function writeClientConfig(name: string, cfg: Record<string, unknown>): string {
  const file = join(tmp.path, `${name}.client.yaml`);
  writeFileSync(file, Object.entries(cfg).map(([k, v]) => `${k}: ${JSON.stringify(v)}\n`).join(""));
  return file;
}

// The seed's database-master workflow: a web node's catalog asks search_nodes for the database
// master of its customer and environment; with `source: puppetdb` the registry answers from PuppetDB,
// where the master stored the database node's compiled catalog (its classes) and facts.
const SITE = `
node default {
  if $facts['fail'] == 'yes' { exec { 'fail on purpose': command => '/bin/false' } }
  case $facts['role'] {
    'db':  { include mysql::master }
    'web': { include webapp }
    default: {}
  }
}
`;
const SITE_MODULES = {
  mysql: { "manifests/master.pp": "class mysql::master { notify { 'a database master': } }\n" },
  webapp: {
    "manifests/init.pp": `class webapp {
  $masterdb = search_nodes("customer=\${facts['customer']} environment=\${facts['environment']} mysql::master")
  notify { "masterdb=\${masterdb.join(',')}": }
}
`,
  },
};

test("search_nodes answers from PuppetDB: a web node's catalog finds the database master whose catalog the master compiled", async () => {
  writeFileSync(join(master.confdir, "muster.yaml"), `registry_url: ${registry.httpAddress}\ntoken_file: ${tokenFile}\nsource: puppetdb\n`);
  const ca = new CertificateAuthority(caSettingsFromSsldir(master.url, master.ssldir, master.certname));
  const agent = async (certname: string) => {
    const base = join(tmp.path, "agents", certname);
    const d = { confdir: join(base, "conf"), vardir: join(base, "var"), ssldir: join(base, "ssl") };
    for (const p of Object.values(d)) mkdirSync(p, { recursive: true });
    const a = new PuppetAgent({ ...d, certname });
    a.setPuppetHost(host, master.port);
    const req = await a.requestCertificate({ timeoutMs: 120_000 });
    await ca.sign(certname, req.fingerprint);
    assert.equal(await a.downloadCert({ timeoutMs: 120_000 }), true);
    return a;
  };
  const [db, other, web] = await Promise.all(["db1.acme.dev", "db1.globex.dev", "web1.acme.dev"].map(agent));
  for (const [a, customer] of [[db!, "acme"], [other!, "globex"]] as const) {
    const r = await a.run({ timeoutMs: 240_000, facts: { role: "db", customer, environment: "development" } });
    assert.ok(r.success, r.output);
  }
  const r = await web!.run({ timeoutMs: 240_000, facts: { role: "web", customer: "acme", environment: "development" } });
  assert.ok(r.success, r.output);
  assert.match(r.output, /masterdb=db1\.acme\.dev\b/, "the master's catalog of db1.acme.dev, stored in PuppetDB, named it; globex's was not");
  // what PuppetDB holds came from the master: the facts, the catalog's classes and the run's report
  const stored = await pdb.db.query('nodes[certname, report_timestamp, catalog_timestamp, facts_timestamp] { certname = "db1.acme.dev" }');
  assert.equal(stored.length, 1);
  for (const k of ["report_timestamp", "catalog_timestamp", "facts_timestamp"]) assert.equal(typeof (stored[0] as Record<string, unknown>)[k], "string", k);
});

test("decommission deactivates the node in PuppetDB through the master's puppetca agent, and says so; again: already inactive", async () => {
  // the master's muster server: the real puppetca agent, with the master's confdir (its puppetdb.conf)
  const masters = await startEmulator({ nc, nodes: [{ identity: master.certname, facts: {}, classes: [], agents: ["puppetca"] }], collective: "muster", log: silentLogger, plugins: { puppetca: { confdir: master.confdir } } });
  try {
    const pdbRe = pdbUrl.replace(/\./g, "\\.");
    const r = await cli(["decommission", "--wait", "--no-notify", "db1.globex.dev"], 120_000);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stdout, new RegExp(`db1\\.globex\\.dev\\s+puppetdb\\s+done\\s+deactivated in PuppetDB ${pdbRe} \\(by ${master.certname}\\)`));
    const node = (await pdb.db.get("/pdb/query/v4/nodes/db1.globex.dev")) as { deactivated: string | null };
    assert.equal(typeof node.deactivated, "string", "PuppetDB lists it deactivated");
    assert.deepEqual(await pdb.db.query('nodes[certname] { certname = "db1.globex.dev" }'), [], "and leaves it out of its answers");
    const again = await cli(["decommission", "--json", "--no-notify", "db1.globex.dev"], 120_000);
    const [out] = JSON.parse(again.stdout) as { steps: { step: string; ok: boolean; changed: boolean; detail: string }[] }[];
    const step = out!.steps.find((s) => s.step === "puppetdb")!;
    assert.deepEqual([step.ok, step.changed], [true, false]);
    assert.match(step.detail, new RegExp(`already inactive in PuppetDB ${pdbRe}`));
    const unknown = await cli(["decommission", "--json", "--no-notify", "never.known.lab"], 120_000);
    assert.match((JSON.parse(unknown.stdout) as { steps: { step: string; detail: string }[] }[])[0]!.steps.find((s) => s.step === "puppetdb")!.detail, /unknown to PuppetDB/);
  } finally {
    await masters.stop();
  }
});

test("PuppetDB's TLS, as a site sets it up: a client of a CA it does not trust is refused, one it trusts but does not list is forbidden, and each name gets its own certificate", async () => {
  const stranger = new PuppetDb({ url: pdbUrl, ca: tls.puppetCa, cert: tls.strangerCert, key: tls.strangerKey, timeoutMs: 10_000 });
  await assert.rejects(stranger.query("nodes[certname] {}"), /cannot reach PuppetDB at/);
  const noCert = new PuppetDb({ url: pdbUrl, ca: tls.puppetCa, timeoutMs: 10_000 });
  await assert.rejects(noCert.query("nodes[certname] {}"), /cannot reach PuppetDB at|HTTP 4\d\d/);
  // a certificate of a CA PuppetDB trusts, with a name its allowlist does not hold: no entry
  const intruder = new PuppetDb({ url: pdbUrl, ca: tls.puppetCa, cert: tls.intruderCert, key: tls.intruderKey, timeoutMs: 10_000 });
  await assert.rejects(intruder.query("nodes[certname] {}"), (e: unknown) => e instanceof PuppetDbRefused && e.status === 403);
  await assert.rejects(intruder.command("deactivate node", 3, "node01.eu.lab", { certname: "node01.eu.lab", producer_timestamp: new Date().toISOString() }), (e: unknown) => e instanceof PuppetDbRefused && e.status === 403);
  const registryCred = new PuppetDb({ url: pdbUrl, ca: tls.puppetCa, cert: tls.registryCert, key: tls.registryKey });
  assert.ok((await registryCred.query("nodes[certname] {}")).length > 0);
  // the certificate a client gets is the one for the name it asked for, of the CA that client trusts
  const served = (servername: string, ca: string) =>
    new Promise<string>((resolve, reject) => {
      const req = request({ host: "127.0.0.1", port: pdb.sslPort, path: "/status/v1/simple", servername, headers: { host: `${servername}:${pdb.sslPort}` }, ca: readFileSync(ca), cert: readFileSync(tls.registryCert), key: readFileSync(tls.registryKey) }, (res) => {
        resolve(String((res.socket as import("node:tls").TLSSocket).getPeerCertificate().subject.CN));
        res.resume();
      });
      req.on("error", reject);
      req.end();
    });
  assert.equal(await served("localhost", tls.puppetCa), "localhost");
  assert.equal(await served("puppetdb-other.test", tls.musterCa), "puppetdb-other.test");
  await assert.rejects(served("puppetdb-other.test", tls.puppetCa), /self-signed|unable to verify|certificate/i, "that name's certificate is not the Puppet CA's");
});

test("muster health: PuppetDB's reports are the record of runs; a node it lists active that does not answer, and one that answers with no report there, are flagged", async () => {
  await storeReport(pdb.db, "node02.us.lab", { status: "changed" });
  // a node powered off: it answered, reported, then stopped without a word; PuppetDB still lists it active
  const off = { identity: "off.eu.lab", facts: { country: "be", muster: musterFact(["discovery", "rpcutil"], ["muster"]) }, classes: ["base"], agents: [] };
  // its own connection, cut rather than closed: a machine without power says nothing on its way out
  const wire = await connectNats(nats.url);
  const machine = await startEmulator({ nc: wire, nodes: [off], collective: "muster", log: silentLogger, heartbeat: 1 });
  await storeNode(pdb.db, off);
  await storeReport(pdb.db, off.identity, { status: "unchanged" });
  const report = async () => JSON.parse((await cli(["health", "--json", "--unreachable-after", "3"])).stdout) as { nodes: { identity: string; reachable: boolean; puppet: { source: string; status: string | null } | null; problems: { kind: string; why: string }[] }[] };
  await eventually(async () => ((await report()).nodes.find((n) => n.identity === off.identity)?.reachable ? true : undefined), 30_000, "off.eu.lab heard from");
  await wire.close(); // the power cut: no more heartbeats, and no last one saying it stops
  after(() => machine.stop().catch(() => undefined));
  const r = await eventually(async () => {
    const r = await report();
    return r.nodes.find((n) => n.identity === off.identity)?.reachable === false ? r : undefined;
  }, 30_000, "off.eu.lab unreachable");
  const by = new Map(r.nodes.map((n) => [n.identity, n]));
  const kinds = (id: string) => by.get(id)?.problems.map((p) => p.kind);
  assert.deepEqual(kinds(off.identity), ["unreachable", "puppetdb_active"]);
  assert.match(by.get(off.identity)!.problems[1]!.why, /PuppetDB still lists it active, its last report \d+ s ago: if it is gone for good, `muster decommission off\.eu\.lab` deactivates it there/);
  assert.deepEqual(kinds("ghost.eu.lab"), ["unreachable", "puppetdb_active"], "known to PuppetDB alone, never heard from");
  assert.deepEqual([by.get("node02.us.lab")?.puppet?.source, by.get("node02.us.lab")?.puppet?.status, kinds("node02.us.lab")], ["puppetdb", "changed", []], "its report in PuppetDB is the record of its runs");
  assert.deepEqual(kinds("node04.us.lab"), ["puppetdb_no_report"], "it answers, and PuppetDB has no report of it");
  assert.equal(by.has("db1.globex.dev"), false, "deactivated by decommission: PuppetDB no longer lists it");
  // as people read it
  const text = await cli(["health", "--problems", "--unreachable-after", "3", "-I", off.identity, "-I", "node04.us.lab"]);
  assert.equal(text.code, 2, text.stderr);
  assert.match(text.stdout, /off\.eu\.lab\s+unreachable\s+no heartbeat for .*\n\s+PuppetDB: active\s+PuppetDB still lists it active/);
  assert.match(text.stdout, /node04\.us\.lab\s+PuppetDB: no report\s+PuppetDB holds no report of it/);
});

test("the console: a node's page shows its last runs from PuppetDB, a failed run with the events that failed; health names PuppetDB's disagreements", async () => {
  // web1.acme.dev's real agent fails a run: the master sends its report (with the failed event) to PuppetDB
  const base = join(tmp.path, "agents", "web1.acme.dev");
  const web1 = new PuppetAgent({ confdir: join(base, "conf"), vardir: join(base, "var"), ssldir: join(base, "ssl"), certname: "web1.acme.dev" });
  const failed = await web1.run({ timeoutMs: 240_000, facts: { role: "web", customer: "acme", environment: "development", fail: "yes" } });
  assert.equal(failed.success, false, failed.output);
  const tokens = join(tmp.path, "web-tokens");
  writeFileSync(tokens, "viewer-token-0123456789abcdefgh viewer bob\n");
  const web = await startWeb(WebConfigSchema.parse({ listen: `127.0.0.1:${await freePort()}`, auth: { tokens_file: tokens }, registry: { url: registry.httpAddress, token_file: tokenFile }, health: { unreachable_after: 5 } }), silentLogger, { broker: nats.url, probeMs: 300 });
  try {
    const get = async (path: string) => (await fetch(`${web.url}${path}`, { headers: { authorization: "Bearer viewer-token-0123456789abcdefgh" } })).json() as Promise<Record<string, unknown>>;
    const page = (await eventually(async () => {
      const p = await get("/api/nodes/web1.acme.dev");
      return Array.isArray(p.puppetdb_runs) && p.puppetdb_runs.length >= 2 ? p : undefined;
    }, 30_000, "web1.acme.dev's page with its runs from PuppetDB")) as { puppetdb: string; puppetdb_runs: { status: string; time: number; resources: { changed: number; failed: number; total: number }; events: { type: string; title: string; message: string | null }[] }[] };
    assert.equal(page.puppetdb, pdbUrl);
    const [last, before] = page.puppetdb_runs;
    assert.equal(last!.status, "failed");
    assert.ok(last!.resources.failed >= 1 && last!.resources.total > 0, JSON.stringify(last));
    assert.deepEqual(last!.events.map((e) => [e.type, e.title]), [["Exec", "fail on purpose"]]);
    assert.match(last!.events[0]!.message ?? "", /returned 1 instead of one of \[0\]/);
    assert.ok(before!.status !== "failed" && before!.time < last!.time, "the run before, which did not fail");
    // the landing page's health: web1.acme.dev runs no muster server, so PuppetDB's is the only word of it
    const health = await eventually(async () => {
      const h = (await get("/api/health")) as { nodes: { identity: string; puppet: { status: string; source: string } | null; problems: { kind: string }[] }[] };
      const n = h.nodes.find((x) => x.identity === "web1.acme.dev");
      return n?.problems.some((p) => p.kind === "puppetdb_active") ? n : undefined;
    }, 30_000, "the console's health knowing web1.acme.dev from PuppetDB");
    assert.deepEqual([health.puppet?.source, health.puppet?.status], ["puppetdb", "failed"]);
    assert.deepEqual(health.problems.map((p) => p.kind), ["unreachable", "puppetdb_active", "puppet_failed"]);
    // a node PuppetDB does not know: its page has no runs from PuppetDB to show, and says so
    const none = (await get("/api/nodes/node04.us.lab")) as { puppetdb_runs: unknown[] };
    assert.deepEqual(none.puppetdb_runs, []);
  } finally {
    await web.stop();
  }
});
