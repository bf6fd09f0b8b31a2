// `npm run bench:provision`: provisioning throughput with emulated nodes whose provision agent
// simulates Puppet's timings (src/emulator/simulated.ts), beside the ideal for the same
// concurrency and timings measured in the same run.
//
//   node dist/bench/provision.js [--nodes 1000] [--masters 10] [--concurrency 200] [--per-master 50]
//                                [--run-ms 200,400] [--csr-ms 50] [--probe-status]
//
// The scale run (issue 12: Choria's users overflowed a queue with 50,000 nodes waiting at once):
//   node dist/bench/provision.js --nodes 10000 --probe-status
// All 10,000 nodes wait at once; --probe-status runs the real `muster provision status`
// one after another during the run and reports how long each took to answer (the bar: 2 s).
// The provisioner's peak memory (RSS and heap of this process, sampled) is always reported.
//
// The fleet runs in a child process (one connection, like `muster emulate`); the provisioner runs
// here, so its CPU time (process.cpuUsage) is the provisioner's own. Ideal makespan: nodes x
// (csr + 2 Puppet runs) / concurrency, i.e. what a provisioner with zero overhead would take.
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { createInterface } from "node:readline";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { MusterClient } from "../src/client/client.js";
import { startNats } from "../src/lab/nats.js";
import { silentLogger } from "../src/log.js";
import { ProvisionerConfigSchema } from "../src/provisioner/config.js";
import { MusterCollective } from "../src/provisioner/muster-collective.js";
import { Provisioner } from "../src/provisioner/scheduler.js";
import { ProvisionState } from "../src/provisioner/state.js";

const { values: a } = parseArgs({
  options: {
    nodes: { type: "string", default: "1000" },
    masters: { type: "string", default: "10" },
    concurrency: { type: "string", default: "200" },
    "per-master": { type: "string", default: "50" },
    "run-ms": { type: "string", default: "200,400" },
    "csr-ms": { type: "string", default: "50" },
    "probe-status": { type: "boolean", default: false },
    "discovery-timeout": { type: "string", default: "10" },
  },
});
const N = Number(a.nodes);
const [runMin, runMax] = a["run-ms"]!.split(",").map(Number) as [number, number];
const csrMs = Number(a["csr-ms"]);
const concurrency = Number(a.concurrency);

