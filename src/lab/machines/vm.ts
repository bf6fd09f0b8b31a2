import { execFile } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readdirSync, realpathSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { MusterError } from "../../errors.js";

// QEMU machines (`--vm`): the same image as a whole virtual machine with its own kernel. The root
// directory becomes an ext4 disk once (mke2fs -d copies a directory into a new file system, no
// mount needed), converted to qcow2; each machine boots a qcow2 overlay backed by it, with its
// NoCloud seed on a `cidata` ISO as on a cloud. Software emulation only on this host (its /dev/kvm
// runs PVM guest kernels alone), so a machine takes minutes to boot: one or two at a time.

const run = promisify(execFile);

/** Disk size of the base image: the root plus room for the package, Puppet and logs. */
const DISK_SIZE = "3G";
const MEMORY_MB = 768;

/** What a QEMU machine boots: the image as a base disk, with its kernel and initramfs. */
export interface VmImage {
  disk: string;
  kernel: string;
  initrd: string;
}

/** The base disk, kernel and initramfs of a VM image (built next to the image's root, once). */
export async function vmDisk(image: { key: string; root: string }, progress: (l: string) => void): Promise<VmImage> {
  const dir = join(dirname(image.root), "vm");
  const out = { disk: join(dir, "base.qcow2"), kernel: join(dir, "vmlinuz"), initrd: join(dir, "initrd.img") };
  if (existsSync(join(dir, "done"))) return out;
  const kernels = readdirSync(join(image.root, "boot")).filter((f) => f.startsWith("vmlinuz-"));
  if (!kernels.length) throw new MusterError("MUSTER_USAGE", `the VM image ${image.key} has no kernel in /boot (was it built with linux-image-amd64?)`);
  const version = kernels.sort().at(-1)!.slice("vmlinuz-".length);
  const work = `${dir}.${process.pid}`;
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  try {
    progress(`making the VM disk from image ${image.key} (mke2fs -d, then qcow2)`);
    copyFileSync(realpathSync(join(image.root, "boot", `vmlinuz-${version}`)), join(work, "vmlinuz"));
    copyFileSync(realpathSync(join(image.root, "boot", `initrd.img-${version}`)), join(work, "initrd.img"));
    const raw = join(work, "base.raw");
    await run("mke2fs", ["-q", "-t", "ext4", "-L", "root", "-d", image.root, raw, DISK_SIZE]);
    await run("qemu-img", ["convert", "-O", "qcow2", raw, join(work, "base.qcow2")]);
    rmSync(raw);
    writeFileSync(join(work, "done"), `${version}\n`);
    try {
      renameSync(work, dir);
    } catch (e) {
      if (!existsSync(join(dir, "done"))) throw e;
    }
    return out;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** A machine's own disk (a qcow2 overlay of the base) and its cidata seed ISO. */
export async function prepareVmDisk(dir: string, base: VmImage, tap: string): Promise<{ kernel: string; initrd: string; memoryMb: number; tap: string }> {
  await run("qemu-img", ["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", base.disk, join(dir, "disk.qcow2")]);
  const seed = join(dir, "seed");
  await run("cloud-localds", ["--network-config", join(seed, "network-config"), join(dir, "seed.iso"), join(seed, "user-data"), join(seed, "meta-data")]);
  return { kernel: base.kernel, initrd: base.initrd, memoryMb: MEMORY_MB, tap };
}
