import { existsSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { isAlive, stopPid } from "../processes.js";
import { labNetnsName, labSocketDir } from "./addresses.js";
import { machineFile, machineLeader, machineSupervisor, unmountUnder, type MachineConfig } from "./machine.js";
import { deleteLabNetwork, netnsPath, netnsPids, removeTap } from "./network.js";
import { powerOffMachine } from "./power.js";
import type { LabMachinesState, LabNodeMachine } from "./state.js";

// Taking the machines' side of a lab down: what a lab that died (or whose `lab up` was cut short)
// leaves, found from the lab directory alone, and what a lab that stops names in its state.

/**
 * What a lab that died (or whose `lab up` was interrupted before it wrote its state) leaves of
 * its machines: each one off and unmounted, its network and relays' sockets gone. Safe to call
 * on a lab that stopped cleanly: nothing is left to do.
 */
export async function clearMachineRemains(labDir: string): Promise<string[]> {
  const dir = resolve(labDir);
  const cleared: string[] = [];
  const machines = join(dir, "machines");
  if (existsSync(machines)) {
    await Promise.all(
      readdirSync(machines).map(async (d) => {
        const m = join(machines, d);
        if (!machineSupervisor(m) && !machineLeader(m)) return;
        await powerOffMachine(m, undefined, { graceMs: 20_000 });
        cleared.push(`machine ${d}`);
      }),
    );
    unmountUnder(machines);
  }
  const netns = labNetnsName(dir);
  const socketDir = labSocketDir(netns);
  if (existsSync(netnsPath(netns)) || existsSync(socketDir)) {
    // the relays inside it; the host-side halves die with their sockets' peers
    for (const pid of netnsPids(netns)) await stopPid(pid, 2000, { group: true });
    deleteLabNetwork(netns);
    rmSync(socketDir, { recursive: true, force: true });
    cleared.push(`network ${netns}`);
  }
  return cleared;
}

/** Stop the machines' relays, package server and network (after the machines are off). */
export async function teardownMachines(ms: LabMachinesState, nodes: { machine?: LabNodeMachine }[]): Promise<string[]> {
  const stopped: string[] = [];
  for (const pid of [...ms.relays.flatMap((r) => r.pids), ...nodes.flatMap((n) => n.machine?.relayPids ?? []), ms.packages.pid]) {
    if (isAlive(pid)) {
      await stopPid(pid, 3000, { group: true }); // socat forks a child per connection: the group
      stopped.push(String(pid));
    }
  }
  if (ms.kind === "vm") for (const d of machineDirs(ms)) removeTap(ms.netns, readMachineTap(d));
  deleteLabNetwork(ms.netns);
  rmSync(ms.socketDir, { recursive: true, force: true });
  return stopped;
}

function machineDirs(ms: LabMachinesState): string[] {
  const root = resolve(ms.packages.dir, "..", "machines");
  return existsSync(root) ? readdirSync(root).map((d) => join(root, d)).filter((d) => statSync(d).isDirectory()) : [];
}

function readMachineTap(dir: string): string {
  try {
    return (JSON.parse(readFileSync(machineFile(dir), "utf8")) as MachineConfig).vm?.tap ?? "";
  } catch {
    return "";
  }
}
