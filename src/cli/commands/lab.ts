import { Command } from "commander";
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { stringify as toYaml } from "yaml";
import { MusterClient } from "../../client/client.js";
import { MusterError } from "../../errors.js";
import { isAlive } from "../../lab/processes.js";
import { connectedUsers, labPids, readLabState, startLab, stopLabFromState, type LabState } from "../../lab/lab.js";
import { receiverCommand } from "../../lab/receiver-command.js";
import { StateStore, type NodeRecord } from "../../provisioner/state.js";
import { DEFAULT_STATE_BUCKET } from "../../provisioner/config.js";
import { progressBar, bold, green, red } from "../output.js";
import { renderStatusTable } from "./provision.js";

// `muster lab`: a local fleet on loopback that provisions itself end to end against real Puppet.
// State lives in ./.muster/lab; ./.muster/client.yaml points plain muster commands at it.

const labDir = () => resolve(".muster", "lab");
const clientConfig = () => resolve(".muster", "client.yaml");
const ts = () => new Date().toISOString().slice(11, 19);

function running(s: LabState): boolean {
  return isAlive(s.natsPid);
}

async function followProvisioning(s: LabState, timeoutMs: number): Promise<NodeRecord[]> {
  const client = await MusterClient.connect({ brokers: [s.broker], collective: s.collective, name: "muster-lab-follow", tls: s.tls?.admin });
  const store = await StateStore.open(client.nc, DEFAULT_STATE_BUCKET);
  const bar = progressBar(true);
  const ids = s.nodes.map((n) => n.identity);
  const seen = new Map<string, string>();
  const finished = (r: NodeRecord) => r.status === "done" || r.status === "failed";
  bar.start(ids.length);
  try {
    await store.waitFor(ids, finished, timeoutMs, (rec) => {
      if (!ids.includes(rec.identity)) return;
      const label = rec.status === "in_progress" ? (rec.current ?? "starting") : rec.status;
      const was = seen.get(rec.identity);
      if (was === label) return;
      seen.set(rec.identity, label);
      const line = rec.status === "done" ? green(`provisioned against ${rec.master}`) : rec.status === "failed" ? red(`FAILED: ${rec.lastError ?? ""}`) : `${label}${rec.attempts ? ` (retry ${rec.attempts})` : ""}`;
      process.stderr.write(`\r\x1b[K${ts()} ${rec.identity.padEnd(16)} ${line}\n`);
      if (finished(rec) && was !== "done" && was !== "failed") bar.tick();
    });
  } catch (e) {
    process.stderr.write(`${ts()} ${(e as Error).message}\n`);
  } finally {
    bar.stop();
  }
  const all = await store.all();
  await client.close();
  return all.filter((r) => ids.includes(r.identity));
}

