// `npm run bench:health`: the site's health for N emulated nodes (default 10,000) and 12 services,
// computed and served, as a ratio against reading the raw data it is made of, in the same run.
//
//   node dist/bench/health.js [--nodes 10000] [--rounds 5] [--out bench/results/health.json]
//
// One nats-server (JetStream). The stores are made as the console makes them; a child process
// hosts N emulated nodes with a simulated Puppet agent, sending heartbeats every 10 s (1% with
// Puppet disabled), and N provisioning records are seeded (1% failed). The site's services: the
// console writes its own service heartbeat, and this process the other 11 a site has (3 brokers as
// the console observes them, 2 masters, 2 provisioners, the registry, the notifier, and a second
// registry's and console's worth of checks), every 10 s. Then, in rounds:
//   raw     the reads health is made of, side by side: every heartbeat (alive bucket; each carries
//           its node's last Puppet run), every service heartbeat, every provisioning record;
//           nothing computed (the floor)
//   read    `muster health`'s work in this process: the same reads, the registry asked, the
//           failing nodes' run history, and the model over every node (health/read.ts)
//   model   the model alone over the inputs read (health/model.ts healthReport)
//   cli     `muster health --json` as a process: start, connect, read, compute, print
//   served  GET /api/health from a running `muster web` (kept live from watches): the request to
//           the last byte of N nodes' JSON
// Reported: medians (ms), and read / raw, served / raw.

import { fork, spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { parseArgs } from "node:util";
import { MusterClient } from "../src/client/client.js";
import { DEFAULT_HEALTH_POLICY, healthReport } from "../src/health/model.js";
import { readHealthInputs } from "../src/health/read.js";
import { AliveStore, PuppetRunStore } from "../src/health/stores.js";
import { ensureFleetStores } from "../src/fleet/stores.js";
import { startNats } from "../src/lab/nats.js";
import { freePort } from "../src/lab/ports.js";
import { newRecord } from "../src/protocol/provision-record.js";
import { ProvisionState } from "../src/provisioner/state.js";
import { DEFAULT_SERVICES_BUCKET } from "../src/protocol/buckets.js";
import { encodeServiceBeat, serviceKey, type ServiceBeat, type ServiceRole } from "../src/protocol/service.js";
import { benchDir as here, cliPath, repoRoot } from "./paths.js";

const { values: args } = parseArgs({
  options: {
    nodes: { type: "string", default: "10000" },
    rounds: { type: "string", default: "5" },
    out: { type: "string", default: join(repoRoot, "bench", "results", "health.json") },
  },
});
const N = Number(args.nodes);
const rounds = Number(args.rounds);
if (!Number.isInteger(N) || N < 1 || !Number.isInteger(rounds) || rounds < 1) {
  process.stderr.write("bench:health: --nodes and --rounds take whole numbers\n");
  process.exit(64);
}
const unhealthy = Math.max(1, Math.round(N / 100));
/** The console's own and the 11 this process writes. */
const SERVICES = 12;

const children = new Set<ChildProcess>();
process.on("exit", () => {
  for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
});
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.floor((s.length - 1) / 2)]! * 10) / 10;
};
const timed = async <T>(f: () => Promise<T>): Promise<[number, T]> => {
  const t0 = performance.now();
  const v = await f();
  return [performance.now() - t0, v];
};

