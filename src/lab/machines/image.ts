import { execFileSync, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { MusterError } from "../../errors.js";
import { isAlive } from "../processes.js";
import { PACKAGE_PORT, RELAY_ADDRESS } from "./addresses.js";
import { hostRelease, requireTools } from "./host.js";
import { lockReleased, takeLock } from "./image-lock.js";
import type { MachineKind } from "./machine.js";
import { buildMirror, MIRROR_KEYRING, MIRROR_PACKAGES, mirrorSources, sourcesForRelease } from "./mirror.js";
import { HOSTS_TEMPLATE, hostsTemplateWith } from "./hosts-template.js";
import { vmDisk, type VmImage } from "./vm.js";

// The lab machines' image: a Debian root file system built with mmdebstrap from Debian's packages
// only (the host's apt mirror, in the release asked for: Debian 13 for the site, the host's own
// otherwise), with systemd, cloud-init, Puppet, Facter, the Nagios plugins and sshd, and nothing of
// muster: the package arrives through cloud-init, as on a cloud machine. An image for the site also
// carries the lab's Debian mirror (mirror.ts) and the site's names. Built once and cached under
// <cache>/<key>/ where the key hashes everything that went into it; every machine boots a
// copy-on-write overlay of it.

/** Bump when the build below changes in a way the spec does not show. */
const BUILDER = 4;

/** Debian packages every lab machine has (a cloud image's worth, plus what the lab's roles use). */
export const MACHINE_PACKAGES = [
  "systemd-sysv",
  "dbus",
  "cloud-init",
  "puppet-agent",
  "facter",
  "monitoring-plugins-basic",
  "openssh-server",
  "sudo",
  "curl",
  "ca-certificates",
  "iproute2",
  "netbase",
  "procps",
  "adduser",
  "python3",
] as const;

/** What a QEMU machine needs besides: its own kernel and an initramfs that finds a virtio disk. */
export const VM_PACKAGES = ["linux-image-amd64", "initramfs-tools", "e2fsprogs"] as const;

export interface ImageSpec {
  release: string;
  /** The apt sources the image is built from (the host's own, as text). */
  sources: string;
  packages: string[];
  /** Files written into the image after the packages (absolute path -> content). */
  files: Record<string, string>;
  /** Files removed from it (keys made at build time that every machine would share). */
  remove: string[];
  /** Units enabled in it. */
  enable: string[];
  /** A kernel and initramfs for QEMU. */
  kernel: boolean;
  /**
   * Debian packages for the lab's mirror (mirror.ts): downloaded at build time, and the image's apt
   * sources name the mirror instead of Debian's. None: the image keeps the sources it was built from.
   */
  mirror: string[];
  /** Lines added to cloud-init's hosts template: the site's names (the lab network has no DNS). */
  hosts: string;
}

export interface MachineImage {
  key: string;
  /** The root file system (a directory). */
  root: string;
  /** Whether this call built it (false: it came from the cache). */
  built: boolean;
  buildSeconds?: number;
  /** du of the root, in bytes. */
  bytes: number;
  /** The lab's Debian mirror built with it (an apt repository), when its spec asked for one. */
  mirror?: string;
}

/** Files the lab puts in its image, and why each one is there. */
export function imageFiles(): Record<string, string> {
  return {
    // The lab network has no metadata service: the NoCloud seed in the machine is all there is.
    // Debian's cloud images manage /etc/hosts the same way, which gives Facter the machine's FQDN.
    "/etc/cloud/cloud.cfg.d/90-muster-lab.cfg": [
      "# muster lab image: instances are configured from a NoCloud seed only",
      "datasource_list: [NoCloud, None]",
      "manage_etc_hosts: true",
      "# C.UTF-8 is built into glibc: no locale to generate in a minimal image",
      "locale: C.UTF-8",
      "",
    ].join("\n"),
    // No router on the lab network: without this, systemd-networkd waits ~13 s at every boot for
    // an IPv6 router advertisement that never comes, and cloud-init waits behind it.
    "/etc/systemd/network/10-cloud-init-host0.network.d/50-muster-lab.conf": "# muster lab: no IPv6 router on the lab network\n[Network]\nIPv6AcceptRA=no\nLinkLocalAddressing=no\n",
    // No DNS server either: lookups fail at once instead of timing out (names come from /etc/hosts).
    "/etc/resolv.conf": "# muster lab: there is no DNS server on the lab network\noptions timeout:1 attempts:1\n",
  };
}

export function machineImageSpec(o: { release: string; sources: string; vm?: boolean; mirror?: readonly string[]; hosts?: string }): ImageSpec {
  const files = imageFiles();
  if (o.vm) files["/etc/fstab"] = "# muster lab VM: the whole disk is the root file system\n/dev/vda / ext4 defaults,errors=remount-ro 0 1\n";
  return {
    release: o.release,
    sources: o.sources,
    packages: [...MACHINE_PACKAGES, ...(o.vm ? VM_PACKAGES : [])],
    files,
    // cloud-init makes each machine its own host keys on first boot
    remove: ["/etc/ssh/ssh_host_*"],
    enable: ["systemd-networkd.service"],
    kernel: Boolean(o.vm),
    mirror: [...(o.mirror ?? [])],
    hosts: o.hosts ?? "",
  };
}

/** The cache key: a hash of everything that goes into the image. */
export function imageKey(spec: ImageSpec): string {
  const h = createHash("sha256").update(JSON.stringify({ builder: BUILDER, ...spec, packages: [...spec.packages].sort() }));
  return `${spec.release}-${spec.kernel ? "vm-" : ""}${h.digest("hex").slice(0, 16)}`;
}

/** mmdebstrap's command line for a spec (the sources come from a file next to the build). */
export function mmdebstrapArgv(spec: ImageSpec, sourcesFile: string, target: string): string[] {
  return ["mmdebstrap", "--variant=minbase", "--mode=root", `--include=${spec.packages.join(",")}`, "--skip=cleanup/reproducible", spec.release, target, sourcesFile];
}

function run(argv: string[], log: (line: string) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const [cmd, ...args] = argv as [string, ...string[]];
    const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"] });
    const tail: string[] = [];
    const take = (b: Buffer) => {
      for (const line of b.toString().split("\n").filter(Boolean)) {
        tail.push(line);
        if (tail.length > 30) tail.shift();
        log(line);
      }
    };
    child.stdout.on("data", take);
    child.stderr.on("data", take);
    child.once("error", (e) => reject(new MusterError("MUSTER_USAGE", `cannot run ${cmd}: ${e.message}`)));
    child.once("close", (code) => (code === 0 ? resolve() : reject(new MusterError("MUSTER_USAGE", `${argv.slice(0, 3).join(" ")} ... failed (exit ${code}):\n${tail.join("\n")}`))));
  });
}

