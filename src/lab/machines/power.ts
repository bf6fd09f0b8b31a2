import { existsSync, rmSync } from "node:fs";
import { basename, join } from "node:path";
import { MusterError } from "../../errors.js";
import { isAlive, spawnMuster, stopPid, type MusterProcess } from "../processes.js";
import { makeRoomForMachines } from "./host.js";
import { isMounted, isSupervisorOf, machineLeader, machineSupervisor, powerCut, unmountRoot } from "./machine.js";

// A machine's power switch as the lab and the operator use it (`lab power`, `lab remove`, `lab
// down`): on, off cleanly or cut, and its disk deleted as a cloud deletes a terminated instance's.

/** Power a machine on: its supervisor boots it (and boots it again when it reboots). */
export function powerOnMachine(dir: string, detached: boolean): MusterProcess {
  if (machineLeader(dir) || machineSupervisor(dir)) throw new MusterError("MUSTER_USAGE", `${basename(dir)} is already running`);
  makeRoomForMachines();
  return spawnMuster(["lab", "machine-run", dir], { logFile: join(dir, "supervisor.log"), detached });
}

/**
 * Power a machine off and wait until it is off: cleanly (the machine shuts down) or, with `cut`,
 * by cutting the power. A clean shutdown that takes longer than `graceMs` becomes a cut. Works
 * when the supervisor is gone too (killed outright): the machine is cut and its root unmounted.
 */
export async function powerOffMachine(dir: string, supervisorPid?: number, o: { cut?: boolean; graceMs?: number } = {}): Promise<void> {
  // the pid the lab's state remembers only while it is still this machine's supervisor: pids come round again
  const sup = machineSupervisor(dir) ?? (supervisorPid && isSupervisorOf(supervisorPid, dir) ? supervisorPid : undefined);
  if (o.cut || !sup) powerCut(dir);
  else process.kill(sup, "SIGTERM");
  const deadline = Date.now() + (o.graceMs ?? 60_000);
  const on = () => (sup !== undefined && isAlive(sup)) || machineLeader(dir) !== undefined;
  while (on() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100)); // not our child when detached: no exit event
  if (on()) {
    powerCut(dir);
    if (sup) await stopPid(sup, 10_000);
  }
  unmountRoot(dir); // the supervisor does it, unless it was killed
}

/** Delete a powered-off machine's disk and everything else of it (as a cloud deletes a terminated instance's volume). */
export async function destroyMachineDisk(dir: string): Promise<void> {
  powerCut(dir);
  unmountRoot(dir);
  const root = join(dir, "root");
  if (existsSync(root) && isMounted(root)) throw new MusterError("MUSTER_USAGE", `${root} is still mounted; not deleting through it (umount it, then try again)`);
  rmSync(dir, { recursive: true, force: true });
}
