import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readlinkSync } from "node:fs";
import { join } from "node:path";
import { MusterError } from "../../errors.js";
import { cmdlineOf, livePidOf, processState } from "../processes.js";

// One lab machine: a whole Debian system with systemd as PID 1, booted from a copy-on-write overlay
// of the cached image with systemd-nspawn (or, with --vm, a QEMU guest with its own kernel on a
// qcow2 overlay), on the lab's bridge. A small supervisor process (`muster lab machine-run DIR`,
// supervisor.ts) is the machine's power: it boots the machine, boots it again when it reboots, and
// powers it off cleanly on SIGTERM. Killing the machine's init (nspawn) or qemu is a power cut.
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
    return livePidOf(readFileSync(file, "utf8"));
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
  return pid !== undefined && isSupervisorOf(pid, dir) ? pid : undefined;
}

/** Whether `pid` runs `muster lab machine-run DIR` for this machine's directory (another machine's supervisor is not this one's). */
export function isSupervisorOf(pid: number, dir: string): boolean {
  const words = cmdlineOf(pid).split(" ");
  return words.includes("machine-run") && words.includes(dir);
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

/**
 * Keeps an nsenter from hanging its machine's shutdown; returns the function that stops watching.
 * nsenter waits for its child and, when the child is stopped, stops itself until continued. A
 * machine shutting down stops every process in it (systemd-shutdown's kill(-1, SIGSTOP) before
 * its SIGTERM and SIGKILL), so a command run in it at that moment left nsenter stopped for good:
 * its child, killed, stayed a zombie nobody reaped, the machine's PID namespace could not end, and
 * nspawn never exited (seen here: a master rebooted while `cloud-init status` was being asked sat
 * in systemd-shutdown until the nsenter was continued by hand). So a stopped nsenter is continued.
 */
export function keepContinued(pid: number | undefined, everyMs = 250): () => void {
  if (pid === undefined) return () => undefined;
  const timer = setInterval(() => {
    if (processState(pid) !== "T") return;
    try {
      process.kill(pid, "SIGCONT");
    } catch {
      // gone meanwhile
    }
  }, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * The same without blocking (the lab waits on many machines at once): `input` goes to the command's
 * stdin. A machine that is off or gone answers status null with why, rather than throwing.
 */
export function machineExecAsync(dir: string, argv: string[], o: { input?: string; timeoutMs?: number } = {}): Promise<{ status: number | null; stdout: string; stderr: string }> {
  let full: string[];
  try {
    full = machineExecArgv(dir, argv);
  } catch (e) {
    return Promise.resolve({ status: null, stdout: "", stderr: (e as Error).message });
  }
  return new Promise((resolve) => {
    const [cmd, ...args] = full as [string, ...string[]];
    const child = spawn(cmd, args, { stdio: ["pipe", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    const timer = setTimeout(() => child.kill("SIGKILL"), o.timeoutMs ?? 120_000);
    const unwatch = keepContinued(child.pid);
    const done = () => (clearTimeout(timer), unwatch());
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.once("error", (e) => (done(), resolve({ status: null, stdout, stderr: e.message })));
    child.once("close", (code) => (done(), resolve({ status: code, stdout, stderr })));
    child.stdin.once("error", () => undefined); // a command that exits without reading its input
    child.stdin.end(o.input ?? "");
  });
}

/** Whether the machine's disk exists (a removed machine has none). */
export function machineExists(dir: string): boolean {
  return existsSync(machineFile(dir));
}
