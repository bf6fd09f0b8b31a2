import { readFileSync } from "node:fs";
import { join } from "node:path";
import { clearMachineRemains, machineLeader, machineSupervisor, powerOffMachine, teardownMachines } from "./machines/index.js";
import { cmdlineOf, isAlive, stopPid } from "./processes.js";
import { stopDetachedPuppetserver } from "./puppetserver.js";
import { LAB_REGIONS } from "./regions.js";
import { labMachinesOf, labPids, readLabState, rememberedPids } from "./state.js";

// `muster lab down`: a detached lab is stopped from what it wrote down, never from a process of
// its own. From its state file when it has one; from what it remembered (pids.jsonl, the pid
// files of nats-server and the puppetservers, the machines' directories) when `lab up` was cut
// short before writing it, or the lab died.

/**
 * Stop what a lab started that its state file does not name: an interrupted `lab up` (before
 * it wrote the state), or a lab that died. Every process it remembered and that still runs the
 * same command, its machines (off, unmounted), its network, nats-server and the puppetservers.
 */
export async function stopLabRemains(dir: string): Promise<string[]> {
  const stopped: string[] = [];
  stopped.push(...(await clearMachineRemains(dir)));
  await Promise.all(
    rememberedPids(dir).map(async ({ pid, cmd }) => {
      if (!cmd || cmdlineOf(pid) !== cmd) return; // gone, or the pid is another process's now
      await stopPid(pid, 10_000, { group: true });
      stopped.push(`pid ${pid} (${cmd.split(" ").slice(0, 4).join(" ")})`);
    }),
  );
  for (const r of LAB_REGIONS) if (await stopDetachedPuppetserver(join(dir, "masters", r.name))) stopped.push(`puppetserver ${r.name}`);
  try {
    const nats = Number(readFileSync(join(dir, "nats", "nats.pid"), "utf8").trim());
    if (cmdlineOf(nats).includes("nats-server")) {
      await stopPid(nats);
      stopped.push("nats-server");
    }
  } catch {
    // no broker was started
  }
  return stopped;
}

/** Stop everything a detached lab started, from its state file. */
export async function stopLabFromState(dir: string): Promise<string[]> {
  const s = readLabState(dir);
  if (!s) return [];
  const stopped: string[] = [];
  if (s.provisioner && isAlive(s.provisioner.pid)) {
    await stopPid(s.provisioner.pid, 40_000);
    stopped.push("provisioner");
  }
  if (s.machines) {
    // machines first (the site's and the nodes'), each shut down cleanly (a cut after a minute), then their network
    const all = labMachinesOf(s);
    await Promise.all(
      all.map(async (n) => {
        // a machine whose supervisor was killed still runs: it is cut
        if (!machineSupervisor(n.machine.dir) && !machineLeader(n.machine.dir)) return;
        await powerOffMachine(n.machine.dir, n.pid);
        stopped.push(`machine ${n.identity}`);
      }),
    );
    if ((await teardownMachines(s.machines, all)).length) stopped.push("relays", "package server");
  }
  const servers = labPids(s).filter((p) => p.name.startsWith("muster server") || p.name === "webhook receiver" || p.name.startsWith("registry ") || p.name.startsWith("web console "));
  await Promise.all(servers.map(async (p) => isAlive(p.pid) && (await stopPid(p.pid), stopped.push(p.name))));
  await Promise.all(s.masters.map(async (m) => (await stopDetachedPuppetserver(m.dir)) && stopped.push(`puppetserver ${m.identity}`)));
  if (isAlive(s.natsPid)) {
    await stopPid(s.natsPid);
    stopped.push("nats-server");
  }
  return stopped;
}
