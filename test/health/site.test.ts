import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import { cleanEnv, eventually, runCli, spawnMuster, startMusterServer, tempDir, type MusterProcess, type TestServer } from "../support/collective.js";
import { startCluster, type NatsCluster } from "../support/cluster.js";
import { freePort } from "../support/index.js";
import { writeSimulatedProvisionerConfig } from "../support/provisioner.js";

// The site's own services in health, and no false alarms, on this host: a real 3-member nats-server
// cluster (JetStream, monitoring ports), and real processes: `muster web` watching the members'
// monitoring ports, `muster registry serve`, `muster provisioner`, a `muster server` hosting the
// notify agent (posting to a real HTTP receiver), and nodes (`muster emulate`, heartbeats every
// second) spread over the three members. `muster health` and GET /api/health list every service
// with its role; a provisioner killed shows down. Then each member is killed in turn: no node that
// still runs is ever reported unreachable (CLI, /api/health, alerts), while a node killed in the
// same window is, and the dead member shows as a broker that does not answer.

const tmp = tempDir("health-site");
const TOKEN = "viewer-token-health-site-0123456789";
// A beat every 2 s, unreachable after 20 s (production: 10 s and 25 s). The threshold must outlast
// what a member's death costs the store itself: heartbeats are plain publishes, and while the alive
// stream elects a new leader they are dropped (measured here under load: up to 12 s of a node's
// beats lost, so 12 s gave real, not view, silences). 20 s keeps each window under a minute.
const HEARTBEAT_S = 2;
const UNREACHABLE_AFTER = 20;
let cluster: NatsCluster;
let web: MusterProcess;
let registry: MusterProcess;
let provisioner: MusterProcess;
let notifier: TestServer;
const emulators: MusterProcess[] = [];
let receiver: Server;
const alerts: { subject: string; message: string }[] = [];
let webUrl: string;

const env = (name: string) => cleanEnv(join(tmp.path, "config", name));
const nodesOn = (member: number, n: number) => Array.from({ length: n }, (_, i) => `node${i}.m${member}.test`);
const ALL_NODES = [0, 1, 2].flatMap((m) => nodesOn(m, 2));

function emulate(identities: string[], member: number): MusterProcess {
  const file = join(tmp.path, `fleet-${identities[0]}.yaml`);
  writeFileSync(file, toYaml({ nodes: identities.map((identity) => ({ identity, facts: { member } })) }));
  // one member only: its nodes are that member's, and move when it dies (nats.js learns the others from it)
  return spawnMuster(["emulate", "--fleet", file, "--heartbeat", String(HEARTBEAT_S), "--broker", cluster.urls[member]!], { env: env("emu") });
}

interface Report {
  view: { degraded: boolean; why: string | null };
  services: { name: string; role: string; up: boolean; problems: { kind: string; why: string }[]; checks: { name: string; status: string }[] }[];
  nodes: { identity: string; reachable: boolean; problems: { why: string }[] }[];
}

const apiHealth = async (): Promise<Report> => {
  const r = await fetch(`${webUrl}/api/health`, { headers: { authorization: `Bearer ${TOKEN}` }, signal: AbortSignal.timeout(10_000) });
  assert.equal(r.status, 200);
  return (await r.json()) as Report;
};
const cliHealth = async (): Promise<{ code: number | null; report: Report; stderr: string }> => {
  const r = await runCli(["health", "--json", "--unreachable-after", String(UNREACHABLE_AFTER), "--broker", cluster.urls.join(",")], { env: env("admin"), timeoutMs: 60_000 });
  return { code: r.code, report: JSON.parse(r.stdout) as Report, stderr: r.stderr };
};
const unreachable = (r: Report) => r.nodes.filter((n) => !n.reachable).map((n) => n.identity);

