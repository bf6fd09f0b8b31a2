import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { puppetDDL, type RunCompleteData } from "../../src/agents/puppet/ddl.js";
import { MusterClient } from "../../src/client/client.js";
import type { RunallReport } from "../../src/fleet/runall.js";
import { startPuppetserver, type PuppetserverHandle } from "../../src/lab/puppetserver.js";
import { CertificateAuthority, PuppetAgent, caSettingsFromSsldir } from "../../src/puppet/index.js";
import { execCommand } from "../../src/puppet/exec.js";
import { cleanEnv, connectNats, record, runCli, startBroker, startMusterServer, tempDir, type Broker, type TestServer } from "../support/collective.js";
import { docCommandsRunBy, pathWithMuster } from "../support/doc-run.js";

// The puppet agent and `muster puppet` against a real puppetserver and real Puppet agents: three
// `muster server` nodes, each with its own Puppet confdir/vardir/ssldir and a signed certificate.
// Covers runall (with a node disabled, then one whose catalog fails), status, last_run_summary,
// last_run_report,
// enable/disable (Puppet itself honours our lock, and we read the lock `puppet agent --disable`
// writes), and a runonce refused while a run is going.

const host = "127.0.0.73";
const fileStarted = Date.now();
const ids = ["web1.real.test", "web2.real.test", "db1.real.test"];
const tmp = tempDir("fleet-real");
process.env.MUSTER_CONFIG_DIR = join(tmp.path, "keys");
const env = cleanEnv(process.env.MUSTER_CONFIG_DIR);
const failFlag = join(tmp.path, "make-web2-fail");

let broker: Broker;
let master: PuppetserverHandle | undefined;
let client: MusterClient;
const servers: TestServer[] = [];
const puppets = new Map<string, PuppetAgent>();
const dirs = (id: string) => ({ confdir: join(tmp.path, id, "conf"), vardir: join(tmp.path, id, "var"), ssldir: join(tmp.path, id, "ssl") });

before(async () => {
  broker = await startBroker();
  const out = join(tmp.path, "out");
  mkdirSync(out, { recursive: true });
  const site = `
node default {
  file { "${out}/\${trusted['certname']}": ensure => file, content => "managed by puppet\\n" }
  exec { 'fail on purpose':
    command => '/bin/false',
    onlyif  => "/usr/bin/test -e ${failFlag} -a \${trusted['certname']} = web2.real.test",
  }
}
`;
  master = await startPuppetserver({ host, environments: { production: { manifest: site } } });
  console.log(`# puppetserver ready on ${master.url} in ${master.startMs} ms`);
  const ca = new CertificateAuthority(caSettingsFromSsldir(master.url, master.ssldir, master.certname));
  await Promise.all(
    ids.map(async (id) => {
      const d = dirs(id);
      for (const p of Object.values(d)) mkdirSync(p, { recursive: true });
      const agent = new PuppetAgent({ ...d, certname: id });
      agent.setPuppetHost(host, master!.port);
      const req = await agent.requestCertificate({ timeoutMs: 120_000 });
      await ca.sign(id, req.fingerprint);
      assert.equal(await agent.downloadCert({ timeoutMs: 120_000 }), true, `${id} has its certificate`);
      puppets.set(id, agent);
    }),
  );
  for (const id of ids) {
    servers.push(
      await startMusterServer(
        { identity: id, broker: broker.url, facts: { role: id.slice(0, 2) }, classes: id.startsWith("web") ? ["webserver"] : [], config: { agents: { builtin: ["puppet"] }, plugins: { puppet: { ...dirs(id), run_timeout: 240 } }, registration: { interval: 0 } } },
        { dir: tmp.path, env },
      ),
    );
  }
  client = await MusterClient.connect({ brokers: [broker.url], collective: "muster" });
});

after(async () => {
  await client?.close();
  await Promise.all(servers.map((s) => s.stop()));
  await master?.stop();
  await broker?.dispose();
  tmp.remove();
});

