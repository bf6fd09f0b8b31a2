import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, execFileSync, spawn } from "node:child_process";
import { promisify } from "node:util";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { MusterClient } from "../../src/client/client.js";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { connectedUsers, labProvisionerClient, labWebToken, startLab, waitForNodes, type Lab } from "../../src/lab/lab.js";
import { BOOTSTRAP_SITE } from "../../src/lab/manifests.js";
import { expectedMotd } from "../../src/lab/roles.js";
import { writeEnvironment } from "../../src/lab/puppetserver.js";
import { unpackMuster } from "../../src/lab/package.js";
import { MUSTER_BIN, spawnMuster, type MusterProcess } from "../../src/lab/processes.js";
import { PuppetAgent } from "../../src/puppet/index.js";
import { type NodeRecord } from "../../src/protocol/provision-record.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { eventually, runCli } from "../support/collective.js";

// The provisioner end to end against real puppetservers and real Puppet agents (the lab, attached).
// Scenario, in order:
//   - us master and us nodes are down at first; eu nodes are provisioned, and the provisioner is
//     killed with SIGKILL mid-run and started again: it finishes every eu node.
//   - node05.eu.lab holds a certificate before provisioning starts: certificate steps skipped.
//   - an impostor's CSR for node03.eu.lab is not signed with the node's reported fingerprint.
//   - then the us master appears (no provisioner restart) and the us nodes start: their startup
//     events trigger provisioning against the us master; node04.us.lab's muster server is killed
//     mid-Puppet-run and started again; node06.us.lab's bootstrap is broken, it is retried, marked
//     failed and the admins are told.
//   - two nodes are booted into the running lab later (lab add): provisioned with nobody asking.
//   - one of them is terminated (lab remove) and decommissioned: its certificate is revoked and
//     cleaned on every master, its records dropped, the admins told; a second decommission finds
//     nothing left and succeeds. A new machine under the same name is then provisioned from
//     scratch, with a new CSR signed.
// Everything runs over TLS with a nats-server user per credential: waiting nodes sit in the
// provisioning collective with the shared bootstrap credential and answer only the provisioner;
// provisioned ones reconnect with their Puppet certificates.

const NODES = 6;
const execFileP = promisify(execFile);
let dir: string;
let lab: Lab;
let client: MusterClient; // the operator: admin credential, the user's key, the fleet collective
let prov: MusterClient; // the provisioner's credential and key, the provisioning collective
let store: ProvisionState;
const provisioners: MusterProcess[] = [];

const eu = ["node01.eu.lab", "node03.eu.lab", "node05.eu.lab"];
const us = ["node02.us.lab", "node04.us.lab"];
const broken = "node06.us.lab";

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "muster-e2e-"));
  process.env.MUSTER_CONFIG_DIR = join(dir, "keys");
  // Once, the whole lab runs from the package an operator installs (npm run package; gzip for
  // speed, the contents are the release's): every muster process of the lab is the packaged one.
  const built = await execFileP(process.execPath, [fileURLToPath(new URL("../../../packaging/build-deb.mjs", import.meta.url)), "--out", join(dir, "deb"), "--compress", "gzip", "--level", "1"], { maxBuffer: 16 << 20 });
  const pkg = unpackMuster(built.stdout.trim().split("\n").at(-1)!, join(dir, "pkg"));
  lab = await startLab({ dir: join(dir, "lab"), nodes: NODES, detached: false, provisioner: false, bin: pkg.bin });
  client = await MusterClient.connect({ brokers: [lab.state.broker], collective: lab.state.collective, tls: lab.state.tls.admin });
  prov = await labProvisionerClient(lab.state);
  store = await ProvisionState.open(client, "muster_provision");
});

after(async () => {
  await Promise.all(provisioners.map((p) => p.stop("SIGKILL")));
  await client?.close();
  await prov?.close();
  await lab?.stop();
  rmSync(dir, { recursive: true, force: true });
});