before(async () => {
  cluster = await startCluster(3, "health-site");
  const brokers = cluster.urls.join(",");
  const stores = await runCli(["broker", "stores", "--replicas", "3", "--broker", brokers], { env: env("admin") });
  assert.equal(stores.code, 0, stores.stderr);

  receiver = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      const a = JSON.parse(body) as { subject: string; message: string };
      alerts.push(a);
      res.writeHead(204).end();
    });
  });
  const receiverPort = await freePort();
  await new Promise<void>((r) => receiver.listen(receiverPort, "127.0.0.1", r));

  const regPort = await freePort();
  const regCfg = join(tmp.path, "registry.yaml");
  writeFileSync(regCfg, toYaml({ brokers: cluster.urls, http: { host: "127.0.0.1", port: regPort }, fill_on_start: false, replicas: 3 }));
  registry = spawnMuster(["registry", "serve", "--config", regCfg], { env: env("registry") });
  provisioner = spawnMuster(["provisioner", "--config", writeSimulatedProvisionerConfig(tmp.path, "prov1", { broker: cluster.urls, loglevel: "warn", state_replicas: 3, target: { collective: "provisioning" } }), "--foreground"], { env: env("provisioner") });
  notifier = await startMusterServer(
    { identity: "notifier.test", broker: cluster.urls[0]!, config: { brokers: cluster.urls, agents: { builtin: ["notify"] }, plugins: { notify: { recipients: [`http://127.0.0.1:${receiverPort}/alerts`], dedupe_bucket: false } }, heartbeat: { interval: HEARTBEAT_S, status: [] } } },
    { dir: tmp.path, env: env("notifier") },
  );
  for (const m of [0, 1, 2]) emulators.push(emulate(nodesOn(m, 2), m));

  writeFileSync(join(tmp.path, "tokens"), `${TOKEN} viewer oncall\n`);
  const webPort = await freePort();
  writeFileSync(
    join(tmp.path, "web.yaml"),
    toYaml({
      listen: `127.0.0.1:${webPort}`,
      auth: { tokens_file: join(tmp.path, "tokens") },
      registry: { url: `http://127.0.0.1:${regPort}` },
      broker: cluster.urls,
      store_replicas: 3,
      health: { unreachable_after: UNREACHABLE_AFTER, broker_monitoring: cluster.monitorUrls },
      alerts: { enabled: true, unreachable_after: 0, notify: { agent: "notify" } },
    }),
  );
  web = spawnMuster(["web", "--config", join(tmp.path, "web.yaml")], { env: env("admin") });
  await web.waitForLine(/ready/, 60_000);
  webUrl = `http://127.0.0.1:${webPort}`;
});

after(async () => {
  await Promise.all([web?.stop(), registry?.stop(), provisioner?.stop(), notifier?.stop(), ...emulators.map((e) => e.stop())]);
  await new Promise<void>((r) => (receiver ? receiver.close(() => r()) : r()));
  await cluster?.stopAll();
  tmp.remove();
});

const ROLES = ["broker", "broker", "broker", "provisioner", "registry", "console", "notifier"];

