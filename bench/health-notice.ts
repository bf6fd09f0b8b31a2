// `npm run bench:health-notice`: how long health takes to notice each kind of service failure, on
// this host, with the production defaults (heartbeats every 10 s, down after 25 s; the console looks
// at the brokers every 5 s):
//
//   node dist/bench/health-notice.js [--out bench/results/health-notice.json]
//
// A real 3-member nats-server cluster (monitoring ports on), and real processes: `muster web`
// watching the members, `muster registry serve`, `muster provisioner`, a `muster server` hosting the
// notify agent (posting to a local receiver that can be made to refuse), 10 emulated nodes. Each
// failure in turn, timed from the failure to `muster health --json` (polled as fast as it runs)
// and to the console's GET /api/health (polled every 500 ms) showing it:
//   provisioner, registry, notifier killed (SIGKILL: no last heartbeat), a broker member killed,
//   the notifier's delivery refused (a notification sent, its webhook answering 500), the console
//   killed (the CLI only; the brokers it observed turn "unobserved" too).
// A master (puppetserver's status API, its CA) needs a puppetserver: the site measures that one.

import { createServer } from "node:http";
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { dirname, join } from "node:path";
import { parseArgs } from "node:util";
import { stringify as toYaml } from "yaml";
import { cleanEnv, runCli, spawnMuster, startMusterServer, tempDir, type MusterProcess } from "../test/support/collective.js";
import { startCluster } from "../test/support/cluster.js";
import { freePort } from "../test/support/index.js";
import { writeSimulatedProvisionerConfig } from "../test/support/provisioner.js";
import { repoRoot } from "./paths.js";

const { values: args } = parseArgs({ options: { out: { type: "string", default: join(repoRoot, "bench", "results", "health-notice.json") } } });

interface Report {
  services: { name: string; role: string; up: boolean; problems: { kind: string }[] }[];
}