function startProvisioner(): MusterProcess {
  // A long sleeptime: nodes that start later are found by their startup event, not by a cycle.
  const file = lab.provisionerConfig({ concurrency: 4, per_master_limit: 2, retries: { attempts: 2, backoff: 0.5, max_backoff: 2 }, sleeptime: 30, shutdown_grace: 5 });
  const p = spawnMuster(["provisioner", "--config", file, "--foreground"], { logFile: join(dir, `provisioner-${provisioners.length}.log`), env: lab.state.provisionerEnv, bin: lab.state.bin });
  provisioners.push(p);
  return p;
}

function waitFor(ids: string[], done: (r: NodeRecord) => boolean, timeoutMs: number): Promise<Map<string, NodeRecord>> {
  return store.waitFor(ids, done, timeoutMs);
}

function node(id: string) {
  const n = lab.state.nodes.find((x) => x.identity === id);
  assert.ok(n, `lab node ${id}`);
  return n;
}

function master(name: "eu" | "us") {
  return lab.masters[name === "eu" ? 0 : 1]!;
}

/** Lines of the CA's inventory naming this certname: one per certificate ever signed. */
function signedCount(name: "eu" | "us", certname: string): number {
  const inv = join(master(name).cadir, "inventory.txt");
  if (!existsSync(inv)) return 0;
  return readFileSync(inv, "utf8").split("\n").filter((l) => l.trim().endsWith(`/CN=${certname}`)).length;
}

async function call(id: string, agent: string, action: string, data: Record<string, unknown> = {}, via = client) {
  const r = await via.call(agent, action, data, { nodes: [id], timeoutMs: 120_000 });
  const reply = r.replies[0];
  assert.ok(reply, `${agent}#${action} on ${id} answered`);
  return reply;
}

function notifications(): { subject: string; message: string }[] {
  const f = lab.state.receiver.file;
  return existsSync(f) ? readFileSync(f, "utf8").trim().split("\n").filter(Boolean).map((l) => JSON.parse(l) as { subject: string; message: string }) : [];
}

/** The nats-server user each muster server's connection is mapped to, by identity. */
async function brokerUsers(): Promise<Map<string, string>> {
  const users = await connectedUsers(lab.state.monitor);
  assert.ok(users.size > 0, "nats-server monitoring answered");
  return new Map([...users].filter(([name]) => name.startsWith("muster-server:")).map(([name, user]) => [name.slice("muster-server:".length), user]));
}

async function adminConnection(): Promise<{ nc: NatsConnection; errors: string[] }> {
  const t = lab.state.tls.admin;
  const nc = await connect({ servers: lab.state.broker, tls: { caFile: t.ca, certFile: t.cert, keyFile: t.key } });
  const errors: string[] = [];
  void (async () => {
    for await (const st of nc.status()) if (st.type === "error") errors.push(String(st.error?.message ?? st.error));
  })();
  return { nc, errors };
}

test("the lab runs from the package: its nodes, masters' and notifier's servers, the registry and the web console are the packaged muster", () => {
  const shipped = join(lab.state.bin!, "..", "..", "lib", "muster", "node");
  const pids = [...lab.state.nodes.map((n) => n.pid), ...lab.state.masters.map((m) => m.serverPid), lab.state.notifier.pid, lab.state.registry.pid, lab.state.web!.pid];
  for (const pid of pids) assert.equal(readlinkSync(`/proc/${pid}/exe`), shipped, `pid ${pid} runs the shipped node`);
});

