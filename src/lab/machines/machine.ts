import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { appendFileSync, closeSync, existsSync, mkdirSync, openSync, readFileSync, readdirSync, readlinkSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { join } from "node:path";
import { MusterError } from "../../errors.js";
import { cmdlineOf, isAlive } from "../processes.js";

// One lab machine: a whole Debian system with systemd as PID 1, booted from a copy-on-write overlay
// of the cached image with systemd-nspawn (or, with --vm, a QEMU guest with its own kernel on a
// qcow2 overlay), on the lab's bridge. A small supervisor process (`muster lab machine-run DIR`)
// is the machine's power: it boots the machine, boots it again when it reboots, and powers it off
// cleanly on SIGTERM. Killing the machine's init (nspawn) or qemu is a power cut.
//
// <dir>/machine.json   what the machine is (MachineConfig)
// <dir>/upper, work    nspawn: the overlay's writable layer (the machine's disk); root: its mount
// <dir>/disk.qcow2     vm: the disk, backed by the image; seed.iso: the cidata seed
// <dir>/seed/          the NoCloud seed (meta-data, network-config, user-data)
// <dir>/console.log    the console, every boot appended
// <dir>/boots.jsonl    one line per boot: when it started and why
// <dir>/leader.pid     while it runs: the machine's init (nspawn) or qemu, as the host sees it

export type MachineKind = "nspawn" | "vm";

export interface MachineConfig {
  identity: string;
  serial: number;
  kind: MachineKind;
  /** nspawn: the image's root directory; vm: the image's base disk (qcow2). */
  image: string;
  /** The lab's network namespace (/run/netns/<name>). */
  netns: string;
  bridge: string;
  address: string;
  mac: string;
  /** systemd-nspawn's machine name (also its veth's). */
  name: string;
  /** vm only. */
  /** monitor: qemu's monitor socket (under /run: a Unix socket's path is short). */
  vm?: { kernel: string; initrd: string; memoryMb: number; tap: string; monitor?: string };
}

export const machineFile = (dir: string) => join(dir, "machine.json");
export const leaderFile = (dir: string) => join(dir, "leader.pid");

export function readMachine(dir: string): MachineConfig {
  try {
    return JSON.parse(readFileSync(machineFile(dir), "utf8")) as MachineConfig;
  } catch (e) {
    throw new MusterError("MUSTER_USAGE", `${dir} is not a lab machine (no readable machine.json): ${(e as Error).message}`);
  }
}

export const supervisorFile = (dir: string) => join(dir, "supervisor.pid");

/** The live process a pid file names, if any. */
function pidFrom(file: string): number | undefined {
  try {
    const pid = Number(readFileSync(file, "utf8").trim());
    return isAlive(pid) ? pid : undefined;
  } catch {
    return undefined; // no such file
  }
}

/**
 * Whether `pid` is this machine's leader and not a process that took its pid since: an nspawn
 * machine's init is in a PID namespace other than ours; a VM's is qemu.
 */
function isMachineLeader(pid: number, kind: MachineKind | undefined): boolean {
  if (kind === "vm") return cmdlineOf(pid).startsWith("qemu-system");
  try {
    return readlinkSync(`/proc/${pid}/ns/pid`) !== readlinkSync("/proc/self/ns/pid");
  } catch {
    return false; // gone
  }
}

/** The machine's init (nspawn) or qemu process on the host, while it runs. */
export function machineLeader(dir: string): number | undefined {
  const pid = pidFrom(leaderFile(dir));
  if (pid === undefined) return undefined;
  let kind: MachineKind | undefined;
  try {
    kind = (JSON.parse(readFileSync(machineFile(dir), "utf8")) as MachineConfig).kind;
  } catch {
    // no config: judge it as nspawn
  }
  return isMachineLeader(pid, kind) ? pid : undefined;
}

/** The machine's power supervisor (`muster lab machine-run DIR`), while it runs. */
export function machineSupervisor(dir: string): number | undefined {
  const pid = pidFrom(supervisorFile(dir));
  return pid !== undefined && cmdlineOf(pid).split(" ").includes("machine-run") ? pid : undefined;
}

/**
 * Take the machine's power: one supervisor per machine, or two would boot one disk twice. A
 * supervisor file whose process is gone (killed outright) is stale.
 */
function claimPower(dir: string): void {
  for (let i = 0; i < 2; i++) {
    try {
      writeFileSync(supervisorFile(dir), `${process.pid}\n`, { flag: "wx" });
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

/** A mount point as /proc/self/mountinfo writes it: space, tab, newline and backslash as octal escapes. */
export function decodeMountPath(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/** Every mount point in this process's mount namespace. */
function mountPoints(): string[] {
  return readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .map((l) => l.split(" ")[4])
    .filter((m): m is string => !!m)
    .map(decodeMountPath);
}

/** Whether `path` is a mount point (in this process's mount namespace). */
export function isMounted(path: string): boolean {
  return mountPoints().includes(path);
}

/** Unmount everything mounted under `dir` (deepest first): a lab's machines' roots, before its directory is deleted. */
export function unmountUnder(dir: string): void {
  const prefix = dir.endsWith("/") ? dir : `${dir}/`;
  const under = () => mountPoints().filter((m) => m.startsWith(prefix)).sort((a, b) => b.length - a.length);
  for (let i = 0; i < 5 && under().length; i++) for (const m of under()) spawnSync("umount", i < 3 ? [m] : ["--lazy", m]);
}

/** The overlay that is the machine's root: the image below, the machine's own disk above. */
export function mountRoot(m: MachineConfig, dir: string): string {
  const root = join(dir, "root");
  for (const d of ["upper", "work", "root"]) mkdirSync(join(dir, d), { recursive: true });
  if (!isMounted(root)) {
    const r = spawnSync("mount", ["-t", "overlay", "overlay", "-o", `lowerdir=${m.image},upperdir=${join(dir, "upper")},workdir=${join(dir, "work")}`, root], { encoding: "utf8" });
    if (r.status !== 0) throw new MusterError("MUSTER_USAGE", `cannot mount ${m.identity}'s root (overlayfs): ${(r.stderr || r.error?.message || "").trim()}`);
  }
  return root;
}

export function unmountRoot(dir: string): void {
  const root = join(dir, "root");
  for (let i = 0; i < 50 && isMounted(root); i++) {
    const r = spawnSync("umount", [root], { encoding: "utf8" });
    if (r.status === 0) continue;
    spawnSync("umount", ["--lazy", root]); // something still holds it (a shell in it): detach it
  }
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
      writeFileSync(leaderFile(dir), `${leader ?? pid}\n`);
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

/** Cut the power: the machine's init (and so every process in it) or qemu, killed outright. */
export function powerCut(dir: string): boolean {
  const pid = machineLeader(dir);
  if (!pid) return false;
  process.kill(pid, "SIGKILL");
  return true;
}

/**
 * Run a command inside a running nspawn machine, as root, in all its namespaces (no sshd, no
 * network needed). For a VM use ssh.
 */
export function machineExecArgv(dir: string, argv: string[]): string[] {
  const m = readMachine(dir);
  if (m.kind !== "nspawn") throw new MusterError("MUSTER_USAGE", `${m.identity} is a QEMU machine: reach it with \`muster ssh -I ${m.identity}\``);
  const pid = machineLeader(dir);
  if (!pid) throw new MusterError("MUSTER_USAGE", `${m.identity} is not running (power it on with \`muster lab power on ${m.identity}\`)`);
  return ["nsenter", `--target=${pid}`, "--all", "--", "/usr/bin/env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "HOME=/root", ...argv];
}

/** Run a command in the machine and collect what it printed. */
export function machineExec(dir: string, argv: string[], timeoutMs = 120_000): { status: number | null; stdout: string; stderr: string } {
  const [cmd, ...args] = machineExecArgv(dir, argv) as [string, ...string[]];
  const r = spawnSync(cmd, args, { encoding: "utf8", timeout: timeoutMs, maxBuffer: 16 << 20 });
  return { status: r.status, stdout: r.stdout ?? "", stderr: r.stderr ?? (r.error?.message ?? "") };
}

/** Whether the machine's disk exists (a removed machine has none). */
export function machineExists(dir: string): boolean {
  return existsSync(machineFile(dir));
}
