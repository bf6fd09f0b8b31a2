// What the machine benches share (bench/machines.ts, bench/site.ts): a machine's memory as the host
// sees it, split by daemon, and one lab of N nodes (process or machine) from start to provisioned.
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MusterClient } from "../src/client/client.js";
import { startLab, type Lab } from "../src/lab/lab.js";
import { machineLeader } from "../src/lab/machines/index.js";
import { spawnMuster } from "../src/lab/processes.js";
import type { NodeRecord } from "../src/protocol/provision-record.js";
import { ProvisionState } from "../src/provisioner/state.js";
import { measureDetection, type Detection } from "./detection.js";
import { repoRoot as REPO } from "./paths.js";

export const imageCache = join(REPO, ".muster", "images");
export const say = (l: string) => process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${l}\n`);

/** kB of resident memory of a process, from /proc (0 when it is gone). */
export function rssKb(pid: number | string): number {
  try {
    return Number(/^VmRSS:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0);
  } catch {
    return 0;
  }
}

/** muster's daemons as the unit files start them (`muster <command> <first argument>`), and the site's peers. */
const DAEMONS: [name: string, command: string, arg: string][] = [
  ["muster_server", "server", "--config"],
  ["muster_privileged", "privileged", "serve"],
  ["muster_provisioner", "provisioner", "--config"],
  ["muster_registry", "registry", "--config"],
  ["muster_web", "web", "--config"],
];

/** Which daemon a command line is: one of muster's (the unit files' ExecStart), nats-server or puppetserver (its JVM). */
export function daemonOf(args: string[]): string | undefined {
  if (/(^|\/)nats-server$/.test(args[0] ?? "")) return "nats_server";
  if (/(^|\/)java$/.test(args[0] ?? "") && args.some((a) => /puppetserver/.test(a))) return "puppetserver";
  for (const [name, command, arg] of DAEMONS) {
    const i = args.indexOf(command);
    if (i >= 1 && args[i + 1] === arg && args.slice(0, i).some((a) => /muster|main\.js$/.test(a))) return name;
  }
  return undefined;
}

/**
 * A machine's memory as the host sees it: every process in its PID namespace; muster-server's,
 * and the privileged helper's while it runs (socket-activated: after its first operation).
 */
export function machineRss(leader: number, kind: string): { machine_mb: number; [daemon: `${string}_mb`]: number } {
  if (kind === "vm") return { machine_mb: +(rssKb(leader) / 1024).toFixed(1) };
  const ns = readlinkSync(`/proc/${leader}/ns/pid`);
  let total = 0;
  const daemons: Record<string, number> = { muster_server: 0, muster_privileged: 0 };
  for (const p of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    try {
      if (readlinkSync(`/proc/${p}/ns/pid`) !== ns) continue;
      const kb = rssKb(p);
      total += kb;
      const d = daemonOf(readFileSync(`/proc/${p}/cmdline`, "utf8").split("\0"));
      if (d) daemons[d] = (daemons[d] ?? 0) + kb;
    } catch {
      // gone meanwhile
    }
  }
  const mb = (kb: number) => +(kb / 1024).toFixed(1);
  return { machine_mb: mb(total), ...Object.fromEntries(Object.entries(daemons).map(([d, kb]) => [`${d}_mb`, mb(kb)])) };
}

export interface LabRun {
  kind: "process" | "nspawn" | "vm";
  nodes: number;
  start_to_all_waiting_s: number;
  provisioner_to_all_done_s: number;
  provisioned: number;
  per_node: { identity: string; power_on_to_waiting_s?: number; power_on_to_provisioned_s?: number; provisioning_s: number; machine_mb?: number; [daemon: `${string}_mb`]: number | undefined }[];
  /** With `detection`: how long the fleet takes to see a machine die (bench/detection.ts). */
  detection?: Detection;
}

export async function runLab(kind: LabRun["kind"], n: number, o: { detection?: boolean } = {}): Promise<LabRun> {
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
      const run: LabRun = {
        kind,
        nodes: n,
        start_to_all_waiting_s: +((waited - t0) / 1000).toFixed(1),
        provisioner_to_all_done_s: +((all - p0) / 1000).toFixed(1),
        provisioned: [...latest.values()].filter((r) => r.status === "done").length,
        per_node,
      };
      if (o.detection) {
        say("detection: a provisioned machine's power cut and back, then one cut during its bootstrap");
        run.detection = await measureDetection(lab, store);
        say(`detection: ${JSON.stringify(run.detection)}`);
      }
      return run;
    } finally {
      await prov.stop();
      await client.close();
    }
  } finally {
    await lab?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