test("isolation: waiting nodes use their own bootstrap credentials, hide from the fleet and answer only the provisioner", async () => {
  const users = await brokerUsers();
  assert.equal(users.get("node01.eu.lab"), "CN=node01.eu.lab,OU=bootstrap,O=muster");
  assert.equal(users.get("node02.us.lab"), "CN=node02.us.lab,OU=bootstrap,O=muster");
  assert.equal(users.get("puppet-eu.lab"), "CN=puppet-eu.lab,OU=node,O=muster");
  // the operator's fleet discovery does not see them; the provisioner's does
  assert.ok(!(await client.discover()).includes("node01.eu.lab"));
  assert.ok((await prov.discover()).includes("node01.eu.lab"));
  // the broker refuses the admin credential on provisioning subjects
  const admin = await adminConnection();
  try {
    admin.nc.publish(`${lab.state.provisioningCollective}.node.node01.eu.lab`, new TextEncoder().encode("{}"));
    await admin.nc.flush();
    const deadline = Date.now() + 10_000;
    while (!admin.errors.some((e) => /Permissions Violation for Publish/.test(e)) && Date.now() < deadline) await admin.nc.flush();
    assert.ok(admin.errors.some((e) => /Permissions Violation for Publish to "provisioning\.node\.node01\.eu\.lab"/.test(e)), admin.errors.join("; "));
  } finally {
    await admin.nc.close();
  }
  // and a key the node trusts, brought over the provisioner's credential, is refused by the node
  const impostor = await MusterClient.connect({ brokers: [lab.state.broker], collective: lab.state.provisioningCollective, tls: lab.state.tls.provisioner });
  try {
    const r = await call("node01.eu.lab", "provision", "is_locked", {}, impostor);
    assert.notEqual(r.statuscode, 0);
    assert.match(r.statusmsg, /not allowed|denied|policy/i);
  } finally {
    await impostor.close();
  }
});

test("setup: the us region is down, node05 already has a certificate, node06's bootstrap is broken", async () => {
  await lab.stopServer("puppet-us.lab");
  for (const id of [...us, broken]) await lab.stopServer(id);
  // node05: a certificate before provisioning, through the same agents the provisioner uses
  await call("node05.eu.lab", "provision", "set_puppet_host", { ipaddress: master("eu").host, port: master("eu").port }, prov);
  const csr = await call("node05.eu.lab", "provision", "request_certificate", {}, prov);
  assert.equal(csr.statuscode, 0, csr.statusmsg);
  const signed = await call("puppet-eu.lab", "puppetca", "sign", { certname: "node05.eu.lab", fingerprint: csr.data.fingerprint });
  assert.equal(signed.statuscode, 0, signed.statusmsg);
  const has = await call("node05.eu.lab", "provision", "has_cert", {}, prov);
  assert.equal(has.data.has_cert, true);
  writeEnvironment(master("us"), "bootstrap", { manifest: `node '${broken}' { fail("bootstrap is broken for ${broken} on purpose") }\n${BOOTSTRAP_SITE}` });
});

test("an impostor's CSR for a node's name is not signed", async () => {
  const victim = "node03.eu.lab";
  const m = master("eu");
  await call(victim, "provision", "set_puppet_host", { ipaddress: m.host, port: m.port }, prov);
  const reported = await call(victim, "provision", "request_certificate", {}, prov);
  assert.equal(reported.statuscode, 0, reported.statusmsg);
  // Someone else replaces the pending request with one of their own for the same name.
  assert.equal((await call("puppet-eu.lab", "puppetca", "clean", { certname: victim })).statuscode, 0);
  const impostorDir = mkdtempSync(join(dir, "impostor-"));
  const impostor = new PuppetAgent({ confdir: join(impostorDir, "etc"), vardir: join(impostorDir, "var"), ssldir: join(impostorDir, "ssl"), certname: victim, server: m.host, serverport: m.port });
  const theirs = await impostor.requestCertificate({ timeoutMs: 120_000 });
  assert.notEqual(theirs.fingerprint, reported.data.fingerprint);
  const sign = await call("puppet-eu.lab", "puppetca", "sign", { certname: victim, fingerprint: reported.data.fingerprint });
  assert.equal(sign.statuscode, 1, "sign refused");
  assert.match(sign.statusmsg, /fingerprint/i);
  const st = await call("puppet-eu.lab", "puppetca", "status", { certname: victim });
  assert.equal(st.data.state, "requested", "the impostor's CSR stays unsigned");
  assert.equal(signedCount("eu", victim), 0);
});

