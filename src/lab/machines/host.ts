import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { MusterError } from "../../errors.js";
import type { MachineKind } from "./machine.js";

// What this host must have before the lab starts a machine: root, the tools (by the Debian package
// that has them), overlayfs and namespaces; and the Debian release the image is built from. Each
// check says what to install or do, before anything starts.

/** Host tools the machines need, by the Debian package that has them. */
export function machineTools(kind: MachineKind): Record<string, string> {
  return {
    ...(kind === "nspawn" ? { "systemd-nspawn": "systemd-container" } : { "qemu-system-x86_64": "qemu-system-x86", "qemu-img": "qemu-utils", "cloud-localds": "cloud-image-utils" }),
    mmdebstrap: "mmdebstrap",
    socat: "socat",
    ip: "iproute2",
    nsenter: "util-linux",
    "ssh-keygen": "openssh-client",
    ssh: "openssh-client",
  };
}

/** Check before anything starts that this host can run machines: root, the tools, overlayfs. */
export function checkMachineHost(kind: MachineKind): void {
  if (process.getuid?.() !== 0) throw new MusterError("MUSTER_USAGE", "lab machines need root (network namespaces, overlay mounts, systemd-nspawn/qemu): run `muster lab up --machines N` as root, or use process nodes (--nodes N)");
  requireTools(machineTools(kind));
  if (kind === "nspawn" && !readFileSync("/proc/filesystems", "utf8").includes("overlay")) {
    throw new MusterError("MUSTER_USAGE", "lab machines boot from overlayfs copies of one image, and this kernel has no overlay file system (modprobe overlay)");
  }
  // Root is not always enough (a container without CAP_SYS_ADMIN): try what the lab does first.
  const probe = spawnSync("unshare", ["--net", "--mount", "true"], { encoding: "utf8" });
  if (probe.status !== 0) {
    throw new MusterError("MUSTER_USAGE", `lab machines need network and mount namespaces, and this host refuses them (\`unshare --net --mount true\`: ${(probe.stderr || probe.error?.message || `exit ${probe.status}`).trim()}); in a container, give it CAP_SYS_ADMIN, or use process nodes (--nodes N)`);
  }
}

/** Fails with what to install when a host tool is missing. */
export function requireTools(tools: Record<string, string>): void {
  const missing = Object.entries(tools).filter(([bin]) => !onPath(bin));
  if (missing.length) {
    throw new MusterError("MUSTER_USAGE", `lab machines need ${missing.map(([bin]) => bin).join(", ")}: apt-get install ${[...new Set(missing.map(([, pkg]) => pkg))].join(" ")} (./scripts/setup.sh installs them)`);
  }
}

export function onPath(bin: string): boolean {
  return (process.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin")
    .split(":")
    .concat(["/usr/sbin", "/sbin"])
    .some((d) => d && existsSync(join(d, bin)));
}

/** The host's Debian release and apt sources, which the image is built from. */
export function hostRelease(): { release: string; sources: string } {
  const os = readFileSync("/etc/os-release", "utf8");
  const release = /^VERSION_CODENAME=(.+)$/m.exec(os)?.[1]?.replace(/"/g, "");
  if (!release) throw new MusterError("MUSTER_USAGE", "lab machines need a Debian host: /etc/os-release names no VERSION_CODENAME");
  for (const f of ["/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"]) {
    if (existsSync(f) && /\S/.test(readFileSync(f, "utf8").replace(/^#.*$/gm, ""))) return { release, sources: readFileSync(f, "utf8") };
  }
  return { release, sources: `deb http://deb.debian.org/debian ${release} main\n` };
}

/** What the inotify limits (per user, and every machine's systemd runs as root here) must be at least, for a few hundred machines. */
export const INOTIFY_FLOOR = { max_user_instances: 1024, max_user_watches: 524_288 } as const;

/**
 * The inotify limits to raise, given the host's: each machine's systemd and journald take several
 * inotify instances of root's, and Debian's default of 128 ran out at about 20 machines ("Failed to
 * allocate manager object: Too many open files", the machine never booted). Never lowered. Pure.
 */
export function inotifyRaises(current: Partial<Record<keyof typeof INOTIFY_FLOOR, number>>): Partial<Record<keyof typeof INOTIFY_FLOOR, number>> {
  const out: Partial<Record<keyof typeof INOTIFY_FLOOR, number>> = {};
  for (const k of Object.keys(INOTIFY_FLOOR) as (keyof typeof INOTIFY_FLOOR)[]) {
    const v = current[k];
    if (v !== undefined && v < INOTIFY_FLOOR[k]) out[k] = INOTIFY_FLOOR[k];
  }
  return out;
}

const roomMade = new Set<string>();

/**
 * Raises the host's inotify limits where they are below INOTIFY_FLOOR (once per process), saying
 * what it changed; a value that cannot be read or written is left as it is (the machine's own
 * console then says what ran out).
 */
export function makeRoomForMachines(say: (line: string) => void = (l) => process.stderr.write(`${l}\n`), dir = "/proc/sys/fs/inotify"): void {
  if (roomMade.has(dir)) return;
  roomMade.add(dir);
  const read = (k: string) => {
    try {
      return Number(readFileSync(join(dir, k), "utf8").trim());
    } catch {
      return undefined;
    }
  };
  const current = { max_user_instances: read("max_user_instances"), max_user_watches: read("max_user_watches") };
  for (const [k, v] of Object.entries(inotifyRaises(current))) {
    try {
      writeFileSync(join(dir, k), `${v}\n`);
      say(`raised fs.inotify.${k} from ${current[k as keyof typeof current]} to ${v}: every machine's systemd takes inotify instances of root's, and the default runs out at about 20 machines`);
    } catch (e) {
      say(`fs.inotify.${k} is ${current[k as keyof typeof current]} and could not be raised to ${v} (${(e as Error).message}): machines past about 20 may fail to boot with "Too many open files"`);
    }
  }
}