const tmp = tempDir("bench-health-notice");
const env = (n: string) => cleanEnv(join(tmp.path, "config", n));
const cluster = await startCluster(3, "notice");
const procs: MusterProcess[] = [];
let refuse = false;
const receiver = createServer((req, res) => {
  req.resume();
  req.on("end", () => res.writeHead(refuse ? 500 : 204).end());
});
const results: { kind: string; cli_s: number | null; console_s: number | null; how: string }[] = [];
try {
  const brokers = cluster.urls.join(",");
  const st = await runCli(["broker", "stores", "--replicas", "3", "--broker", brokers], { env: env("admin") });
  if (st.code !== 0) throw new Error(st.stderr);
  const rport = await freePort();
  await new Promise<void>((r) => receiver.listen(rport, "127.0.0.1", r));
  const regPort = await freePort();
  writeFileSync(join(tmp.path, "registry.yaml"), toYaml({ brokers: cluster.urls, http: { host: "127.0.0.1", port: regPort }, fill_on_start: false, replicas: 3 }));
  const start = (argv: string[], name: string) => {
    const p = spawnMuster(argv, { env: env(name) });
    procs.push(p);
    return p;
  };
  const registry = start(["registry", "serve", "--config", join(tmp.path, "registry.yaml")], "registry");
  const provisioner = start(["provisioner", "--config", writeSimulatedProvisionerConfig(tmp.path, "prov1", { broker: cluster.urls, loglevel: "warn", state_replicas: 3, target: { collective: "provisioning" } }), "--foreground"], "provisioner");
  const notifier = await startMusterServer({ identity: "notifier.bench", broker: cluster.urls[0]!, config: { brokers: cluster.urls, agents: { builtin: ["notify"] }, plugins: { notify: { recipients: [`http://127.0.0.1:${rport}/`], dedupe_bucket: false } }, heartbeat: { status: [] } } }, { dir: tmp.path, env: env("notifier") });
  procs.push(notifier);
  writeFileSync(join(tmp.path, "fleet.yaml"), toYaml({ nodes: Array.from({ length: 10 }, (_, i) => ({ identity: `node${i}.bench`, facts: {} })) }));
  start(["emulate", "--fleet", join(tmp.path, "fleet.yaml"), "--broker", brokers], "emu");
  const TOKEN = "bench-notice-token-0123456789";
  writeFileSync(join(tmp.path, "tokens"), `${TOKEN} viewer bench\n`);
  const webPort = await freePort();
  writeFileSync(join(tmp.path, "web.yaml"), toYaml({ listen: `127.0.0.1:${webPort}`, auth: { tokens_file: join(tmp.path, "tokens") }, registry: { url: `http://127.0.0.1:${regPort}` }, broker: cluster.urls, store_replicas: 3, health: { broker_monitoring: cluster.monitorUrls }, alerts: { enabled: false } }));
  const web = start(["web", "--config", join(tmp.path, "web.yaml")], "admin");
  await web.waitForLine(/ready/, 60_000);

  const cli = async (): Promise<Report> => JSON.parse((await runCli(["health", "--json", "--broker", brokers], { env: env("admin"), timeoutMs: 60_000 })).stdout) as Report;
  const api = async (): Promise<Report> => (await (await fetch(`http://127.0.0.1:${webPort}/api/health`, { headers: { authorization: `Bearer ${TOKEN}` } })).json()) as Report;
  const svc = (r: Report, role: string, name?: string) => r.services.find((s) => s.role === role && (name === undefined || s.name === name));
  const settle = async (what: string, ok: (r: Report) => boolean) => {
    for (const deadline = Date.now() + 120_000; !ok(await cli()); ) {
      if (Date.now() > deadline) throw new Error(`${what} within 120 s`);
      await new Promise((r) => setTimeout(r, 1000)); // the site settling: nothing to wait on but its report
    }
  };
  await settle("every service healthy", (r) => r.services.length === 7 && r.services.every((s) => s.problems.length === 0));
  /** Seconds from `t0` until each face shows `seen`, at most `withinMs`. */
  const notice = async (t0: number, seen: (r: Report) => boolean, faces: ("cli" | "console")[] = ["cli", "console"], withinMs = 120_000) => {
    const one = async (read: () => Promise<Report>, pace: number) => {
      for (const deadline = t0 + withinMs; Date.now() < deadline; ) {
        const r = await read().catch(() => undefined);
        if (r && seen(r)) return Math.round((Date.now() - t0) / 100) / 10;
        if (pace) await new Promise((res) => setTimeout(res, pace)); // the look's pace
      }
      return null;
    };
    const [c, w] = await Promise.all([faces.includes("cli") ? one(cli, 0) : null, faces.includes("console") ? one(api, 500) : null]);
    return { cli_s: c, console_s: w };
  };
  const kill = async (p: MusterProcess) => {
    p.child.kill("SIGKILL");
    await p.exited;
    return Date.now();
  };

  results.push({ kind: "provisioner killed", how: "its heartbeat's silence (25 s)", ...(await notice(await kill(provisioner), (r) => svc(r, "provisioner")?.up === false)) });
  results.push({ kind: "registry killed", how: "its heartbeat's silence (25 s)", ...(await notice(await kill(registry), (r) => svc(r, "registry")?.up === false)) });
  const t = Date.now();
  await cluster.kill(2);
  results.push({ kind: "broker member killed", how: "the console's look at its monitoring port (every 5 s)", ...(await notice(t, (r) => svc(r, "broker", cluster.names[2])?.up === false)) });
  await cluster.start(2);
  await settle("the broker back", (r) => svc(r, "broker", cluster.names[2])?.up === true);
  refuse = true;
  await runCli(["rpc", "notify", "send", "subject=bench", "message=refused", "-I", "notifier.bench", "--broker", brokers], { env: env("admin"), timeoutMs: 60_000 });
  results.push({ kind: "notifier's delivery refused", how: "its next heartbeat after the delivery (every 10 s)", ...(await notice(Date.now(), (r) => svc(r, "notifier")?.problems[0]?.kind === "failing")) });
  results.push({ kind: "notifier killed", how: "its node's heartbeat's silence (25 s)", ...(await notice(await kill(notifier), (r) => svc(r, "notifier")?.up === false)) });
  results.push({ kind: "console killed", how: "its heartbeat's silence (25 s); its brokers then unobserved", ...(await notice(await kill(web), (r) => svc(r, "console")?.up === false && svc(r, "broker")?.problems[0]?.kind === "unobserved", ["cli"])) });
  const out = { results, host: { cpus: cpus().length, load: loadavg().map((x) => Math.round(x * 100) / 100), node: process.version }, at: new Date().toISOString() };
  mkdirSync(dirname(args.out), { recursive: true });
  writeFileSync(args.out, `${JSON.stringify(out, null, 2)}\n`);
  process.stdout.write(`time to notice, seconds (muster health / the console):\n${results.map((r) => `  ${r.kind.padEnd(28)} ${String(r.cli_s ?? "-").padStart(5)} / ${String(r.console_s ?? "-").padStart(5)}   ${r.how}`).join("\n")}\nwritten to ${args.out}\n`);
} finally {
  await Promise.all(procs.map((p) => p.stop()));
  await new Promise<void>((r) => receiver.close(() => r()));
  await cluster.stopAll();
  tmp.remove();
}