test("eu nodes are provisioned even though the provisioner is killed mid-run and restarted", async () => {
  const first = startProvisioner();
  // Kill it hard once some node is inside a Puppet run (certificates already signed).
  await waitFor(["node01.eu.lab"], (r) => r.current === "bootstrap" || r.current === "production" || r.status === "done", 300_000);
  await first.stop("SIGKILL");
  startProvisioner();
  const recs = await waitFor(eu, (r) => r.status === "done" || r.status === "failed", 600_000);
  for (const id of eu) assert.equal(recs.get(id)?.status, "done", `${id}: ${recs.get(id)?.lastError}`);
  assert.ok(recs.get("node01.eu.lab")!.log.some((l) => /resum|started \(resume\)/.test(l)), "node01 was resumed after the kill");
});

test("eu nodes: signed once by the eu CA, catalog applied, bootstrap saw its stage, provisioning disabled, no lock", async () => {
  // provisioned nodes reconnected on their own with their Puppet certificates, into the fleet
  await waitForNodes(lab.state, eu, 60_000);
  const users = await brokerUsers();
  for (const id of eu) assert.equal(users.get(id), `CN=${id}`, `${id} connects with its Puppet certificate`);
  for (const id of eu) {
    const n = node(id);
    assert.equal(signedCount("eu", id), 1, `${id} signed exactly once by eu`);
    assert.equal(signedCount("us", id), 0, `${id} not signed by us`);
    assert.equal(readFileSync(join(n.dir, "motd"), "utf8"), expectedMotd(id, n.country, n.role));
    assert.equal(readFileSync(join(n.dir, "bootstrap-stage"), "utf8"), "lifecycle_stage=bootstrap\n");
    const dis = await call(id, "provision", "is_disabled");
    assert.equal(dis.data.disabled, true);
    const lock = await call(id, "provision", "is_locked");
    assert.equal(lock.data.locked, false, `${id} lock released`);
  }
  const rec5 = (await store.get("node05.eu.lab"))!.record;
  assert.equal(rec5.hadCert, true);
  assert.equal(rec5.timings.sign_csr, undefined, "node05 skipped signing");
  assert.equal(rec5.timings.request_csr, undefined, "node05 skipped its CSR");
  // disabled nodes no longer answer discovery for provisioning
  const waiting = await prov.discover({ filter: { fact: [], class: [], identity: [], agent: ["provision"], compound: ["provision().disabled=false"] } });
  for (const id of eu) assert.ok(!waiting.includes(id));
});

test("a Puppet run muster did not start sees lifecycle_stage=production and the lab's facts; the node's classes follow it", async () => {
  // As a daemon or cron would run it: plain `puppet agent`, no FACTER_ variables from muster.
  const id = "node03.eu.lab"; // role::web: webapp is left out of the bootstrap stage
  const n = node(id);
  const p = join(n.dir, "puppet");
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("FACTER_")));
  const dirs = ["--confdir", join(p, "etc"), "--vardir", join(p, "var"), "--ssldir", join(p, "ssl"), "--logdir", join(p, "log"), "--rundir", join(p, "run")];
  const facts = await execFileP("puppet", ["facts", "show", "lifecycle_stage", "country", "customer", "--render-as", "json", ...dirs], { env, encoding: "utf8" });
  assert.deepEqual(JSON.parse(facts.stdout), { lifecycle_stage: "production", country: n.country, customer: n.role.customer });
  const run = await execFileP("puppet", ["agent", "--onetime", "--no-daemonize", "--detailed-exitcodes", "--certname", id, ...dirs], { env, encoding: "utf8" }).then(
    () => 0,
    (e: { code?: number; stdout?: string; stderr?: string }) => (e.code === 2 ? 2 : assert.fail(`puppet agent exited ${e.code}: ${e.stdout} ${e.stderr}`)),
  );
  assert.ok(run === 0 || run === 2);
  assert.equal(readFileSync(join(n.dir, "motd"), "utf8"), expectedMotd(id, n.country, n.role));
  assert.equal(readFileSync(join(n.dir, "bootstrap-stage"), "utf8"), "lifecycle_stage=bootstrap\n", "the bootstrap run's record stays");
  const classes = readFileSync(join(p, "var", "state", "classes.txt"), "utf8").split("\n");
  assert.ok(classes.includes("webapp") && classes.includes("role::web"), classes.join(" "));
  // the node's muster server read its Puppet's classfile: class discovery finds it
  await eventually(async () => ((await client.discover({ filter: { fact: [], class: ["webapp"], identity: [], agent: [], compound: [] } })).includes(id) ? true : undefined), 30_000, `${id} found by -C webapp`);
  const inv = await call(id, "rpcutil", "inventory");
  assert.ok((inv.data.classes as string[]).includes("role::web"), JSON.stringify(inv.data.classes));
});

