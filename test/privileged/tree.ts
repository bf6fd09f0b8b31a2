import { execFile, spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { labImage } from "../../src/lab/machines/image.js";
import { repoRoot } from "../support/collective.js";

// A Debian system of its own for the privileged helper to run in as real root: the lab's machine
// image (src/lab/machines/image.ts: mmdebstrap from Debian's packages, with puppet-agent and facter,
// so /etc/puppet, /var/cache/puppet, /var/lib/puppet and the dpkg database are as Debian makes
// them; cached under .muster/images, the one the machine tests boot) as the lower layer of an
// overlay, mounted in a mount, PID and network namespace of its own and entered with chroot. The
// node runtime and the checkout (dist/, node_modules) are bound in read-only at their own paths.
// Nothing a test does there touches this machine's /etc, dpkg or Puppet; the namespace's first
// process reads its stdin, and when this process goes (or closes it), the kernel ends every
// process in the namespace and the mounts with it.

const run = promisify(execFile);

/** Where the node binary is inside the tree. */
export const TREE_NODE = "/opt/muster-test/node";
/** The same PATH a root shell has on Debian. */
const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

export interface Tree {
  /** The host's path to `p` inside the tree (through /proc/<pid>/root: an absolute link inside resolves on the host, so lstat, never follow). */
  host(p: string): string;
  /** Runs argv inside the tree, as root unless `uid` (then setpriv: that uid, its group, no other groups). */
  run(argv: string[], o?: { uid?: number; gid?: number; groups?: number[]; env?: Record<string, string> }): Promise<{ stdout: string; stderr: string }>;
  /** The command line that runs argv inside the tree: `[bin, args]` for spawn. */
  command(argv: string[], o?: { uid?: number; gid?: number; groups?: number[] }): [string, string[]];
  /** The environment commands in the tree get (a root shell's PATH, HOME=/root). */
  env(extra?: Record<string, string>): Record<string, string>;
  /** Starts argv inside the tree (nsenter forks: the real process is `innerPid(child)`). */
  spawn(argv: string[], o?: { uid?: number; gid?: number; groups?: number[]; env?: Record<string, string> }): ChildProcess;
  /** The pid (on this host) of the process nsenter started for `child` (the last of a chain of single children). */
  innerPid(child: ChildProcess): number | undefined;
  close(): Promise<void>;
}

function setpriv(o: { uid?: number; gid?: number; groups?: number[] }): string[] {
  if (o.uid === undefined) return [];
  return ["setpriv", `--reuid=${o.uid}`, `--regid=${o.gid ?? o.uid}`, o.groups?.length ? `--groups=${o.groups.join(",")}` : "--clear-groups", "--"];
}

/** Builds (or finds) the machine image and starts a tree on it. */
export async function startTree(name: string): Promise<Tree> {
  const { image } = await labImage("nspawn", join(repoRoot, ".muster", "images"), (l) => process.stderr.write(`${l}\n`));
  const tmp = mkdtempSync(join(tmpdir(), `muster-tree-${name}-`));
  for (const d of ["upper", "work", "root"]) mkdirSync(join(tmp, d));
  const m = join(tmp, "root");
  const repo = realpathSync(repoRoot).replace(/\/$/, "");
  const modules = realpathSync(join(repo, "node_modules"));
  const q = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;
  const bindRo = (from: string, to: string, file = false) =>
    [file ? `mkdir -p ${q(join(m, to, ".."))}; touch ${q(join(m, to))}` : `mkdir -p ${q(join(m, to))}`, `mount --bind ${q(from)} ${q(join(m, to))}`, `mount -o remount,bind,ro ${q(join(m, to))}`].join("\n");
  const script = [
    "set -e",
    `mount -t overlay overlay -o lowerdir=${q(image.root)},upperdir=${q(join(tmp, "upper"))},workdir=${q(join(tmp, "work"))} ${q(m)}`,
    `mount -t proc proc ${q(join(m, "proc"))}`,
    `mount -t sysfs -o ro,nosuid,nodev,noexec sysfs ${q(join(m, "sys"))}`,
    `mount -t tmpfs -o mode=0755,nosuid tmpfs ${q(join(m, "dev"))}`,
    ...[
      ["null", 1, 3],
      ["zero", 1, 5],
      ["full", 1, 7],
      ["random", 1, 8],
      ["urandom", 1, 9],
      ["tty", 5, 0],
    ].map(([n, maj, min]) => `mknod -m 666 ${q(join(m, "dev", String(n)))} c ${maj} ${min}`),
    `mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs ${q(join(m, "run"))}`,
    `mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs ${q(join(m, "tmp"))}`,
    bindRo(process.execPath, TREE_NODE, true),
    bindRo(repo, repo),
    ...(modules.startsWith(`${repo}/`) ? [] : [bindRo(modules, modules)]),
    "ip link set lo up",
    // the namespace's first process, chrooted before it says so (its /proc/<pid>/root is the
    // tree from then on): when its stdin closes, it ends, and the kernel ends the rest
    `exec chroot ${q(m)} /bin/sh -c 'echo ready; read _ignored'`,
  ].join("\n");
  const holder = spawn("unshare", ["--mount", "--propagation", "private", "--net", "--pid", "--fork", "--kill-child", "--", "/bin/sh", "-c", script], { stdio: ["pipe", "pipe", "pipe"] });
  let out = "";
  holder.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  holder.stderr!.on("data", (d: Buffer) => (out += d.toString()));
  const exited = new Promise<void>((res) => holder.once("close", () => res()));
  await new Promise<void>((resolve, reject) => {
    const check = () => (out.includes("ready\n") ? resolve() : undefined);
    holder.stdout!.on("data", check);
    void exited.then(() => reject(new Error(`the tree did not start: ${out}`)));
  });
  const pid = Number(readFileSync(`/proc/${holder.pid}/task/${holder.pid}/children`, "utf8").trim().split(/\s+/)[0]);
  if (!pid) throw new Error(`no first process in the tree's namespace: ${out}`);
  const enter = ["-t", String(pid), "-m", "-n", "-p", "-r", "-w", "--"];
  const env = (extra: Record<string, string> = {}) => ({ PATH, HOME: "/root", LANG: "C.UTF-8", ...extra });
  // the process at the end of the chain nsenter (and strace, say) started: each forks one child
  const innerPid = (child: ChildProcess) => {
    let pid = child.pid;
    let inner: number | undefined;
    for (;;) {
      let next: number | undefined;
      try {
        next = Number(readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/)[0]) || undefined;
      } catch {
        next = undefined;
      }
      if (next === undefined) return inner;
      inner = pid = next;
    }
  };
  return {
    host: (p) => `/proc/${pid}/root${p}`,
    async run(argv, o = {}) {
      try {
        return await run("nsenter", [...enter, ...setpriv(o), ...argv], { env: env(o.env), maxBuffer: 64 << 20 });
      } catch (e) {
        const err = e as { stdout?: string; stderr?: string; message: string };
        throw new Error(`${argv.join(" ")} in the tree failed: ${err.message}\n${err.stdout ?? ""}${err.stderr ?? ""}`);
      }
    },
    command: (argv, o = {}) => ["nsenter", [...enter, ...setpriv(o), ...argv]],
    env,
    spawn: (argv, o = {}) => spawn("nsenter", [...enter, ...setpriv(o), ...argv], { env: env(o.env), stdio: ["pipe", "pipe", "pipe"] }),
    innerPid,
    async close() {
      holder.stdin!.end();
      await exited;
      rmSync(tmp, { recursive: true, force: true });
    },
  };
}