test("every service of the site is listed with its role before the nodes, all healthy, the same in `muster health` and GET /api/health", async () => {
  let last: unknown;
  const r = await eventually(async () => {
    const c = await cliHealth();
    last = c.report;
    const roles = c.report.services.map((s) => s.role);
    return c.code === 0 && JSON.stringify(roles) === JSON.stringify(ROLES) && c.report.nodes.length === ALL_NODES.length + 1 ? c.report : undefined;
  }, 90_000, "muster health listing every service and node, all healthy").catch((e: Error) => {
    throw new Error(`${e.message}; the last report: ${JSON.stringify(last).slice(0, 3000)}`);
  });
  assert.deepEqual(r.services.filter((s) => s.role === "broker").map((s) => s.name), cluster.names);
  for (const s of r.services) assert.deepEqual(s.problems, [], `${s.role} ${s.name}`);
  // a broker's checks: it answers, routes to the others, is counted by the meta group, its stream copies are current
  assert.deepEqual(r.services.find((s) => s.name === "n0")!.checks.map((c) => c.name), ["answers", "routes", "meta group", "streams"]);
  const api = await eventually(async () => {
    const a = await apiHealth();
    return JSON.stringify(a.services.map((s) => s.role)) === JSON.stringify(ROLES) && a.services.every((s) => s.problems.length === 0) ? a : undefined;
  }, 60_000, "the console listing every service, all healthy");
  assert.deepEqual(api.services.map((s) => `${s.role}/${s.name}`), r.services.map((s) => `${s.role}/${s.name}`));
  // the gauges count the same
  const metrics = await (await fetch(`${webUrl}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
  assert.match(metrics, /muster_health_services\{role="broker",state="healthy"\} 3/);
  assert.match(metrics, /muster_health_services\{role="provisioner",state="healthy"\} 1/);
  assert.match(metrics, /muster_health_view_degraded 0/);
  // the human form lists the services first
  const text = await runCli(["health", "--broker", cluster.urls.join(",")], { env: env("admin") });
  assert.match(text.stdout, /^SERVICE\s+ROLE\s+HEALTH\s+WHY\n/);
  assert.ok(text.stdout.indexOf("SERVICE") < text.stdout.indexOf("NODE"));
});

test("each member killed in turn: no running node is ever reported unreachable, by the CLI, /api/health or an alert, and a node killed in the same window is", async () => {
  for (const dead of [0, 1, 2]) {
    const victimId = `victim${dead}.test`;
    const victimMember = (dead + 1) % 3;
    const victim = emulate([victimId], victimMember);
    emulators.push(victim);
    await eventually(async () => ((await apiHealth()).nodes.find((n) => n.identity === victimId)?.reachable ? true : undefined), 30_000, `${victimId} seen`);
    const alive = new Set([...ALL_NODES, "notifier.test"]);
    const falseAlarms = new Set<string>();
    const note = (who: string, r: Report) => {
      for (const n of r.nodes) if (!n.reachable && alive.has(n.identity)) falseAlarms.add(`${who}: ${n.identity} (${JSON.stringify(n).slice(0, 300)})`);
    };
    const alertsBefore = alerts.length;

    await cluster.kill(dead);
    victim.child.kill("SIGKILL"); // no last heartbeat: only its silence tells
    // watch through the window: the console every 500 ms, the CLI as fast as it runs
    const seen = { api: false, cli: false, brokerDown: false };
    const deadline = Date.now() + 60_000;
    const watchApi = (async () => {
      while (Date.now() < deadline && !(seen.api && seen.brokerDown)) {
        const r = await apiHealth();
        note("api", r);
        if (unreachable(r).includes(victimId)) seen.api = true;
        if (r.services.find((s) => s.name === cluster.names[dead])?.up === false) seen.brokerDown = true;
        await new Promise((res) => setTimeout(res, 500)); // the poll's pace, not a wait for an event
      }
    })();
    const watchCli = (async () => {
      while (Date.now() < deadline && !seen.cli) {
        const c = await cliHealth();
        note("cli", c.report);
        if (unreachable(c.report).includes(victimId)) seen.cli = true;
      }
    })();
    await Promise.all([watchApi, watchCli]);
    assert.deepEqual([...falseAlarms], [], `member ${cluster.names[dead]} killed: running nodes reported unreachable`);
    assert.ok(seen.api, `/api/health never reported ${victimId}, killed while ${cluster.names[dead]} was down`);
    assert.ok(seen.cli, `muster health never reported ${victimId}, killed while ${cluster.names[dead]} was down`);
    assert.ok(seen.brokerDown, `the console never showed ${cluster.names[dead]} as a broker that does not answer`);
    const falseAlerts = alerts.slice(alertsBefore).filter((a) => [...alive].some((id) => a.subject.includes(`${id} unreachable`)));
    assert.deepEqual(falseAlerts.map((a) => a.subject), [], "alerts about running nodes");

    await cluster.start(dead);
    await cluster.ready(60_000);
    await eventually(async () => {
      const r = await apiHealth();
      return r.services.filter((s) => s.role === "broker").every((s) => s.problems.length === 0) ? true : undefined;
    }, 90_000, `${cluster.names[dead]} healthy again on the console`);
  }
});

test("a provisioner killed shows as down, with why, in `muster health` (exit 2) and on /api/health", async () => {
  provisioner.child.kill("SIGKILL");
  await provisioner.exited;
  const r = await eventually(async () => {
    const c = await cliHealth();
    return c.report.services.find((s) => s.role === "provisioner")?.up === false ? c : undefined;
  }, 60_000, "muster health showing the provisioner down");
  assert.equal(r.code, 2);
  assert.match(r.report.services.find((s) => s.role === "provisioner")!.problems[0]!.why, /^no heartbeat for \d+ s/);
  await eventually(async () => ((await apiHealth()).services.find((s) => s.role === "provisioner")?.up === false ? true : undefined), 30_000, "the console showing the provisioner down");
});