test("a master that appears later is used without a restart; node startups trigger provisioning; a broken bootstrap fails cleanly", async () => {
  lab.startServer("puppet-us.lab");
  await waitForNodes(lab.state, ["puppet-us.lab"], 60_000);
  for (const id of [...us, broken]) lab.startServer(id);
  // node04 restarts hard in the middle of a Puppet run: the run carries on orphaned, the provisioner
  // hears the startup and asks again, the node answers once its run lock is free.
  const restarted = "node04.us.lab";
  await waitFor([restarted], (r) => r.current === "bootstrap" || r.current === "production" || r.status !== "in_progress", 300_000);
  await lab.stopServer(restarted, "SIGKILL");
  lab.startServer(restarted);
  const recs = await waitFor([...us, broken], (r) => r.status === "done" || r.status === "failed", 600_000);
  assert.ok(recs.get(restarted)!.log.some((l) => /the node restarted; asking again/.test(l)), `the restart was noticed: ${recs.get(restarted)!.log.join(" | ")}`);
  assert.equal(recs.get(restarted)!.rounds, 1, "one round: resumed, not started over");
  for (const id of us) {
    assert.equal(recs.get(id)?.status, "done", `${id}: ${recs.get(id)?.lastError}`);
    assert.equal(recs.get(id)?.master, "puppet-us.lab");
    assert.equal(signedCount("us", id), 1);
    assert.equal(readFileSync(join(node(id).dir, "motd"), "utf8"), expectedMotd(id, "us", node(id).role));
  }
  assert.ok([...us, broken].some((id) => recs.get(id)!.log.some((l) => l.includes("provisioning started (startup)"))), "a node's startup event started its provisioning");
  const bad = recs.get(broken)!;
  assert.equal(bad.status, "failed");
  assert.equal(bad.current, "bootstrap");
  assert.match(bad.lastError ?? "", /bootstrap/);
  assert.ok(bad.log.filter((l) => /bootstrap failed \(attempt/.test(l)).length >= 2, "bootstrap was retried");
  const lock = await call(broken, "provision", "is_locked", {}, prov);
  assert.equal(lock.data.locked, false, "a failed node's lock is released");
});

test("admins got exactly one notification per provisioned node and one for the failure", () => {
  const n = notifications();
  for (const id of [...eu, ...us]) assert.equal(n.filter((x) => x.subject === `Provisioned ${id} against ${id.includes(".eu.") ? "puppet-eu.lab" : "puppet-us.lab"}`).length, 1, `one notification for ${id}`);
  // the provisioner's notices (the console also tells of nodes' health: "muster: <id> unreachable")
  const failed = n.filter((x) => x.subject.startsWith("Provisioning ") && x.subject.includes(broken));
  assert.equal(failed.length, 1);
  assert.match(failed[0]!.subject, /FAILED/);
  assert.match(failed[0]!.message, /broken/);
});

// The lab as a site (docs/fleet.md#the-lab-site): the blog's metadata workflows through the real
// `muster` CLI, as the operator runs them, against the nodes provisioned above.

const MASTERDB = "environment=development customer=acme mysql::master";

function operatorEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const t = lab.state.tls.admin;
  return { ...process.env, MUSTER_BROKER: lab.state.broker, MUSTER_TLS_CA: t.ca!, MUSTER_TLS_CERT: t.cert!, MUSTER_TLS_KEY: t.key!, ...extra };
}