export interface TestPackage {
  name: string;
  version: string;
  /** Extra control fields (Essential, Protected, Depends). */
  fields?: Record<string, string>;
}

/**
 * A local apt repository in the tree (`deb [trusted=yes] file:/srv/repo ./`, the only source):
 * each package built here with dpkg-deb, arch all, an empty payload but for its doc directory,
 * and its Packages index written beside it. apt-get update reads it.
 */
export async function aptRepository(tree: Tree, packages: TestPackage[]): Promise<void> {
  const repo = tree.host("/srv/repo");
  mkdirSync(repo, { recursive: true, mode: 0o755 });
  const work = mkdtempSync(join(tmpdir(), "muster-debs-"));
  const index: string[] = [];
  try {
    for (const p of packages) {
      const root = join(work, `${p.name}_${p.version}`);
      mkdirSync(join(root, "DEBIAN"), { recursive: true });
      mkdirSync(join(root, "usr", "share", "doc", p.name), { recursive: true });
      writeFileSync(join(root, "usr", "share", "doc", p.name, "README"), `${p.name} ${p.version}: a package for muster's hostile tests\n`);
      const control = { Package: p.name, Version: p.version, Architecture: "all", Maintainer: "muster tests <tests@muster.invalid>", ...(p.fields ?? {}), Description: `${p.name}, version ${p.version}, for muster's hostile tests` };
      writeFileSync(join(root, "DEBIAN", "control"), `${Object.entries(control).map(([k, v]) => `${k}: ${v}`).join("\n")}\n`);
      const file = `${p.name}_${p.version}_all.deb`;
      // built here and copied in (dpkg-deb does not write through /proc/<pid>/root)
      await run("dpkg-deb", ["--root-owner-group", "-Zgzip", "--build", root, join(work, file)]);
      const bytes = readFileSync(join(work, file));
      writeFileSync(join(repo, file), bytes, { mode: 0o644 });
      index.push(`${Object.entries(control).map(([k, v]) => `${k}: ${v}`).join("\n")}\nFilename: ./${file}\nSize: ${bytes.length}\nSHA256: ${createHash("sha256").update(bytes).digest("hex")}\n`);
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  writeFileSync(join(repo, "Packages"), `${index.join("\n")}`);
  rmSync(tree.host("/etc/apt/sources.list"), { force: true });
  rmSync(tree.host("/etc/apt/sources.list.d"), { recursive: true, force: true });
  mkdirSync(tree.host("/etc/apt/sources.list.d"), { mode: 0o755 });
  writeFileSync(tree.host("/etc/apt/sources.list.d/muster-test.list"), "deb [trusted=yes] file:/srv/repo ./\n");
  await tree.run(["apt-get", "update", "-q"]);
}