export function labCommand(): Command {
  const lab = new Command("lab").description("A local fleet on loopback: broker, two real puppetservers, nodes, notifier and provisioner");
  lab.addCommand(
    new Command("up")
      .description("Start the lab and provision every node end to end, with live progress; leaves the lab running")
      .option("--nodes <n>", "how many nodes to provision", "4")
      .option("--timeout <seconds>", "give up following progress after this long", "900")
      .action(async (o: { nodes: string; timeout: string }) => {
        const n = Number(o.nodes);
        if (!Number.isInteger(n) || n < 1 || n > 200) throw new MusterError("MUSTER_USAGE", "--nodes takes a whole number from 1 to 200");
        const existing = readLabState(labDir());
        if (existing && running(existing)) {
          process.stdout.write(`The lab is already running (${existing.nodes.length} nodes, broker ${existing.broker}).\nSee \`muster lab status\`, or \`muster lab down\` first to start afresh.\n`);
          return;
        }
        if (existing) await stopLabFromState(labDir()); // leftovers of a lab that died: clear them first
        rmSync(labDir(), { recursive: true, force: true });
        mkdirSync(labDir(), { recursive: true });
        const t0 = Date.now();
        const started = await startLab({ dir: labDir(), nodes: n, detached: true, provisioner: true, progress: (l) => process.stderr.write(`${ts()} ${l}\n`) });
        const s = started.state;
        writeFileSync(clientConfig(), toYaml({ brokers: [s.broker], collective: s.collective, tls: s.tls.admin }));
        process.stderr.write(`${ts()} lab is up; provisioning ${n} nodes\n`);
        const recs = await followProvisioning(s, Number(o.timeout) * 1000);
        const done = recs.filter((r) => r.status === "done").length;
        process.stdout.write(`\n${renderStatusTable(recs)}\n\n`);
        process.stdout.write(`${bold(`${done} of ${n} nodes provisioned`)} in ${((Date.now() - t0) / 1000).toFixed(0)} s (lab start included). Notifications: ${s.receiver.file}\n\n`);
        process.stdout.write(`The lab keeps running. Try:\n  muster ping\n  muster find -F country=de\n  muster provision status\n  muster facts country\n  muster puppet runall 2\n  muster rpc rpcutil daemon_stats -I ${s.nodes[0]?.identity ?? "node01.eu.lab"}\n  muster lab status\n  muster lab down\n`);
        process.exitCode = done === n ? 0 : 2;
      }),
  );
  lab.addCommand(
    new Command("down").description("Stop everything the lab started and remove its state").action(async () => {
      const stopped = await stopLabFromState(labDir());
      rmSync(resolve(".muster", "lab"), { recursive: true, force: true });
      if (existsSync(clientConfig())) rmSync(clientConfig());
      process.stdout.write(stopped.length ? `stopped: ${stopped.join(", ")}\n` : "no lab was running\n");
    }),
  );
  lab.addCommand(
    new Command("status")
      .description("Which lab processes run, and where provisioning stands")
      .option("--json", "machine-readable")
      .action(async (o: { json?: boolean }) => {
        const s = readLabState(labDir());
        if (!s) {
          process.stdout.write("no lab here (start one with `muster lab up`)\n");
          process.exitCode = 1;
          return;
        }
        const procs = labPids(s).map((p) => ({ ...p, alive: isAlive(p.pid) }));
        let recs: NodeRecord[] = [];
        if (running(s)) {
          const client = await MusterClient.connect({ brokers: [s.broker], collective: s.collective, name: "muster-lab-status", tls: s.tls?.admin });
          recs = await (await StateStore.open(client.nc, DEFAULT_STATE_BUCKET)).all();
          await client.close();
        }
        if (o.json) {
          process.stdout.write(`${JSON.stringify({ state: s, processes: procs, provisioning: recs }, null, 2)}\n`);
          return;
        }
        process.stdout.write(`lab in ${s.dir}\nbroker ${s.broker} (TLS, CA ${s.tls?.ca ?? "none"}), collective ${s.collective}, waiting nodes in ${s.provisioningCollective ?? s.collective}\n\n`);
        const users = running(s) && s.monitor ? await connectedUsers(s.monitor) : new Map<string, string>(); // a nicety: the list stands without it
        for (const p of procs) {
          const id = p.name.startsWith("muster server ") ? p.name.slice("muster server ".length) : p.name === "provisioner" ? undefined : "";
          const user = id === undefined ? [...users.entries()].find(([n]) => n.startsWith("muster-provisioner:"))?.[1] : id ? users.get(`muster-server:${id}`) : undefined;
          process.stdout.write(`  ${p.alive ? green("running") : red("stopped")}  ${String(p.pid).padStart(7)}  ${p.name}${user ? `  (broker user ${user})` : ""}\n`);
        }
        for (const m of s.masters) process.stdout.write(`\n  master ${m.identity}: https://${m.host}:${m.port} (${m.region.country}, ${m.region.region})`);
        process.stdout.write(`\n\n${recs.length ? renderStatusTable(recs) : "no provisioning records"}\n`);
        process.exitCode = procs.every((p) => p.alive) ? 0 : 2;
      }),
  );
  lab.addCommand(receiverCommand(), { hidden: true });
  return lab;
}