const muster = (args: string[], extra: Record<string, string> = {}) => runCli(args, { env: operatorEnv(extra), timeoutMs: 120_000 });

test("site: muster find -W finds exactly the acme development database master, by broadcast and from the registry", async () => {
  for (const dm of ["broadcast", "registry"]) {
    const r = await eventually(async () => {
      const x = await muster(["find", "--dm", dm, "-W", MASTERDB]);
      return x.code === 0 && x.stdout === "node01.eu.lab\n" ? x : undefined;
    }, 90_000, `find --dm ${dm} -W "${MASTERDB}" answering node01.eu.lab alone`);
    assert.doesNotMatch(r.stderr, /warning/, `a filled, fresh registry says nothing (${dm})`);
  }
  const webs = await muster(["find", "-C", "role::web"]);
  assert.deepEqual(webs.stdout.trim().split("\n"), ["node02.us.lab", "node03.eu.lab"]);
});

test("the lab's web console: the board shows the provisioned nodes and the explorer answers from the registry; no token, 401", async () => {
  const w = lab.state.web!;
  assert.ok(w, "lab up starts the console");
  const token = labWebToken(w.tokens_file, "viewer");
  assert.ok(token, `a viewer token in ${w.tokens_file}`);
  const get = (path: string, auth = true) => fetch(new URL(path, w.url), { headers: auth ? { authorization: `Bearer ${token}` } : {} });
  assert.equal((await get("api/board", false)).status, 401);
  const board = (await (await get("api/board")).json()) as { nodes: { identity: string; status: string }[] };
  for (const id of [...eu, ...us]) assert.equal(board.nodes.find((n) => n.identity === id)?.status, "done", `${id} on the board`);
  const found = (await (await get(`api/nodes?filter=${encodeURIComponent("country=de")}&columns=country`)).json()) as { total: number; nodes: { identity: string }[] };
  assert.ok(found.nodes.some((n) => n.identity === "node01.eu.lab"), JSON.stringify(found));
  const bad = await get(`api/nodes?filter=${encodeURIComponent("country=de and")}`);
  assert.equal(bad.status, 400);
});

test("site: web nodes write the database master search_nodes found for their customer and environment", async () => {
  // a web node provisioned before its master registered found none; a run now asks again
  const r = await muster(["puppet", "runall", "2", "-C", "role::web"]);
  assert.equal(r.code, 0, `${r.stdout}${r.stderr}`);
  assert.match(readFileSync(join(node("node02.us.lab").dir, "webapp.conf"), "utf8"), /^database_host = node01\.eu\.lab$/m);
  assert.match(readFileSync(join(node("node03.eu.lab").dir, "webapp.conf"), "utf8"), /^database_host = node05\.eu\.lab$/m);
  // the web class is not bootstrap-aware: the bootstrap run left it out, production has it
  const classes = readFileSync(join(node("node02.us.lab").dir, "puppet", "var", "state", "classes.txt"), "utf8").split("\n");
  assert.ok(classes.includes("webapp") && classes.includes("role::web"), classes.join(" "));
});

test("site: muster nrpe runs the real check_load from monitoring-plugins-basic on the node found by query", async () => {
  const r = await muster(["nrpe", "check_load", "-W", MASTERDB]);
  assert.match(r.stdout, /^check_load: OK: \d WARNING: \d CRITICAL: \d UNKNOWN: 0\|total=1 ok=\d warn=\d crit=\d unknown=0 checktime=[\d.]+\n/, r.stdout + r.stderr);
  const reply = await call("node01.eu.lab", "nrpe", "runcommand", { command: "check_load" });
  assert.equal(reply.statuscode, 0, reply.statusmsg);
  assert.match(String(reply.data.output), /^LOAD (OK|WARNING|CRITICAL) - (scaled |total )?load average/, "the real plugin's own output");
});

