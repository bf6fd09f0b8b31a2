import { execFile, spawn, type ChildProcess } from "node:child_process";
import { chmodSync, chownSync, lstatSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { stringify as toYaml } from "yaml";
import { cleanEnv, cliPath, spawnMuster, type MusterProcess } from "../support/collective.js";
import { aptRepository, startTree, TREE_NODE, type TestPackage, type Tree } from "./tree.js";

// The privileged helper as a node runs it, for the tests that attack it: the built `muster
// privileged serve` as root on a real socket, reading a root-owned server config (rewritten between
// tests as an operator would; the helper reads it for every request), and processes running as
// another uid (setpriv) standing in for a compromised muster daemon. startRig: in a temp dir on
// this machine (helper.test.ts, with a real `muster server` beside it); startTreeRig: in a Debian
// system of its own (tree.ts), at Debian's own paths, with Debian's Puppet, a dpkg database and an
// apt repository (hostile.test.ts).

const run = promisify(execFile);

/** nobody: the uid the helper serves here (the muster user on a machine). */
export const DAEMON_UID = 65534;
/** A uid the helper does not serve. */
export const OTHER_UID = 65533;
/** nogroup: the socket's group, as muster's is in the package. */
export const GROUP = 65534;

export interface Answer {
  ok?: boolean;
  refused?: boolean;
  code?: string;
  error?: string;
  result?: unknown;
  connectError?: string;
}

export interface Rig {
  /** A path as requests name it (inside the tree, for a tree rig). */
  path(...p: string[]): string;
  /** The same path for this process's own file system calls (the same, or through the tree's /proc/<pid>/root). */
  host(...p: string[]): string;
  sock: string;
  helper: MusterProcess;
  certname: string;
  /** Root's server config as the operator writes it (0640 root:<the daemon's group>). */
  writeConfig(config: Record<string, unknown>): void;
  /** The config the rig started with. */
  baseConfig: Record<string, unknown>;
  /** One request line from a process running as `uid`; the reply, or how the connection failed. */
  ask(request: unknown, uid?: number, groups?: number[]): Promise<Answer>;
  /** A node script run as the attacker (uid and group of the daemon), kept running. */
  attacker(script: string, args: string[]): ChildProcess;
  stop(): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Where the rigs' directories live: under /var/lib, root's alone (0755). The helper wants every
 * directory above a file_paths directory so (src/privileged/paths.ts); under /tmp (1777) it would
 * refuse every file, and /run is where root runs code from (src/puppet/root-code.ts).
 */
export const ROOT_TMP = "/var/lib/muster-test";

/** A temp directory with nothing above it that anyone but root may write. */
export function rootTempDir(name: string): { path: string; remove(): void } {
  mkdirSync(ROOT_TMP, { recursive: true, mode: 0o755 });
  const st = lstatSync(ROOT_TMP);
  if (!st.isDirectory() || st.uid !== 0 || st.mode & 0o022) throw new Error(`${ROOT_TMP} must be a directory root owns and nobody else may write: remove it`);
  const path = mkdtempSync(join(ROOT_TMP, `${name}-`));
  return { path, remove: () => rmSync(path, { recursive: true, force: true }) };
}

/** The daemon's stand-in: connects, sends one line, prints the reply (or the connection error). */
const DAEMON_SCRIPT = `import { connect } from "node:net";
const s = connect(process.argv[2]);
let out = "";
s.on("connect", () => s.write(process.argv[3] + "\\n"));
s.on("data", (d) => (out += d));
s.on("error", (e) => { process.stdout.write(JSON.stringify({ connectError: e.code })); process.exit(0); });
s.on("close", () => process.stdout.write(out));
`;

/**
 * A helper on `<tmp>/privileged.sock` serving DAEMON_UID, with Puppet's directories under the
 * temp dir (rootTempDir) and the resource agent fenced to `files/` (`extraArgs`: more `privileged serve` flags).
 */
export async function startRig(name: string, o: { extraArgs?: string[]; config?: (base: Record<string, unknown>, path: (...p: string[]) => string) => Record<string, unknown> } = {}): Promise<Rig> {
  const tmp = rootTempDir(name);
  const path = (...p: string[]) => join(tmp.path, ...p);
  chmodSync(tmp.path, 0o755); // the stand-in daemon must reach the socket and its scripts
  for (const d of ["puppet/etc", "puppet/var", "puppet/ssl", "files", "outside", "facts.d", "attacker"]) mkdirSync(path(d), { recursive: true });
  chmodSync(path("attacker"), 0o755);
  chownSync(path("attacker"), DAEMON_UID, GROUP); // the attacker's own scratch directory
  const certname = `${name}.privileged.test`;
  const puppet = { confdir: path("puppet/etc"), vardir: path("puppet/var"), ssldir: path("puppet/ssl"), certname };
  const baseConfig: Record<string, unknown> = {
    identity: certname,
    agents: { builtin: ["provision", "puppet", "resource"] },
    plugins: {
      provision: { ...puppet, stage_fact_file: path("facts.d", "muster_lifecycle_stage.yaml"), lock_file: path("deploy.lock"), disable_file: path("disabled") },
      puppet,
      // what docs/deploy.md section 4 allows, with a directory for files
      resource: { allowed_types: ["file", "package", "service"], file_paths: [path("files")], confdir: puppet.confdir, vardir: puppet.vardir },
    },
    facts: { facter: false },
    log: { level: "info" },
  };
  const config = o.config ? o.config(baseConfig, path) : baseConfig;
  const writeConfig = (c: Record<string, unknown>) => {
    writeFileSync(path("server.yaml"), toYaml(c), { mode: 0o640 });
    chownSync(path("server.yaml"), 0, GROUP);
  };
  writeConfig(config);
  writeFileSync(path("daemon.mjs"), DAEMON_SCRIPT, { mode: 0o644 });
  const sock = path("privileged.sock");
  const helper = spawnMuster(["privileged", "serve", "--config", path("server.yaml"), "--socket", sock, "--client-user", String(DAEMON_UID), ...(o.extraArgs ?? [])], { env: cleanEnv(path("helper-home")) });
  await helper.waitForLine(new RegExp(`muster privileged helper ready \\(serving uid ${DAEMON_UID}\\)`), 30_000);
  const ids = (uid: number, groups: number[]) => [`--reuid=${uid}`, `--regid=${uid === DAEMON_UID ? GROUP : uid}`, groups.length ? `--groups=${groups.join(",")}` : "--clear-groups"];
  const attackers = new Set<ChildProcess>();
  return {
    path,
    host: path,
    sock,
    helper,
    certname,
    baseConfig: config,
    writeConfig,
    async ask(request, uid = DAEMON_UID, groups = [GROUP]) {
      const line = typeof request === "string" ? request : JSON.stringify(request);
      const r = await run("setpriv", [...ids(uid, groups), process.execPath, path("daemon.mjs"), sock, line], { cwd: "/", maxBuffer: 16 << 20 });
      return JSON.parse(r.stdout) as Answer;
    },
    attacker(script, args) {
      const file = path("attacker", `script-${attackers.size}.mjs`);
      writeFileSync(file, script, { mode: 0o644 });
      const child = spawn("setpriv", [...ids(DAEMON_UID, [GROUP]), process.execPath, file, ...args], { cwd: "/", stdio: ["pipe", "pipe", "pipe"] });
      attackers.add(child);
      child.once("close", () => attackers.delete(child));
      return child;
    },
    async stop() {
      for (const a of attackers) a.kill("SIGKILL");
      const stopped = await helper.stop();
      tmp.remove();
      return stopped;
    },
  };
}

export function refusedWith(a: Answer, re: RegExp): void {
  if (a.ok !== false || a.refused !== true || a.code !== "MUSTER_PRIVILEGED_REFUSED" || !re.test(a.error ?? "")) {
    throw new Error(`expected a refusal matching ${re}, got ${JSON.stringify(a)}`);
  }
}

export interface TreeRig extends Rig {
  tree: Tree;
  /** A command as root inside the tree (dpkg-query, apt-mark, ...). */
  root(argv: string[]): Promise<string>;
}

/**
 * A helper in a Debian system of its own (tree.ts), as a packaged node runs it: root's config in
 * /etc/muster/server.yaml (root:<the daemon's group> 0640), the socket in /run/muster (root:<the
 * daemon's group> 0750), Puppet at Debian's own paths (/etc/puppet, /var/cache/puppet,
 * /var/lib/puppet/ssl: muster's defaults are Debian's), the resource agent fenced to /srv/files,
 * `packages` in the tree's apt repository. `path("files", "x")` is /srv/files/x in the tree;
 * `host(...)` the same file from here.
 */
export async function startTreeRig(name: string, o: { extraArgs?: string[]; packages?: TestPackage[] } = {}): Promise<TreeRig> {
  const tree = await startTree(name);
  try {
    const path = (...p: string[]) => join("/srv", ...p);
    const host = (...p: string[]) => tree.host(path(...p));
    await aptRepository(tree, o.packages ?? []);
    for (const d of ["files", "outside", "attacker"]) mkdirSync(host(d), { recursive: true, mode: 0o755 });
    chownSync(host("attacker"), DAEMON_UID, GROUP); // the attacker's own scratch directory
    mkdirSync(tree.host("/victim"), { mode: 0o755 });
    // as the package and provisioning make them
    mkdirSync(tree.host("/etc/muster"), { mode: 0o755 });
    mkdirSync(tree.host("/run/muster"), { mode: 0o750 });
    chownSync(tree.host("/run/muster"), 0, GROUP);
    mkdirSync(tree.host("/etc/facter/facts.d"), { recursive: true, mode: 0o755 });
    writeFileSync(host("attacker", "daemon.mjs"), DAEMON_SCRIPT, { mode: 0o644 });
    const certname = `${name}.privileged.test`;
    const baseConfig: Record<string, unknown> = {
      identity: certname,
      agents: { builtin: ["provision", "puppet", "resource"] },
      // what docs/deploy.md section 4 allows, with a directory for files
      plugins: { resource: { allowed_types: ["file", "package", "service"], file_paths: [path("files")] } },
      facts: { facter: false },
      log: { level: "info" },
    };
    const writeConfig = (c: Record<string, unknown>) => {
      writeFileSync(tree.host("/etc/muster/server.yaml"), toYaml(c), { mode: 0o640 });
      chownSync(tree.host("/etc/muster/server.yaml"), 0, GROUP);
    };
    writeConfig(baseConfig);
    const sock = "/run/muster/privileged.sock";
    const [bin, args] = tree.command([TREE_NODE, cliPath, "privileged", "serve", "--config", "/etc/muster/server.yaml", "--socket", sock, "--client-user", String(DAEMON_UID), ...(o.extraArgs ?? [])]);
    const helper = spawnMuster(args, { env: tree.env(), bin });
    await helper.waitForLine(new RegExp(`muster privileged helper ready \\(serving uid ${DAEMON_UID}\\)`), 60_000);
    const attackers = new Set<ChildProcess>();
    const who = (uid: number, groups: number[]) => ({ uid, gid: uid === DAEMON_UID ? GROUP : uid, groups });
    return {
      tree,
      path,
      host,
      sock,
      helper,
      certname,
      baseConfig,
      writeConfig,
      root: async (argv) => (await tree.run(argv)).stdout,
      async ask(request, uid = DAEMON_UID, groups = [GROUP]) {
        const line = typeof request === "string" ? request : JSON.stringify(request);
        const r = await tree.run([TREE_NODE, path("attacker", "daemon.mjs"), sock, line], who(uid, groups));
        return JSON.parse(r.stdout) as Answer;
      },
      attacker(script, args) {
        const file = path("attacker", `script-${attackers.size}-${Date.now()}.mjs`);
        writeFileSync(tree.host(file), script, { mode: 0o644 });
        const child = tree.spawn([TREE_NODE, file, ...args], who(DAEMON_UID, [GROUP]));
        attackers.add(child);
        child.once("close", () => attackers.delete(child));
        return child;
      },
      async stop() {
        // nsenter does not pass a signal on: the helper itself is told to stop
        const inner = tree.innerPid(helper.child);
        if (inner) process.kill(inner, "SIGTERM");
        const stopped = await Promise.race([helper.exited, new Promise<undefined>((r) => setTimeout(() => r(undefined), 15_000))]);
        await tree.close(); // ends whatever is left in the tree, attackers included
        return stopped ?? { code: null, signal: "SIGKILL" };
      },
    };
  } catch (e) {
    await tree.close();
    throw e;
  }
}
