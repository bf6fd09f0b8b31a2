// `npm run bench:machines`: what a lab machine costs, against process nodes in the same run.
//
//   node dist/bench/machines.js [--machines 4,8] [--vm] [--cold-image] [--out bench/results/machines.json]
//
// For each N: a lab of N process nodes (the floor: the same provisioning, no machine under it), then
// a lab of N systemd-nspawn machines; with --vm, one lab of one QEMU machine. For each lab: the time
// from the start to every node waiting, and from the provisioner's start to every node provisioned;
// for each machine: power-on to waiting (booted, cloud-init installed the package, muster-server up)
// and power-on to provisioned; its RSS as the host sees it (every process in its PID namespace, or
// qemu's) and muster-server's inside it. --cold-image builds the image into an empty cache first,
// for the image's build time and size (otherwise they come from the cache's build.json).
// Runs under the heavy-work lock when called through npm: nothing else may run meanwhile.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { MusterClient } from "../src/client/client.js";
import { startLab, type Lab } from "../src/lab/lab.js";
import { ensureImage, hostRelease, imageInfo, machineImageSpec, machineLeader } from "../src/lab/machines/index.js";
import { spawnMuster } from "../src/lab/processes.js";
import type { NodeRecord } from "../src/protocol/provision-record.js";
import { ProvisionState } from "../src/provisioner/state.js";
import { repoRoot as REPO } from "./paths.js";

