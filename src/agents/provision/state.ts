import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { exportFactsSetting, puppetAgentSettings, puppetNodeSettings, settingsReader, type PuppetNodeSettings } from "../settings.js";
import { dirname, isAbsolute } from "node:path";
import { RpcError } from "../../errors.js";
import { Status } from "../../protocol/status.js";
import type { ActionContext } from "../../agent/agent.js";
import { MusterError } from "../../errors.js";
import { factFileKind, PuppetAgent } from "../../puppet/index.js";
import type { NodeOps, PuppetTarget } from "../../agent/node-ops.js";

// Settings, the deploy lock and the disable marker of one provision agent instance. Nothing
// here is module-level state: createProvisionAgent() owns one ProvisionState.

export interface ProvisionSettings extends PuppetNodeSettings {
  lockFile: string;
  disableFile: string;
  lockLeaseSeconds: number;
  bootstrapEnvironment: string;
  productionEnvironment: string;
  hostsFile: string;
  useHostsFile: boolean;
  stageFact: string;
  /** Where the stage fact is persisted as `production` for every later run (a Facter fact file). */
  stageFactFile: string;
  runTimeoutSeconds: number;
}

export const DEFAULTS = {
  puppet_bin: "puppet",
  confdir: "/etc/puppet",
  vardir: "/var/cache/puppet",
  ssldir: "/var/lib/puppet/ssl",
  lock_file: "/var/lib/muster/provision/deploy.lock",
  disable_file: "/var/lib/muster/provision/disabled",
  lock_lease: 600,
  bootstrap_environment: "bootstrap",
  production_environment: "production",
  hosts_file: "/etc/hosts",
  use_hosts_file: false,
  stage_fact: "lifecycle_stage",
  run_timeout: 840,
} as const;

/**
 * Facter's system external facts directory as root: Debian's facter reads /etc/facter/facts.d,
 * and so does AIO Puppet (besides /etc/puppetlabs/facter/facts.d). Every Puppet run on the
 * machine reads it, and pluginsync never touches it.
 */
export function defaultStageFactFile(stageFact: string): string {
  return `/etc/facter/facts.d/muster_${stageFact}.yaml`;
}

/** Resolve `plugins.provision` settings (strings from config files are coerced). */
export function resolveSettings(config: Record<string, unknown>, identity: string): ProvisionSettings {
  const r = settingsReader("provision", config);
  const { str, num, bool, bad: badSetting } = r;
  const stageFact = str("stage_fact", DEFAULTS.stage_fact);
  if (!/^[A-Za-z][A-Za-z0-9_]*$/.test(stageFact)) throw badSetting("stage_fact", stageFact, "a fact name");
  const stageFactFile = str("stage_fact_file", defaultStageFactFile(stageFact));
  if (!isAbsolute(stageFactFile) || !factFileKind(stageFactFile)) {
    throw badSetting("stage_fact_file", stageFactFile, "an absolute path ending in .yaml, .yml, .json, .txt (an external fact in a directory Facter reads) or .rb (a custom fact in a directory on Puppet's factpath)");
  }
  return {
    ...puppetNodeSettings(r, identity),
    lockFile: str("lock_file", DEFAULTS.lock_file),
    disableFile: str("disable_file", DEFAULTS.disable_file),
    lockLeaseSeconds: num("lock_lease", DEFAULTS.lock_lease, { positive: true }),
    bootstrapEnvironment: str("bootstrap_environment", DEFAULTS.bootstrap_environment),
    productionEnvironment: str("production_environment", DEFAULTS.production_environment),
    hostsFile: str("hosts_file", DEFAULTS.hosts_file),
    useHostsFile: bool("use_hosts_file", DEFAULTS.use_hosts_file),
    stageFact,
    stageFactFile,
    runTimeoutSeconds: num("run_timeout", DEFAULTS.run_timeout, { positive: true }),
    exportFacts: exportFactsSetting(r, config),
  };
}


/** This agent's Puppet, for the privileged operations (NodeOps). */
export function puppetTarget(s: ProvisionSettings): PuppetTarget {
  return { agent: "provision", settings: puppetAgentFor(s).settings };
}

export function puppetAgentFor(s: ProvisionSettings): PuppetAgent {
  return new PuppetAgent(puppetAgentSettings(s));
}

// ---- deploy lock: a JSON file {owner, expires, acquired, identity} ----

export interface LockRecord {
  owner: string;
  /** ms since epoch */
  expires: number;
  acquired: number;
  identity: string;
}

export function readLock(path: string): LockRecord | undefined {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
  try {
    const o = JSON.parse(text) as Partial<LockRecord>;
    if (typeof o.owner === "string" && typeof o.expires === "number") {
      return { owner: o.owner, expires: o.expires, acquired: typeof o.acquired === "number" ? o.acquired : 0, identity: String(o.identity ?? "") };
    }
  } catch {
    /* fall through */
  }
  // A lock file we cannot parse names no holder and no expiry: treat it as expired.
  return { owner: "unknown (unreadable lock file)", expires: 0, acquired: 0, identity: "" };
}

export function writeLock(path: string, rec: LockRecord): void {
  atomicWrite(path, JSON.stringify(rec) + "\n");
}

export function removeFile(path: string): void {
  rmSync(path, { force: true });
}

// ---- disable marker ----

export interface DisableRecord {
  since: number | null;
  reason: string | null;
}

export function readDisabled(path: string): DisableRecord | undefined {
  if (!existsSync(path)) return undefined;
  try {
    const o = JSON.parse(readFileSync(path, "utf8")) as { since?: unknown; reason?: unknown };
    return { since: typeof o.since === "number" ? o.since : null, reason: typeof o.reason === "string" ? o.reason : null };
  } catch {
    return { since: null, reason: null }; // any file there means disabled, as in mcprovision
  }
}

export function writeDisabled(path: string, rec: DisableRecord & { caller: string }): void {
  atomicWrite(path, JSON.stringify(rec) + "\n");
}

function atomicWrite(path: string, text: string): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.${Date.now()}.tmp`;
  writeFileSync(tmp, text);
  renameSync(tmp, path);
}

/** Serialises async critical sections (lock read-modify-write) within one agent instance. */
export class Mutex {
  private tail: Promise<unknown> = Promise.resolve();
  run<T>(fn: () => Promise<T> | T): Promise<T> {
    const next = this.tail.then(fn, fn);
    this.tail = next.catch(() => undefined);
    return next;
  }
}

/** What every action handler shares: the clock, settings resolution, the lock mutex. */
export interface ProvisionRuntime {
  now(): number;
  /** What needs root, in process or through the privileged helper. */
  readonly ops: NodeOps;
  /** Settings for this request: the factory's config overlaid with ctx.config. */
  settings(ctx: ActionContext): ProvisionSettings;
  readonly lockMutex: Mutex;
  /** Refuse provisioning actions once the node is provisioned (the disable file exists). */
  ensureEnabled(s: ProvisionSettings): void;
  markDisabled(): void;
}

/** Local errors become Aborted replies with the same message; RpcErrors pass through. */
export function asRpcError(e: unknown): RpcError {
  if (e instanceof RpcError) return e;
  if (e instanceof MusterError) return new RpcError(Status.Aborted, e.message, { code: e.code });
  return new RpcError(Status.UnknownError, e instanceof Error ? e.message : String(e));
}