test("site: muster ssh by query runs ssh to the one matching node", async () => {
  const bin = join(dir, "fakebin");
  mkdirSync(bin, { recursive: true });
  const argvFile = join(dir, "ssh-argv");
  writeFileSync(join(bin, "ssh"), `#!/bin/sh\nprintf '%s\\n' "$@" > '${argvFile}'\n`);
  chmodSync(join(bin, "ssh"), 0o755);
  const r = await muster(["ssh", "-W", MASTERDB, "--", "uptime"], { PATH: `${bin}:${process.env.PATH ?? ""}` });
  assert.equal(r.code, 0, r.stderr);
  assert.equal(readFileSync(argvFile, "utf8"), "node01.eu.lab\nuptime\n");
});

test("site: muster resource writes files under the node's files/ only", async () => {
  const target = join(node("node01.eu.lab").dir, "files", "e2e");
  const ok = await muster(["resource", "file", target, "ensure=file", "content=from-e2e", "-W", MASTERDB]);
  assert.equal(ok.code, 0, ok.stdout + ok.stderr);
  assert.equal(readFileSync(target, "utf8"), "from-e2e");
  const outside = join(dir, "not-allowed");
  const refused = await muster(["resource", "file", outside, "ensure=file", "-W", MASTERDB]);
  assert.equal(refused.code, 2);
  assert.match(refused.stdout + refused.stderr, /outside the directories this node allows/);
  assert.equal(existsSync(outside), false);
});

/** Serial numbers on a master's CRL (the CA's own file, read by openssl). */
function crlSerials(name: "eu" | "us"): string[] {
  const text = execFileSync("openssl", ["crl", "-in", join(master(name).cadir, "ca_crl.pem"), "-noout", "-text"], { encoding: "utf8" });
  return [...text.matchAll(/Serial Number: ([0-9A-F]+)/gi)].map((m) => m[1]!.toUpperCase());
}

/** `muster ARGS` as the operator: admin credential, the user's key, no client config. */
function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const t = lab.state.tls.admin;
  const env = { ...process.env, MUSTER_BROKER: lab.state.broker, MUSTER_TLS_CA: t.ca, MUSTER_TLS_CERT: t.cert, MUSTER_TLS_KEY: t.key, NO_COLOR: "1" };
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [MUSTER_BIN, ...args], { env, cwd: dir, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), 120_000);
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

const finished = (r: NodeRecord) => r.status === "done" || r.status === "failed";
const returning = "node07.eu.lab";
let returningFingerprint: string | undefined;