const { values: a } = parseArgs({ options: { machines: { type: "string", default: "4,8" }, vm: { type: "boolean", default: false }, "cold-image": { type: "boolean", default: false }, out: { type: "string" } } });
const sizes = a.machines.split(",").map(Number);
const imageCache = join(REPO, ".muster", "images");
const say = (l: string) => process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${l}\n`);

/** kB of resident memory of a process, from /proc (0 when it is gone). */
function rssKb(pid: number | string): number {
  try {
    return Number(/^VmRSS:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0);
  } catch {
    return 0;
  }
}

/** Which of muster's daemons a command line is (the unit files' ExecStart): `muster server --config`, `muster privileged serve`. */
function musterDaemon(args: string[]): "server" | "privileged" | undefined {
  const i = args.findIndex((a) => a === "server" || a === "privileged");
  if (i < 1 || !args.slice(0, i).some((a) => /muster|main\.js$/.test(a))) return undefined;
  if (args[i] === "server" && args[i + 1] === "--config") return "server";
  if (args[i] === "privileged" && args[i + 1] === "serve") return "privileged";
  return undefined;
}

/**
 * A machine's memory as the host sees it: every process in its PID namespace; muster-server's,
 * and the privileged helper's while it runs (socket-activated: after its first operation).
 */
function machineRss(leader: number, kind: string): { machine_mb: number; muster_server_mb?: number; muster_privileged_mb?: number } {
  if (kind === "vm") return { machine_mb: +(rssKb(leader) / 1024).toFixed(1) };
  const ns = readlinkSync(`/proc/${leader}/ns/pid`);
  let total = 0;
  const daemons = { server: 0, privileged: 0 };
  for (const p of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    try {
      if (readlinkSync(`/proc/${p}/ns/pid`) !== ns) continue;
      const kb = rssKb(p);
      total += kb;
      const d = musterDaemon(readFileSync(`/proc/${p}/cmdline`, "utf8").split("\0"));
      if (d) daemons[d] += kb;
    } catch {
      // gone meanwhile
    }
  }
  const mb = (kb: number) => +(kb / 1024).toFixed(1);
  return { machine_mb: mb(total), muster_server_mb: mb(daemons.server), muster_privileged_mb: mb(daemons.privileged) };
}

interface LabRun {
  kind: "process" | "nspawn" | "vm";
  nodes: number;
  start_to_all_waiting_s: number;
  provisioner_to_all_done_s: number;
  provisioned: number;
  per_node: { identity: string; power_on_to_waiting_s?: number; power_on_to_provisioned_s?: number; provisioning_s: number; machine_mb?: number; muster_server_mb?: number; muster_privileged_mb?: number }[];
}

async function runLab(kind: LabRun["kind"], n: number): Promise<LabRun> {
  const dir = mkdtempSync(join(tmpdir(), `muster-bench-machines-${kind}-`));
  process.env.MUSTER_CONFIG_DIR = join(dir, "keys");
  const t0 = Date.now();
  let lab: Lab | undefined;
  try {
    lab = await startLab({ dir: join(dir, "lab"), nodes: n, detached: false, provisioner: false, progress: say, ...(kind === "process" ? {} : { machines: { kind, imageCache } }) });
    const waited = Date.now();
    const client = await MusterClient.connect({ brokers: [lab.state.broker], collective: lab.state.collective, tls: lab.state.tls.admin });
    const store = await ProvisionState.open(client, "muster_provision");
    const p0 = Date.now();
    const prov = spawnMuster(["provisioner", "--config", lab.provisionerConfig(), "--foreground"], { logFile: join(dir, "provisioner.log"), env: lab.state.provisionerEnv });
    try {
      const ids = lab.state.nodes.map((x) => x.identity);
      const latest = await store.waitFor(ids, (r) => r.status === "done" || r.status === "failed", (kind === "vm" ? 60 : 20) * 60_000);
      const all = Date.now();
      const per_node = lab.state.nodes.map((x) => {
        const r = latest.get(x.identity) as NodeRecord;
        const m = x.machine;
        const leader = m ? machineLeader(m.dir) : undefined;
        return {
          identity: x.identity,
          ...(m ? { power_on_to_waiting_s: m.waitingAt ? +((m.waitingAt - m.poweredOnAt) / 1000).toFixed(1) : undefined, power_on_to_provisioned_s: +(((r.finishedAt ?? all) - m.poweredOnAt) / 1000).toFixed(1) } : {}),
          provisioning_s: +(((r.finishedAt ?? all) - (r.startedAt ?? p0)) / 1000).toFixed(1),
          ...(leader ? machineRss(leader, kind) : {}),
        };
      });
      return {
        kind,
        nodes: n,
        start_to_all_waiting_s: +((waited - t0) / 1000).toFixed(1),
        provisioner_to_all_done_s: +((all - p0) / 1000).toFixed(1),
        provisioned: [...latest.values()].filter((r) => r.status === "done").length,
        per_node,
      };
    } finally {
      await prov.stop();
      await client.close();
    }
  } finally {
    await lab?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

const results: Record<string, unknown> = { at: new Date().toISOString(), host: { cores: (await import("node:os")).cpus().length } };
if (a["cold-image"]) {
  const cold = mkdtempSync(join(tmpdir(), "muster-bench-image-"));
  try {
    const img = await ensureImage(cold, machineImageSpec(hostRelease()), say);
    results.image = { cold_build_s: img.buildSeconds, mb: +(img.bytes / 1e6).toFixed(0) };
  } finally {
    rmSync(cold, { recursive: true, force: true });
  }
}
const spec = machineImageSpec(hostRelease());
const img = await ensureImage(imageCache, spec, say);
const info = imageInfo(img.root);
results.image ??= { key: img.key, build_s: info?.buildSeconds, mb: +((info?.bytes ?? img.bytes) / 1e6).toFixed(0) };
const runs: LabRun[] = [];
for (const n of sizes) {
  runs.push(await runLab("process", n));
  runs.push(await runLab("nspawn", n));
  const [floor, m] = runs.slice(-2) as [LabRun, LabRun];
  say(`${n} machines: provisioned in ${m.provisioner_to_all_done_s} s against ${floor.provisioner_to_all_done_s} s for ${n} process nodes (${(m.provisioner_to_all_done_s / floor.provisioner_to_all_done_s).toFixed(2)}x)`);
}
if (a.vm) runs.push(await runLab("vm", 1));
results.runs = runs;
results.ratios = sizes.map((n) => {
  const floor = runs.find((r) => r.kind === "process" && r.nodes === n)!;
  const m = runs.find((r) => r.kind === "nspawn" && r.nodes === n)!;
  return { nodes: n, provisioning_vs_process_nodes: +(m.provisioner_to_all_done_s / floor.provisioner_to_all_done_s).toFixed(2), lab_start_vs_process_nodes: +(m.start_to_all_waiting_s / floor.start_to_all_waiting_s).toFixed(2) };
});
const text = JSON.stringify(results, null, 2);
console.log(text);
if (a.out) {
  mkdirSync(join(a.out, ".."), { recursive: true });
  writeFileSync(a.out, `${text}\n`);
}
