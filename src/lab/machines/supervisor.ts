import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { appendFileSync, closeSync, openSync, readFileSync, readdirSync, readlinkSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { join } from "node:path";
import { MusterError } from "../../errors.js";
import { pidFileText } from "../processes.js";
import { leaderFile, machineSupervisor, mountRoot, readMachine, supervisorFile, unmountRoot, type MachineConfig, type MachineKind } from "./machine.js";

// A machine's power supervisor (`muster lab machine-run DIR`, machine.ts says what a machine is):
// it takes the machine's power, boots it, boots it again each time it reboots, and powers it off
// cleanly on SIGTERM. The command that boots it once and what happens when a boot ends are pure.

/**
 * Take the machine's power: one supervisor per machine, or two would boot one disk twice. A
 * supervisor file whose process is gone (killed outright) is stale.
 */
function claimPower(dir: string): void {
  for (let i = 0; i < 2; i++) {
    try {
      writeFileSync(supervisorFile(dir), pidFileText(process.pid), { flag: "wx" });
      return;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      const other = machineSupervisor(dir);
      if (other && other !== process.pid) throw new MusterError("MUSTER_USAGE", `${dir} is already powered by supervisor ${other}`);
      rmSync(supervisorFile(dir), { force: true });
    }
  }
  throw new MusterError("MUSTER_USAGE", `cannot take ${dir}'s power: ${supervisorFile(dir)} keeps coming back`);
}

/**
 * systemd-nspawn keeps a lock per root directory in /run/systemd/nspawn/locks; an nspawn that was
 * killed outright leaves it, and the next boot says the root is busy. Only the supervisor boots
 * this root, so a lock it finds before booting is stale.
 */
function clearStaleLock(root: string): void {
  try {
    const st = statSync(root); // nspawn names the lock by the raw st_dev and st_ino
    rmSync(`/run/systemd/nspawn/locks/inode-${st.dev}:${st.ino}`, { force: true });
  } catch {
    // no lock directory: nothing to clear
  }
}

const monitorSocket = (m: MachineConfig, dir: string) => m.vm?.monitor ?? join(dir, "monitor.sock");

/** The command that boots the machine once (pure). */
export function bootArgv(m: MachineConfig, dir: string): string[] {
  if (m.kind === "nspawn") {
    return [
      "nsenter",
      `--net=${m.netns}`,
      "systemd-nspawn",
      "--boot",
      // PID 1 of this host is not systemd: no machined to register with, no scope to make
      "--register=no",
      "--keep-unit",
      "--resolv-conf=off",
      "--link-journal=no",
      `--machine=${m.name}`,
      `--directory=${join(dir, "root")}`,
      `--network-bridge=${m.bridge}`,
    ];
  }
  const vm = m.vm!;
  return [
    "nsenter",
    `--net=${m.netns}`,
    "qemu-system-x86_64",
    "-name",
    m.name,
    // /dev/kvm here only runs PVM guest kernels: software emulation, with a translation cache
    // small enough that qemu stays under 0.5 GB
    "-accel",
    "tcg,tb-size=128",
    "-m",
    String(vm.memoryMb),
    "-smp",
    "1",
    "-nographic",
    "-nodefaults",
    "-serial",
    "stdio",
    "-kernel",
    vm.kernel,
    "-initrd",
    vm.initrd,
    "-append",
    "root=/dev/vda rw console=ttyS0 net.ifnames=0 quiet",
    "-drive",
    `file=${join(dir, "disk.qcow2")},if=virtio,format=qcow2`,
    "-drive",
    `file=${join(dir, "seed.iso")},if=virtio,format=raw,readonly=on`,
    "-netdev",
    `tap,id=n0,ifname=${vm.tap},script=no,downscript=no`,
    "-device",
    `virtio-net-pci,netdev=n0,mac=${m.mac}`,
    "-monitor",
    `unix:${monitorSocket(m, dir)},server,nowait`,
  ];
}

/**
 * The machine's init: the child of nspawn in a PID namespace of its own (nspawn first forks a
 * helper in ours, which starts the init and exits).
 */
function containerInit(pid: number): number | undefined {
  try {
    const ours = readlinkSync("/proc/self/ns/pid");
    for (const t of readdirSync(`/proc/${pid}/task`)) {
      const kids = readFileSync(`/proc/${pid}/task/${t}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number);
      for (const k of kids) {
        try {
          if (readlinkSync(`/proc/${k}/ns/pid`) !== ours) return k;
        } catch {
          // that child is gone already
        }
      }
    }
  } catch {
    // nspawn is gone
  }
  return undefined;
}

/** nspawn's exit code when the machine asked to reboot. */
const REBOOT = 133;

/**
 * What the supervisor does when a boot ends (pure): boot again when the machine rebooted and
 * nobody asked it to stop; otherwise the machine is off (powered off, power cut, or it failed).
 */
export function afterBoot(kind: MachineKind, exitCode: number | null, stopping: boolean): "boot again" | "off" {
  if (stopping) return "off";
  // qemu runs with -no-reboot unset: a guest reboot stays inside qemu; only nspawn exits to reboot
  return kind === "nspawn" && exitCode === REBOOT ? "boot again" : "off";
}

function logBoot(dir: string, why: string): void {
  appendFileSync(join(dir, "boots.jsonl"), `${JSON.stringify({ at: Date.now(), why })}\n`);
  appendFileSync(join(dir, "console.log"), `\n----- muster lab: power on (${why}) at ${new Date().toISOString()} -----\n`);
}

/**
 * The machine's power: boot it, boot it again each time it reboots, stop when it powers off or
 * loses power. SIGTERM powers it off cleanly (nspawn: SIGRTMIN+3 to its init; vm: ACPI). Resolves
 * with the last boot's exit code.
 */
export async function superviseMachine(dir: string): Promise<number | null> {
  // Signals first: a SIGTERM while the root is being mounted still powers the machine off.
  let stopping = false;
  let child: ChildProcess | undefined;
  let m: MachineConfig | undefined;
  const powerOff = () => {
    stopping = true;
    if (!child || !m) return;
    if (m.kind === "vm") sendMonitor(monitorSocket(m, dir), "system_powerdown").catch(() => child?.kill("SIGTERM"));
    else child.kill("SIGTERM");
  };
  process.on("SIGTERM", powerOff);
  process.on("SIGINT", powerOff);
  m = readMachine(dir);
  claimPower(dir);
  try {
    return await runBoots(m, dir, () => stopping, (c) => (child = c), powerOff);
  } finally {
    rmSync(supervisorFile(dir), { force: true });
    process.off("SIGTERM", powerOff);
    process.off("SIGINT", powerOff);
  }
}

async function runBoots(m: MachineConfig, dir: string, stopping: () => boolean, setChild: (c: ChildProcess | undefined) => void, powerOff: () => void): Promise<number | null> {
  if (m.kind === "nspawn") mountRoot(m, dir);
  let why = "power on";
  let code: number | null = null;
  try {
    for (;;) {
      if (stopping()) break; // powered off before it booted
      if (m.kind === "nspawn") clearStaleLock(join(dir, "root"));
      logBoot(dir, why);
      const out = openSync(join(dir, "console.log"), "a");
      const [cmd, ...args] = bootArgv(m, dir) as [string, ...string[]];
      let child: ChildProcess;
      try {
        child = spawn(cmd, args, { stdio: ["ignore", out, out] });
        setChild(child);
      } finally {
        closeSync(out);
      }
      const exited = new Promise<number | null>((resolve) => {
        child.once("exit", (c, sig) => resolve(c ?? (sig ? 128 : null)));
        child.once("error", (e) => {
          appendFileSync(join(dir, "console.log"), `muster lab: cannot run ${cmd}: ${e.message}\n`);
          resolve(127);
        });
      });
      // nspawn's child is the machine's init; qemu is the machine
      let leader: number | undefined;
      const pid = child.pid;
      if (pid === undefined) {
        code = await exited; // it never ran (the error above says why): the machine stays off
        break;
      }
      while (m.kind === "nspawn" && !leader && child.exitCode === null && child.signalCode === null) {
        leader = containerInit(pid);
        if (!leader) await new Promise((r) => setTimeout(r, 10)); // the kernel announces no fork to us
      }
      writeFileSync(leaderFile(dir), pidFileText(leader ?? pid));
      if (stopping()) powerOff(); // SIGTERM arrived while booting
      code = await exited;
      rmSync(leaderFile(dir), { force: true });
      setChild(undefined);
      if (afterBoot(m.kind, code, stopping()) === "off") break;
      why = "reboot";
    }
  } finally {
    rmSync(leaderFile(dir), { force: true });
    if (m.kind === "nspawn") unmountRoot(dir);
    appendFileSync(join(dir, "console.log"), `\n----- muster lab: off (${stopping() ? "powered off" : `exit ${code}`}) at ${new Date().toISOString()} -----\n`);
  }
  return code;
}

/** One command to qemu's human monitor (system_powerdown: the ACPI power button). */
function sendMonitor(socket: string, command: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const c = createConnection(socket, () => c.end(`${command}\n`, () => resolve()));
    c.once("error", reject);
  });
}