const tmp = mkdtempSync(join(tmpdir(), "muster-bench-health-"));
process.env.MUSTER_CONFIG_DIR = join(tmp, "keys");
const nats = await startNats({});
let web: ChildProcess | undefined;
const client = await MusterClient.connect({ brokers: [nats.url], name: "bench-health" });
try {
  await ensureFleetStores(client);
  const state = await ProvisionState.open(client);
  const nodes = fork(join(here, "health-nodes.js"), [String(N), nats.url, String(unhealthy)], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  children.add(nodes);
  await new Promise<void>((resolve, reject) => {
    nodes.once("message", () => resolve());
    nodes.once("exit", (c) => reject(new Error(`health-nodes exited ${c}`)));
  });
  // the provisioner's records: every node done, 1% failed
  const ids = Array.from({ length: N }, (_, i) => `node-${String(i + 1).padStart(Math.max(5, String(N).length), "0")}.example.net`);
  const t0 = Date.now();
  for (let i = 0; i < N; i += 500) {
    await Promise.all(ids.slice(i, i + 500).map((id, j) => state.put({ ...newRecord(id, t0), status: i + j < unhealthy ? "failed" : "done", stage: "notify", lastError: i + j < unhealthy ? "bench: failed" : undefined, startedAt: t0 - 60_000, finishedAt: t0 })));
  }
  const alive = (await AliveStore.open(client))!;
  const runs = (await PuppetRunStore.open(client))!;
  // 11 services besides the console, with the checks each writes on a site
  const servicesBucket = (await client.bucketIfExists(DEFAULT_SERVICES_BUCKET))!;
  const check = (name: string) => ({ name, status: "ok" as const, why: `${name}: as a site's says it, a line of about this length` });
  const others: [ServiceRole, string, string[], ServiceBeat["observer"]?][] = [
    ...[1, 2, 3].map((n): [ServiceRole, string, string[], ServiceBeat["observer"]] => ["broker", `nats${n}`, ["answers", "routes", "meta group", "streams"], { name: "console.example.net", answers: true }]),
    ...["puppet-eu", "puppet-us"].map((m): [ServiceRole, string, string[]] => ["master", `${m}.example.net`, ["muster server", "puppetserver", "ca"]]),
    ...[1, 2].map((n): [ServiceRole, string, string[]] => ["provisioner", `provisioner@provisioner${n}`, ["cycle", "claims"]]),
    ["registry", "registry1.example.net", ["registrations", "bucket"]],
    ["registry", "registry2.example.net", ["registrations", "bucket"]],
    ["console", "console2.example.net", ["broker", "registry", "health view", "alerts"]],
    ["notifier", "notifier.example.net", ["delivery"]],
  ];
  const writeServices = () =>
    Promise.all(others.map(([role, name, checks, observer]) => servicesBucket.put(serviceKey(role, name), encodeServiceBeat({ name, role, time: Date.now(), interval: 10, version: "bench", state: "up", checks: checks.map(check), details: {}, ...(observer ? { observer } : {}) }))));
  await writeServices();
  const serviceBeats = setInterval(() => void writeServices().catch(() => undefined), 10_000);
  for (const deadline = Date.now() + 120_000; ; ) {
    const [a, r] = await Promise.all([alive.bucket.status(), runs.bucket.status()]);
    if (a.values >= N && r.values >= N) break;
    if (Date.now() > deadline) throw new Error(`heartbeats ${a.values}, runs ${r.values} of ${N} after 120 s`);
    await new Promise((res) => setTimeout(res, 500)); // the fleet's first heartbeats landing: nothing to wait on but the count
  }

  // the console, as an operator runs it
  const port = await freePort("127.0.0.1");
  writeFileSync(join(tmp, "tokens"), "bench-token-0123456789abcdef viewer bench\n", { mode: 0o600 });
  writeFileSync(join(tmp, "web.yaml"), JSON.stringify({ listen: `127.0.0.1:${port}`, auth: { tokens_file: join(tmp, "tokens") }, alerts: { enabled: false } }));
  web = spawn(process.execPath, [cliPath, "web", "--config", join(tmp, "web.yaml"), "--broker", nats.url], { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env } });
  children.add(web);
  await new Promise<void>((resolve, reject) => {
    web!.stdout!.on("data", (d: Buffer) => /ready/.test(d.toString()) && resolve());
    web!.once("exit", (c) => reject(new Error(`muster web exited ${c}`)));
  });
  const url = `http://127.0.0.1:${port}/api/health`;
  const get = async () => {
    const res = await fetch(url, { headers: { authorization: "Bearer bench-token-0123456789abcdef" } });
    return (await res.json()) as { nodes: unknown[]; services: unknown[]; summary: { nodes: number; unhealthy: number } };
  };
  for (const deadline = Date.now() + 60_000; ; ) {
    const b = await get();
    if (b.summary.nodes >= N && b.services.length >= SERVICES) break;
    if (Date.now() > deadline) throw new Error("the console did not see every node and service within 60 s");
    await new Promise((res) => setTimeout(res, 500)); // its watches catching up
  }

  const samples = { raw: [] as number[], read: [] as number[], model: [] as number[], cli: [] as number[], served: [] as number[] };
  let last: { summary: { nodes: number; unhealthy: number } } | undefined;
  for (let r = 0; r < rounds + 1; r++) {
    const [raw] = await timed(() => Promise.all([alive.bucket.values(), servicesBucket.values(), state.bucket.values()]));
    const [read, inputs] = await timed(() => readHealthInputs(client, {}));
    const [model, report] = await timed(async () => healthReport(inputs.inputs, DEFAULT_HEALTH_POLICY, Date.now(), { ...(inputs.services ? { services: inputs.services } : {}) }));
    const [cli] = await timed(
      () =>
        new Promise<void>((resolve, reject) => {
          const p = spawn(process.execPath, [cliPath, "health", "--json", "--broker", nats.url], { stdio: ["ignore", "ignore", "ignore"], env: process.env });
          p.once("exit", (c) => (c === 2 || c === 0 ? resolve() : reject(new Error(`muster health exited ${c}`))));
        }),
    );
    const [served, body] = await timed(get);
    last = body;
    if (report.summary.nodes !== N || body.nodes.length !== N) throw new Error(`counted ${report.summary.nodes} / served ${body.nodes.length} of ${N} nodes`);
    if (report.services.length !== SERVICES || body.services.length !== SERVICES) throw new Error(`counted ${report.services.length} / served ${body.services.length} of ${SERVICES} services`);
    if (r === 0) continue; // warm-up
    samples.raw.push(raw);
    samples.read.push(read);
    samples.model.push(model);
    samples.cli.push(cli);
    samples.served.push(served);
  }
  const m = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, median(v)])) as Record<keyof typeof samples, number>;
  clearInterval(serviceBeats);
  const result = {
    nodes: N,
    services: SERVICES,
    unhealthy: last!.summary.unhealthy,
    rounds,
    median_ms: m,
    ratio: { read_over_raw: Math.round((m.read / m.raw) * 100) / 100, served_over_raw: Math.round((m.served / m.raw) * 100) / 100 },
    samples,
    host: { cpus: cpus().length, load: loadavg().map((x) => Math.round(x * 100) / 100), node: process.version },
    at: new Date().toISOString(),
  };
  mkdirSync(dirname(args.out), { recursive: true });
  writeFileSync(args.out, `${JSON.stringify(result, null, 2)}\n`);
  process.stdout.write(
    `site health, ${N} nodes (${result.unhealthy} unhealthy) and ${SERVICES} services, median of ${rounds}:\n` +
      `  raw reads      ${m.raw} ms  (every heartbeat, service heartbeat and provisioning record)\n` +
      `  read+compute   ${m.read} ms  (${result.ratio.read_over_raw}x raw; the model alone ${m.model} ms)\n` +
      `  muster health  ${m.cli} ms  (the whole process)\n` +
      `  GET /api/health ${m.served} ms (${result.ratio.served_over_raw}x raw)\n` +
      `written to ${args.out}\n`,
  );
} finally {
  web?.kill("SIGTERM");
  for (const c of children) c.send?.({ type: "stop" });
  await client.close();
  await nats.stop();
  rmSync(tmp, { recursive: true, force: true });
}