test("lab add: two nodes booted into the running lab wait isolated and are provisioned unattended", async () => {
  const t0 = Date.now();
  const added = await lab.addNodes({ count: 2 });
  const ids = added.map((n) => n.identity);
  assert.deepEqual(ids, ["node07.eu.lab", "node08.us.lab"], "numbering continues, regions in turn");
  // waiting like the first ones: each its own bootstrap credential, invisible to the operator
  const users = await brokerUsers();
  for (const id of ids) assert.equal(users.get(id), `CN=${id},OU=bootstrap,O=muster`);
  const fleet = await client.discover();
  for (const id of ids) assert.ok(!fleet.includes(id), `${id} is not in the fleet yet`);
  // nobody asks: the running provisioner hears their startup (or finds them next cycle)
  const recs = await waitFor(ids, finished, 600_000);
  console.log(`# lab add: 2 nodes from boot to done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  for (const id of ids) {
    const r = recs.get(id)!;
    assert.equal(r.status, "done", `${id}: ${r.lastError}`);
    assert.equal(r.master, id.includes(".eu.") ? "puppet-eu.lab" : "puppet-us.lab");
    assert.equal(signedCount(id.includes(".eu.") ? "eu" : "us", id), 1);
    assert.equal(readFileSync(join(node(id).dir, "motd"), "utf8"), expectedMotd(id, node(id).country, node(id).role));
  }
  await waitForNodes(lab.state, ids, 60_000);
  const after = await brokerUsers();
  for (const id of ids) assert.equal(after.get(id), `CN=${id}`, `${id} reconnected with its Puppet certificate`);
  returningFingerprint = recs.get(returning)!.fingerprint;
  assert.ok(returningFingerprint);
});

test("decommission of a terminated node and a running one: certificates revoked and cleaned everywhere, records dropped, admins told; again: nothing left, still success", async () => {
  await lab.removeNode(returning);
  assert.ok(!existsSync(join(lab.state.dir, "nodes", returning)), "its directory went with it");
  assert.ok(!lab.state.nodes.some((n) => n.identity === returning));
  const crlBefore = crlSerials("eu");
  const usCrlBefore = crlSerials("us");
  // node08 still runs: decommissioned all the same, with a warning that it will register again
  const r = await cli(["decommission", "--wait", returning, "node08.us.lab"]);
  assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
  assert.match(r.stdout, /node08\.us\.lab\s+certificate\s+done\s+none on puppet-eu\.lab, revoked and cleaned on puppet-us\.lab/);
  assert.match(r.stdout, /node08\.us\.lab still answers in the fleet/);
  assert.doesNotMatch(r.stdout, /node07\.eu\.lab still answers/);
  assert.match(r.stdout, /2 of 2 node\(s\) decommissioned/);
  assert.equal(crlSerials("us").length, usCrlBefore.length + 1, "one more serial on the us CRL");
  assert.match(r.stdout, /provisioning\s+done\s+dropped \(was done, master puppet-eu\.lab\)/);
  assert.match(r.stdout, /certificate\s+done\s+revoked and cleaned on puppet-eu\.lab, none on puppet-us\.lab, verified: unknown to 2 master/);
  assert.match(r.stdout, /puppetdb\s+ok\s+no master sends to a PuppetDB \(no puppetdb\.conf on 2 master\(s\)\): nothing to deactivate/);
  assert.match(r.stdout, /registry\s+(ok|done)/);
  assert.match(r.stdout, /notify\s+done\s+admins told by notifier\.lab/);
  assert.equal(crlSerials("eu").length, crlBefore.length + 1, "one more serial on the eu CRL");
  for (const m of ["puppet-eu.lab", "puppet-us.lab"]) assert.equal((await call(m, "puppetca", "status", { certname: returning })).data.state, "unknown");
  assert.equal(await store.get(returning), undefined, "no provisioning record");
  for (const id of [returning, "node08.us.lab"]) assert.equal(notifications().filter((n) => n.subject === `Decommissioned ${id}`).length, 1, `admins told once about ${id}`);

  const again = await cli(["decommission", "--json", "--no-notify", returning]);
  assert.equal(again.code, 0, `${again.stdout}\n${again.stderr}`);
  const [out] = JSON.parse(again.stdout) as { ok: boolean; steps: { step: string; ok: boolean; changed: boolean; detail: string }[] }[];
  assert.equal(out!.ok, true);
  assert.deepEqual(out!.steps.map((st) => [st.step, st.ok, st.changed]), [["provisioning", true, false], ["certificate", true, false], ["puppetdb", true, false], ["registry", true, false]]);
  assert.match(out!.steps[1]!.detail, /already gone/);
});

test("a machine that comes back under the decommissioned name is provisioned cleanly, with a new CSR signed", async () => {
  await lab.addNodes({ identities: [returning] });
  const rec = (await waitFor([returning], finished, 600_000)).get(returning)!;
  assert.equal(rec.status, "done", rec.lastError);
  assert.equal(rec.rounds, 1, "a fresh record, not the old machine's");
  assert.equal(rec.hadCert, false);
  assert.ok(rec.timings.sign_csr !== undefined, "its CSR was signed");
  assert.notEqual(rec.fingerprint, returningFingerprint, "a new key, a new CSR");
  assert.equal(signedCount("eu", returning), 2, "the eu CA signed the name twice: the old machine, then the new one");
  assert.equal((await call("puppet-eu.lab", "puppetca", "status", { certname: returning })).data.state, "signed");
  assert.equal(readFileSync(join(node(returning).dir, "motd"), "utf8"), expectedMotd(returning, "de", node(returning).role));
  await waitForNodes(lab.state, [returning], 60_000);
  assert.equal((await brokerUsers()).get(returning), `CN=${returning}`);
});
