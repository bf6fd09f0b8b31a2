import { closeSync, fstatSync, mkdirSync, openSync, readFileSync, readSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { parse } from "yaml";
import { MusterError } from "../errors.js";
import type { PuppetAgent } from "./agent.js";
import { puppetSettings } from "./code-dirs.js";

// What Puppet keeps on disk about its agent, read and written the way Puppet itself does. These
// files are Puppet's documented interface for outside tools (puppet/agent/disabler.rb, locker.rb):
//
//   <statedir>/agent_disabled.lock       JSON {"disabled_message": "..."}; present = disabled
//   <statedir>/agent_catalog_run.lock    the pid of the process applying a catalog
//   <publicdir>/last_run_summary.yaml    counts and times of the last run (time.last_run: epoch s)
//   <rundir>/agent.pid                   the agent daemon's pid
//
// statedir is <vardir>/state (Puppet's default); PuppetAgent passes vardir and publicdir itself.

export interface PuppetStatePaths {
  statedir: string;
  disabledLockfile: string;
  catalogRunLockfile: string;
  lastRunSummary: string;
  lastRunReport: string;
}

export function puppetStatePaths(agent: PuppetAgent): PuppetStatePaths {
  const statedir = join(agent.settings.vardir, "state");
  return {
    statedir,
    disabledLockfile: join(statedir, "agent_disabled.lock"),
    catalogRunLockfile: join(statedir, "agent_catalog_run.lock"),
    lastRunSummary: join(agent.settings.publicdir, "last_run_summary.yaml"),
    lastRunReport: join(statedir, "last_run_report.yaml"),
  };
}

/**
 * The state files muster reads, by name: what the privileged helper's puppet.read_state reads as
 * root for a daemon that cannot (Puppet keeps them 0640 in a 0750 directory on Debian).
 */
export const PUPPET_STATE_FILES = ["classes", "resources", "last_run_summary", "disabled_lock", "run_lock"] as const;
export type PuppetStateFile = (typeof PUPPET_STATE_FILES)[number];

/** Larger than any of them should be (resources.txt of a huge catalog included): read no further. */
export const MAX_STATE_BYTES = 4 * 1024 * 1024;

/** Where a state file is, as Puppet's settings put it (the classfile asked of Puppet itself). */
export async function puppetStateFile(agent: PuppetAgent, file: PuppetStateFile): Promise<string> {
  const paths = puppetStatePaths(agent);
  switch (file) {
    case "classes":
      // through the kept settings (code-dirs.ts): the helper reads this after every Puppet run
      return puppetSettings({ puppetBin: agent.settings.puppetBin, args: agent.commonArgs(), ...(agent.settings.env ? { env: agent.settings.env } : {}) })
        .then((s) => s.classfile || agent.defaultClassfile)
        .catch(() => agent.defaultClassfile);
    case "resources":
      return join(paths.statedir, "resources.txt");
    case "last_run_summary":
      return paths.lastRunSummary;
    case "disabled_lock":
      return paths.disabledLockfile;
    case "run_lock":
      return paths.catalogRunLockfile;
  }
}

/**
 * A state file's text, or null when it is not there. Read through one descriptor so its size is
 * the size of what is read; over MAX_STATE_BYTES it is an error, as any other failure to read is
 * (EACCES above all: the caller asks root instead).
 */
export function readStateText(path: string): string | null {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw e;
  }
  try {
    const size = fstatSync(fd).size;
    if (size > MAX_STATE_BYTES) throw new MusterError("MUSTER_PUPPET_FAILED", `${path} is ${size} bytes, more than the ${MAX_STATE_BYTES} muster reads`);
    const buf = Buffer.alloc(size);
    let n = 0;
    while (n < size) {
      const r = readSync(fd, buf, n, size - n, n);
      if (r === 0) break;
      n += r;
    }
    return buf.subarray(0, n).toString("utf8");
  } finally {
    closeSync(fd);
  }
}

/** Whether a read failed for want of permission: the daemon's cue to ask the privileged helper. */
export function isPermissionError(e: unknown): boolean {
  const code = (e as NodeJS.ErrnoException | undefined)?.code;
  return code === "EACCES" || code === "EPERM";
}

export interface DisabledState {
  disabled: boolean;
  /** The message given to `puppet agent --disable`, or null (also when none was given). */
  message: string | null;
}