export function duBytes(path: string): number {
  try {
    return Number(execFileSync("du", ["-sb", "--one-file-system", path], { encoding: "utf8" }).split(/\s/)[0]) || 0;
  } catch {
    return 0;
  }
}

/**
 * The image for `spec`, from the cache or built now. A build goes to a private directory and is
 * renamed into place whole, so a build cut short leaves nothing that looks finished; a second
 * process that wants the same image meanwhile waits for the first's build (a lock beside it).
 */
export async function ensureImage(cacheDir: string, spec: ImageSpec, progress: (line: string) => void = () => undefined): Promise<MachineImage> {
  const key = imageKey(spec);
  const dir = join(cacheDir, key);
  const root = join(dir, "root");
  const mirror = spec.mirror.length ? join(dir, "mirror", "repo") : undefined;
  const cached = (): MachineImage => ({ key, root, built: false, bytes: Number(readFileSync(join(dir, "done"), "utf8").trim()) || 0, ...(mirror ? { mirror } : {}) });
  if (existsSync(join(dir, "done"))) return cached();
  mkdirSync(cacheDir, { recursive: true });
  // One build of a key at a time: a second process (the machine tests and the helper's hostile
  // suite want the same image) waits for the first's instead of building its own beside it.
  const lock = join(cacheDir, `.${key}.lock`);
  for (let told = false; !takeLock(lock); told = true) {
    if (!told) progress(`waiting for another process's build of the machine image ${key}`);
    await lockReleased(lock);
    if (existsSync(join(dir, "done"))) return cached();
  }
  try {
    if (existsSync(join(dir, "done"))) return cached();
    return await buildImage(cacheDir, spec, key, progress);
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

async function buildImage(cacheDir: string, spec: ImageSpec, key: string, progress: (line: string) => void): Promise<MachineImage> {
  const dir = join(cacheDir, key);
  const root = join(dir, "root");
  const mirror = spec.mirror.length ? join(dir, "mirror", "repo") : undefined;
  requireTools({ mmdebstrap: "mmdebstrap" });
  const t0 = Date.now();
  clearAbandonedBuilds(cacheDir);
  const work = join(cacheDir, `.${key}.${process.pid}`);
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  try {
    const sources = join(work, spec.sources.includes("Types:") ? "host.sources" : "host.list");
    writeFileSync(sources, spec.sources);
    progress(`building the machine image ${key} with mmdebstrap (${spec.release}, ${spec.packages.length} packages and their dependencies); about a minute, once`);
    let last = 0;
    await run(mmdebstrapArgv(spec, sources, join(work, "root")), (line) => {
      // mmdebstrap's own stages, at most one line every 5 s
      if (/^I: /.test(line) && Date.now() - last > 5000) {
        last = Date.now();
        progress(`  mmdebstrap: ${line.slice(3)}`);
      }
    });
    const r = join(work, "root");
    // still on the build's network (mmdebstrap left the host's resolv.conf): the mirror's packages
    if (spec.mirror.length) {
      const m = await buildMirror({ root: r, out: join(work, "mirror"), release: spec.release, packages: spec.mirror, progress });
      progress(`the lab's Debian mirror for ${spec.release}: ${m.debs} packages (${spec.mirror.join(", ")} and what they need)`);
      writeImageFile(r, MIRROR_KEYRING, m.keyText);
      rmSync(join(r, "etc", "apt", "sources.list"), { force: true });
      rmSync(join(r, "etc", "apt", "sources.list.d"), { recursive: true, force: true });
      writeImageFile(r, "/etc/apt/sources.list.d/debian.sources", mirrorSources(`http://${RELAY_ADDRESS}:${PACKAGE_PORT}`, spec.release));
    }
    if (spec.hosts) {
      const tmpl = join(r, HOSTS_TEMPLATE);
      writeFileSync(tmpl, hostsTemplateWith(readFileSync(tmpl, "utf8"), spec.hosts));
    }
    for (const [path, content] of Object.entries(spec.files)) writeImageFile(r, path, content);
    for (const pattern of spec.remove) removeMatching(r, pattern);
    if (spec.enable.length) await run(["systemctl", `--root=${r}`, "enable", ...spec.enable], () => undefined);
    const bytes = duBytes(r);
    const buildSeconds = (Date.now() - t0) / 1000;
    rmSync(sources);
    writeFileSync(join(work, "build.json"), JSON.stringify({ key, spec: { ...spec, sources: undefined }, buildSeconds, bytes, builtAt: new Date().toISOString() }, null, 2));
    writeFileSync(join(work, "done"), `${bytes}\n`);
    try {
      renameSync(work, dir); // whole, at once
    } catch (e) {
      if (!existsSync(join(dir, "done"))) throw e;
      return { key, root, built: false, bytes }; // another build finished first: keep its image
    }
    progress(`machine image ${key} built in ${buildSeconds.toFixed(0)} s (${(bytes / 1e6).toFixed(0)} MB)`);
    return { key, root, built: true, buildSeconds, bytes, ...(mirror ? { mirror } : {}) };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

function writeImageFile(root: string, path: string, content: string): void {
  const f = join(root, path);
  mkdirSync(dirname(f), { recursive: true });
  rmSync(f, { force: true }); // resolv.conf may be a link
  writeFileSync(f, content);
}

/** Delete the files of `root` that `pattern` names (an absolute path whose last part may hold `*`). */
export function removeMatching(root: string, pattern: string): void {
  const dir = join(root, dirname(pattern));
  const re = new RegExp(`^${basename(pattern).replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*")}$`);
  if (!existsSync(dir)) return;
  for (const f of readdirSync(dir)) if (re.test(f)) rmSync(join(dir, f), { force: true });
}

/**
 * A build killed outright (SIGKILL, a power cut) leaves its private directory, hundreds of MB:
 * one whose builder is gone is removed before the next build.
 */
function clearAbandonedBuilds(cacheDir: string): void {
  for (const d of readdirSync(cacheDir)) {
    const pid = /^\..+\.(\d+)$/.exec(d)?.[1];
    if (pid && !isAlive(Number(pid))) rmSync(join(cacheDir, d), { recursive: true, force: true });
  }
}

/** What an image is for: its Debian release (default the host's), and whether the site's roles boot it (the mirror, the site's names). */
export interface ImageWants {
  release?: string;
  site?: { hosts: string };
}

/** The image spec for a release: built from the host's mirror with the release swapped in. */
export function releaseImageSpec(kind: MachineKind, w: ImageWants = {}): ImageSpec {
  const host = hostRelease();
  const release = w.release ?? host.release;
  return machineImageSpec({ release, sources: sourcesForRelease(host.sources, host.release, release), vm: kind === "vm", ...(w.site ? { mirror: MIRROR_PACKAGES, hosts: w.site.hosts } : {}) });
}

/** The image this kind of machine boots, built on first use (a VM's: with its base disk, kernel and initramfs). */
export async function labImage(kind: MachineKind, cacheDir: string, progress: (l: string) => void, w: ImageWants = {}): Promise<{ image: MachineImage; vm?: VmImage }> {
  const image = await ensureImage(cacheDir, releaseImageSpec(kind, w), progress);
  if (kind !== "vm") return { image };
  return { image, vm: await vmDisk(image, progress) };
}

export function imageInfo(root: string): { bytes: number; builtAt?: string; buildSeconds?: number } | undefined {
  const f = join(dirname(root), "build.json");
  if (!existsSync(f)) return existsSync(root) ? { bytes: statSync(root).size } : undefined;
  return JSON.parse(readFileSync(f, "utf8")) as { bytes: number; builtAt?: string; buildSeconds?: number };
}
