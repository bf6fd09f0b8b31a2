import { execFile, spawn, type ChildProcess } from "node:child_process";
import { chmodSync, chownSync, lstatSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { stringify as toYaml } from "yaml";
import { cleanEnv, spawnMuster, type MusterProcess } from "../support/collective.js";

// The privileged helper as a node runs it, for the tests that attack it: the built `muster
// privileged serve` as root on a real socket in a temp dir, reading a root-owned server config
// there (rewritten between tests as an operator would; the helper reads it for every request),
// and processes running as another uid (setpriv) standing in for a compromised muster daemon.

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
  path(...p: string[]): string;
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
 * Where the rigs' directories live: under /run, root's alone (0755). The helper wants every
 * directory above a file_paths directory so (src/privileged/paths.ts); under /tmp (1777) it would
 * refuse every file.
 */
export const ROOT_TMP = "/run/muster-test";

/** A temp directory with nothing above it that anyone but root may write. */
export function rootTempDir(name: string): { path: string; remove(): void } {
  mkdirSync(ROOT_TMP, { recursive: true, mode: 0o755 });
  const st = lstatSync(ROOT_TMP);
  if (!st.isDirectory() || st.uid !== 0 || st.mode & 0o022) throw new Error(`${ROOT_TMP} must be a directory root owns and nobody else may write: remove it`);
  const path = mkdtempSync(join(ROOT_TMP, `${name}-`));
  return { path, remove: () => rmSync(path, { recursive: true, force: true }) };
}

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
  // The stand-in daemon: connects, sends one line, prints the reply (or the connection error).
  writeFileSync(
    path("daemon.mjs"),
    `import { connect } from "node:net";
const s = connect(process.argv[2]);
let out = "";
s.on("connect", () => s.write(process.argv[3] + "\\n"));
s.on("data", (d) => (out += d));
s.on("error", (e) => { process.stdout.write(JSON.stringify({ connectError: e.code })); process.exit(0); });
s.on("close", () => process.stdout.write(out));
`,
    { mode: 0o644 },
  );
  const sock = path("privileged.sock");
  const helper = spawnMuster(["privileged", "serve", "--config", path("server.yaml"), "--socket", sock, "--client-user", String(DAEMON_UID), ...(o.extraArgs ?? [])], { env: cleanEnv(path("helper-home")) });
  await helper.waitForLine(new RegExp(`muster privileged helper ready \\(serving uid ${DAEMON_UID}\\)`), 30_000);
  const ids = (uid: number, groups: number[]) => [`--reuid=${uid}`, `--regid=${uid === DAEMON_UID ? GROUP : uid}`, groups.length ? `--groups=${groups.join(",")}` : "--clear-groups"];
  const attackers = new Set<ChildProcess>();
  return {
    path,
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