const cli = (args: string[]) => runCli([...args, "--broker", broker.url], { env, timeoutMs: 240_000 });
const puppet = () => client.agent(puppetDDL);

test("before any run: enabled, stopped, no last run; last_run_summary says Puppet has not run", async () => {
  const st = await puppet().call("status", {}, { nodes: ids });
  assert.equal(st.replies.length, 3);
  for (const r of st.replies) {
    assert.equal(r.statuscode, 0, r.statusmsg);
    assert.deepEqual({ enabled: r.data.enabled, applying: r.data.applying, status: r.data.status, lastrun: r.data.lastrun, daemon: r.data.daemon_present }, { enabled: true, applying: false, status: "stopped", lastrun: 0, daemon: false });
  }
  const sum = await puppet().call("last_run_summary", {}, { nodes: [ids[0]!] });
  assert.equal(sum.replies[0]?.statuscode, 1);
  assert.match(sum.replies[0]!.statusmsg, /Puppet has not run here yet/);
});

test("disable: Puppet itself refuses to run, and runall skips and lists the node", async () => {
  const dis = await cli(["puppet", "disable", "-I", "db1.real.test", "schema", "migration"]);
  assert.equal(dis.code, 0, dis.stderr + dis.stdout);
  assert.match(dis.stdout, /Puppet disabled: schema migration/);
  // the real agent reads our lock
  const direct = await puppets.get("db1.real.test")!.run({ timeoutMs: 120_000 });
  assert.equal(direct.disabled, true, direct.output);

  const r = await cli(["puppet", "runall", "2", "--json"]);
  assert.equal(r.code, 0, r.stderr + r.stdout);
  const report = JSON.parse(r.stdout) as RunallReport & { round: number };
  const by = new Map(report.nodes.map((n) => [n.identity, n]));
  assert.equal(by.get("db1.real.test")?.outcome, "skipped");
  assert.match(by.get("db1.real.test")!.detail, /schema migration/);
  for (const id of ["web1.real.test", "web2.real.test"]) {
    assert.equal(by.get(id)?.outcome, "changed", `${id}: ${by.get(id)?.detail}`);
    assert.equal(by.get(id)?.exitcode, 2);
    assert.equal(readFileSync(join(tmp.path, "out", id), "utf8"), "managed by puppet\n");
  }
  assert.equal(existsSync(join(tmp.path, "out", "db1.real.test")), false, "the disabled node did not run");
  assert.ok(report.maxConcurrency <= 2);
});