const dir = mkdtempSync(join(tmpdir(), "muster-bench-prov-"));
process.env.MUSTER_CONFIG_DIR = join(dir, "keys");
const nats = await startNats({});
const fleetJs = join(dirname(fileURLToPath(import.meta.url)), "provision-fleet.js");
const fleet = spawn(process.execPath, [fleetJs, nats.url, String(N), a.masters!, String(runMin), String(runMax), String(csrMs)], { stdio: ["ignore", "pipe", "inherit"], env: process.env });
const lines = createInterface({ input: fleet.stdout! });
const next = () => new Promise<string>((resolve) => lines.once("line", resolve));
try {
  if ((await next()) !== "ready") throw new Error("fleet did not start");
  const cfg = ProvisionerConfigSchema.parse({
    steps: { lock: true, set_puppet_hostname: true, clean_node_certname: true, send_node_csr: true, sign_node_csr: true, puppet_bootstrap_stage: true, puppet_final_run: true, notify: true },
    master: { criteria: ["ec2_placement_region"], agent: "puppetca" },
    notify: { agent: "notify", targets: ["http://127.0.0.1:9/"] },
    id: "bench-provisioner",
    concurrency,
    per_master_limit: Number(a["per-master"]),
    discovery_timeout: Number(a["discovery-timeout"]),
    sleeptime: 60,
  });
  const client = await MusterClient.connect({ brokers: [nats.url], collective: "muster", name: "bench-provisioner" });
  const store = await ProvisionState.open(client, cfg.state_bucket);
  const p = new Provisioner(cfg, new MusterCollective(client, cfg, silentLogger), store, silentLogger);
  let peakRss = 0;
  let peakHeap = 0;
  const sample = () => {
    const m = process.memoryUsage();
    peakRss = Math.max(peakRss, m.rss);
    peakHeap = Math.max(peakHeap, m.heapUsed);
  };
  const sampler = setInterval(sample, 100);
  // consumers open on each stream, sampled: a reader that leaves its consumer behind shows here
  // (the 10,000-node run once stalled with thousands on the node-key directory's stream)
  const monitor = await connect({ servers: nats.url, name: "bench-consumers" });
  const jsm = await jetstreamManager(monitor);
  const peakConsumers: Record<string, number> = {};
  const countConsumers = async () => {
    for await (const si of jsm.streams.list()) peakConsumers[si.config.name] = Math.max(peakConsumers[si.config.name] ?? 0, si.state.consumer_count);
  };
  const consumerSampler = setInterval(() => void countConsumers().catch(() => undefined), 5000);
  const natsCpu0 = procCpuS(nats.pid);
  const fleetCpu0 = procCpuS(fleet.pid!);
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const probes: number[] = [];
  let running = true;
  const cli = join(dirname(fileURLToPath(import.meta.url)), "..", "src", "cli", "main.js");
  const probing = (async () => {
    while (a["probe-status"] && running) {
      const s0 = performance.now();
      await new Promise<void>((resolve, reject) => execFile(process.execPath, [cli, "provision", "status", "--broker", nats.url], { env: process.env, maxBuffer: 1 << 30 }, (err) => (err ? reject(err) : resolve())));
      probes.push(performance.now() - s0);
      await new Promise((r) => setTimeout(r, 1000)); // an operator asking every second or so, not a load generator
    }
  })();
  await p.runOnce();
  const wallMs = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  const natsCpuS = procCpuS(nats.pid) - natsCpu0;
  const fleetCpuS = procCpuS(fleet.pid!) - fleetCpu0;
  running = false;
  await probing;
  clearInterval(sampler);
  clearInterval(consumerSampler);
  await countConsumers().catch(() => undefined);
  await monitor.close();
  sample();
  const recs = await store.list();
  const done = recs.filter((r) => r.status === "done").length;
  const failed = recs.filter((r) => r.status === "failed");
  await client.close();
  fleet.kill("SIGTERM");
  const ca = JSON.parse(await next()) as { signed: number; doubleSigned: number; notifications: number; cpuS: number };
  const perNodeIdealMs = csrMs + runMin + runMax; // two runs at the mean duration
  const idealMs = (N * perNodeIdealMs) / Math.min(concurrency, N);
  const cpuSec = (cpu.user + cpu.system) / 1e6;
  const out = {
    nodes: N,
    masters: Number(a.masters),
    concurrency,
    provisioned: done,
    failed: failed.length,
    wall_s: +(wallMs / 1000).toFixed(2),
    nodes_per_min: Math.round((done / wallMs) * 60_000),
    ideal_s: +(idealMs / 1000).toFixed(2),
    ideal_nodes_per_min: Math.round((N / idealMs) * 60_000),
    ratio_to_ideal: +(wallMs / idealMs).toFixed(2),
    provisioner_cpu_s: +cpuSec.toFixed(2),
    provisioner_cpu_share: +(cpuSec / (wallMs / 1000)).toFixed(2),
    cpu_ms_per_node: +((cpuSec * 1000) / Math.max(1, done)).toFixed(2),
    // where the machine's CPU went during the run (the fleet's figure is its whole life, startup included)
    nats_server_cpu_share: +(natsCpuS / (wallMs / 1000)).toFixed(2),
    fleet_cpu_share_during_run: +(fleetCpuS / (wallMs / 1000)).toFixed(2),
    fleet_cpu_s_total: +ca.cpuS.toFixed(2),
    peak_consumers: peakConsumers,
    provisioner_peak_rss_mb: Math.round(peakRss / 2 ** 20),
    provisioner_peak_heap_mb: Math.round(peakHeap / 2 ** 20),
    ...(probes.length ? { status_probes: probes.length, status_max_s: +(Math.max(...probes) / 1000).toFixed(2), status_median_s: +([...probes].sort((x, y) => x - y)[probes.length >> 1]! / 1000).toFixed(2) } : {}),
    certificates_signed: ca.signed,
    double_signed: ca.doubleSigned,
    notifications: ca.notifications,
  };
  console.log(JSON.stringify(out, null, 2));
  if (failed.length) console.error(`first failure: ${failed[0]!.identity}: ${failed[0]!.lastError}`);
} finally {
  fleet.kill("SIGKILL");
  await nats.stop();
  rmSync(dir, { recursive: true, force: true });
}

/** CPU seconds a process used so far (utime + stime from /proc; 0 where there is no /proc). */
function procCpuS(pid: number): number {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return 0;
  }
}