/** A file's text, or null when it cannot be read (the parsers below take that as "none"). */
function textOrNull(path: string): string | null {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return null;
  }
}

/** Whether the agent is administratively disabled, and why. */
export function readDisabled(lockfile: string): DisabledState {
  return parseDisabled(textOrNull(lockfile));
}

/** Pure: the disable lock's text (null: no lock) as Puppet reads it. */
export function parseDisabled(text: string | null): DisabledState {
  if (text === null) return { disabled: false, message: null };
  try {
    const data = JSON.parse(text) as unknown;
    const msg = data && typeof data === "object" ? (data as Record<string, unknown>).disabled_message : undefined;
    return { disabled: true, message: typeof msg === "string" ? msg : null };
  } catch {
    return { disabled: true, message: null }; // Puppet too treats an unreadable lock as disabled
  }
}

/**
 * `puppet agent --disable MESSAGE` without starting Ruby: writes the JSON lock Puppet reads.
 * Returns false (and leaves the lock alone) when the agent was already disabled.
 */
export function disableAgent(lockfile: string, message: string): boolean {
  if (readDisabled(lockfile).disabled) return false;
  mkdirSync(dirname(lockfile), { recursive: true });
  const tmp = `${lockfile}.muster-${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify({ disabled_message: message }));
  renameSync(tmp, lockfile);
  return true;
}

/** `puppet agent --enable`. Returns false when the agent was not disabled. */
export function enableAgent(lockfile: string): boolean {
  const was = readDisabled(lockfile).disabled;
  rmSync(lockfile, { force: true });
  return was;
}

/** The pid applying a catalog right now (Puppet's run lock names a live process), if any. */
export function catalogRunPid(lockfile: string): number | undefined {
  return runLockPid(textOrNull(lockfile));
}

/** The run lock's text (null: no lock): the pid it names, when that process is alive. */
export function runLockPid(text: string | null): number | undefined {
  if (text === null) return undefined;
  const pid = Number(text.trim());
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  try {
    process.kill(pid, 0);
    return pid;
  } catch (e) {
    // EPERM: alive but another user's (a root daemon seen by an unprivileged server)
    return (e as NodeJS.ErrnoException).code === "EPERM" ? pid : undefined;
  }
}

/** last_run_summary.yaml as Puppet writes it (every section optional). */
export interface LastRunSummary {
  version: { config: string | null; puppet: string | null };
  /** application.converged_environment (Puppet 6+), or null. */
  environment: string | null;
  resources: Record<string, number>;
  time: Record<string, number>;
  changes: Record<string, number>;
  events: Record<string, number>;
  /** time.last_run: epoch seconds of the run's end, 0 when absent. */
  lastrun: number;
}

export function readLastRunSummary(path: string): LastRunSummary | undefined {
  return lastRunSummaryOf(textOrNull(path));
}

/** last_run_summary.yaml's text (null: none yet), parsed. */
export function lastRunSummaryOf(text: string | null): LastRunSummary | undefined {
  if (text === null) return undefined;
  let doc: unknown;
  try {
    doc = parse(text, { logLevel: "silent" });
  } catch {
    return undefined;
  }
  return parseLastRunSummary(doc);
}

/** Pure: the parsed YAML document of last_run_summary.yaml. */
export function parseLastRunSummary(doc: unknown): LastRunSummary | undefined {
  if (!isRecord(doc)) return undefined;
  const nums = (v: unknown): Record<string, number> => {
    const out: Record<string, number> = {};
    if (isRecord(v)) for (const [k, n] of Object.entries(v)) if (typeof n === "number" && Number.isFinite(n)) out[k] = n;
    return out;
  };
  const version = isRecord(doc.version) ? doc.version : {};
  const application = isRecord(doc.application) ? doc.application : {};
  const time = nums(doc.time);
  const str = (v: unknown) => (v === undefined || v === null ? null : String(v));
  return {
    version: { config: str(version.config), puppet: str(version.puppet) },
    environment: str(application.converged_environment ?? application.initial_environment),
    resources: nums(doc.resources),
    time,
    changes: nums(doc.changes),
    events: nums(doc.events),
    lastrun: Math.trunc(time.last_run ?? 0),
  };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