test("status and last_run_summary after a run come from Puppet's own files", async () => {
  const st = await puppet().call("status", {}, { nodes: ["web1.real.test", "db1.real.test"] });
  const by = new Map(st.replies.map((r) => [r.sender, r.data]));
  const web = by.get("web1.real.test")!;
  assert.equal(web.enabled, true);
  // the run this file made: within the file's own span, whatever the machine's speed
  assert.ok(typeof web.lastrun === "number" && web.lastrun >= Math.trunc(fileStarted / 1000) && web.lastrun <= Date.now() / 1000 + 1, `lastrun ${String(web.lastrun)}`);
  assert.ok(typeof web.since_lastrun === "number" && web.since_lastrun >= 0 && web.since_lastrun <= (Date.now() - fileStarted) / 1000 + 1);
  assert.equal(web.status, "stopped");
  assert.equal(by.get("db1.real.test")!.enabled, false);
  assert.equal(by.get("db1.real.test")!.disable_message, "schema migration");
  assert.equal(by.get("db1.real.test")!.status, "disabled");

  const sum = await puppet().call("last_run_summary", {}, { nodes: ["web1.real.test"] });
  const d = sum.replies[0]!.data;
  assert.equal(sum.replies[0]!.statuscode, 0, sum.replies[0]!.statusmsg);
  const summaryYaml = readFileSync(join(dirs("web1.real.test").vardir, "public", "last_run_summary.yaml"), "utf8");
  assert.match(summaryYaml, new RegExp(`total: ${String(d.total_resources)}\\n`));
  assert.ok((d.total_resources as number) >= 2);
  assert.equal(d.changed_resources, 1, "the file resource changed");
  assert.equal(d.failed_resources, 0);
  assert.equal(d.environment, "production");
  assert.match(String(d.puppet_version), /^\d+\.\d+/);
  assert.ok(typeof d.total_time === "number" && d.total_time > 0);

  // the report, resource by resource: the file that changed, with Puppet's own message
  const rep = await puppet().call("last_run_report", {}, { nodes: ["web1.real.test"] });
  assert.equal(rep.replies[0]!.statuscode, 0, rep.replies[0]!.statusmsg);
  const resources = rep.replies[0]!.data.resources as { resource: string; status: string; messages: string[] }[];
  assert.deepEqual(resources.map((r) => r.status), ["changed"], JSON.stringify(resources));
  assert.match(resources[0]!.resource, /^File\[/);
  assert.ok(resources[0]!.messages.some((m) => /defined content|content changed|ensure changed|created/.test(m)), JSON.stringify(resources[0]));
  assert.equal(rep.replies[0]!.data.environment, "production");
  assert.equal(rep.replies[0]!.data.status, "changed");

  const text = await cli(["puppet", "status"]);
  assert.match(text.stdout, /db1\.real\.test\s*: Currently disabled; no run recorded \(schema migration\)/);
  assert.match(text.stdout, /web1\.real\.test\s*: Currently stopped; last completed run \d+ seconds ago/);
  const count = await cli(["puppet", "count"]);
  assert.match(count.stdout, /Total Puppet nodes: 3/);
  assert.match(count.stdout, /Nodes currently disabled: 1/);
});

test("the lock `puppet agent --disable` writes is ours too; enable lets runs through again", async () => {
  const d = dirs("web1.real.test");
  const p = puppets.get("web1.real.test")!;
  const r = await execCommand("puppet", ["agent", "--disable", "by hand", ...p.commonArgs()], { timeoutMs: 60_000 });
  assert.equal(r.code, 0, r.output);
  let st = await puppet().call("status", {}, { nodes: ["web1.real.test"] });
  assert.deepEqual({ enabled: st.replies[0]!.data.enabled, msg: st.replies[0]!.data.disable_message }, { enabled: false, msg: "by hand" });
  const find = await cli(["find", "-S", "puppet().enabled=false"]);
  assert.equal(find.stdout, "db1.real.test\nweb1.real.test\n");
  const en = await cli(["puppet", "enable"]);
  assert.equal(en.code, 0, en.stderr + en.stdout);
  st = await puppet().call("status", {}, { nodes: ids });
  assert.ok(st.replies.every((x) => x.data.enabled === true));
  assert.equal(existsSync(join(d.vardir, "state", "agent_disabled.lock")), false);
});

test("runall with a failing catalog: failed listed, exit 2; the others run", async () => {
  writeFileSync(failFlag, "");
  const r = await cli(["puppet", "runall", "2"]);
  assert.equal(r.code, 2, r.stderr + r.stdout);
  assert.match(r.stdout, /> Running \S+, concurrency is 0$/m);
  assert.match(r.stdout, /> Running \S+, concurrency is 1$/m);
  assert.doesNotMatch(r.stdout, /concurrency is [2-9]/);
  // no node-key directory on this broker: each node is marked unproven, and counted
  assert.match(r.stdout, /^web2\.real\.test \(unverified\)\s+failed\s+(4|6)\s/m);
  assert.match(r.stdout, /^web1\.real\.test \(unverified\)\s+ok\s+0\s/m);
  assert.match(r.stdout, /^db1\.real\.test \(unverified\)\s+changed\s+2\s/m);
  assert.match(r.stdout, /^3 of 3 nodes \(unverified\): no known key for their sender$/m);
  assert.match(r.stdout, /3 nodes: 1 ok, 1 changed, 1 failed/);
  rmSync(failFlag);
});

test("runonce: answers at once, refuses a second run while one is going, run_complete reports the end", async () => {
  const watcher = await connectNats(broker.url); // the raw events, as any subscriber sees them
  const events = record(watcher, "muster.event.puppet.run_complete");
  try {
    const first = await puppet().call("runonce", { force: true }, { nodes: ["web1.real.test"] });
    assert.equal(first.replies[0]?.statuscode, 0, first.replies[0]?.statusmsg);
    assert.equal(first.replies[0]!.data.started, true);
    const requestid = first.replies[0]!.requestid;
    const second = await puppet().call("runonce", {}, { nodes: ["web1.real.test"] });
    assert.equal(second.replies[0]?.statuscode, 1);
    assert.match(second.replies[0]!.statusmsg, /already in progress/);
    const busy = await puppet().call("status", {}, { nodes: ["web1.real.test"] });
    assert.equal(busy.replies[0]!.data.applying, true);
    const msg = await events.waitFor((m) => (JSON.parse(m.string()) as { data: RunCompleteData }).data.requestid === requestid, 180_000, "run_complete for our runonce");
    const ev = JSON.parse(msg.string()) as { identity: string; agent: string; event: string; data: RunCompleteData };
    assert.equal(ev.identity, "web1.real.test");
    assert.equal(ev.event, "run_complete");
    assert.equal(ev.data.exitcode, 0, ev.data.message);
    assert.equal(ev.data.failed, false);
    assert.ok(ev.data.duration > 0);
    const after = await puppet().call("status", {}, { nodes: ["web1.real.test"] });
    assert.equal(after.replies[0]!.data.applying, false);
    assert.equal(after.replies[0]!.data.last_runonce?.requestid, requestid);
  } finally {
    events.stop();
    await watcher.close();
  }
});

test("a server override is refused unless the node allows it", async () => {
  const r = await puppet().call("runonce", { server: `${host}:1` }, { nodes: ["db1.real.test"] });
  assert.equal(r.replies[0]?.statuscode, 1);
  assert.match(r.replies[0]!.statusmsg, /does not let runonce choose the master.*allow_server_override/);
});

test("the docs' runall commands, as written: `-C webserver` runs the web nodes; `-S \"puppet().since_lastrun>3600\"` the one whose last run ended two hours ago", async () => {
  rmSync(failFlag, { force: true });
  // through /bin/sh with `muster` on PATH and the broker in MUSTER_BROKER, as a shell on the fleet would
  const docs = docCommandsRunBy("test/fleet/puppet-real.test.ts", { cwd: tmp.path, env: { ...env, MUSTER_BROKER: broker.url, PATH: pathWithMuster(tmp.path, env.PATH) }, timeoutMs: 300_000 });
  const web = await docs.run("muster puppet runall 10 -C webserver");
  assert.match(web.stdout, /> Running web1\.real\.test,/);
  assert.match(web.stdout, /> Running web2\.real\.test,/);
  assert.doesNotMatch(web.stdout, /Running db1/);
  // db1's last run ended two hours ago, as Puppet's own summary would say after a quiet night
  const summary = join(dirs("db1.real.test").vardir, "public", "last_run_summary.yaml");
  writeFileSync(summary, readFileSync(summary, "utf8").replace(/^(\s*last_run:\s*)\d+/m, `$1${Math.trunc(Date.now() / 1000) - 7200}`));
  const stale = await docs.run('muster puppet runall 4 -S "puppet().since_lastrun>3600"');
  assert.match(stale.stdout, /> Running db1\.real\.test,/);
  assert.doesNotMatch(stale.stdout, /Running web/);
  docs.ranAll();
});
