import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parse as parseYaml } from "yaml";
import { MusterError } from "../errors.js";
import { stripAnsi } from "./exec.js";

// `puppet resource TYPE NAME key=value ... --to_yaml`: read or set one resource with the real
// Puppet, without a catalog or a master. No shell: the arguments go to puppet as an argv, so a
// value is only ever a value. puppet prints the resource's resulting state as YAML on stdout
// (after any Notice lines of the changes it made) and its errors on stderr; it exits 0 even when
// a change failed, so failure is read from the Error lines too.

export interface PuppetResourceSettings {
  /** Default "puppet". */
  puppetBin?: string;
  confdir: string;
  vardir: string;
  /** Extra environment for the puppet command. */
  env?: Record<string, string>;
}

export interface PuppetResourceOptions {
  signal?: AbortSignal;
  /** Default 120 s. */
  timeoutMs?: number;
}

export interface PuppetResourceResult {
  /** The resource's state after the command, as `puppet resource --to_yaml` reports it. */
  state: Record<string, unknown>;
  /** What puppet changed (its Notice lines, e.g. `/File[/tmp/x]/ensure: created`). */
  changes: string[];
  errors: string[];
  warnings: string[];
  /** False when puppet exited non-zero or reported an error. */
  ok: boolean;
  exitcode: number | null;
  durationMs: number;
  /** Whether the node's catalog manages the resource, when the privileged helper (root) could tell. */
  managed?: boolean;
}

const TYPE_RE = /^[a-z][a-z0-9_:]*$/;
const PARAM_RE = /^[a-z][a-z0-9_]*$/;
// eslint-disable-next-line no-control-regex
const CONTROL_RE = /[\x00\n\r]/;
const MAX_OUTPUT = 1024 * 1024;

/** The argv for `puppet resource`; refuses anything puppet could read as an option. */
export function puppetResourceArgs(s: PuppetResourceSettings, type: string, name: string, params: readonly (readonly [string, string])[] = []): string[] {
  const bad = (why: string): never => {
    throw new MusterError("MUSTER_INPUT_INVALID", `puppet resource: ${why}`);
  };
  if (!TYPE_RE.test(type)) bad(`invalid type ${JSON.stringify(type)}`);
  if (name === "" || name.startsWith("-") || CONTROL_RE.test(name)) bad(`invalid resource name ${JSON.stringify(name)}`);
  const out = ["resource", "--to_yaml", "--color=false", "--confdir", s.confdir, "--vardir", s.vardir, type, name];
  for (const [k, v] of params) {
    if (!PARAM_RE.test(k)) bad(`invalid property name ${JSON.stringify(k)}`);
    if (v === "" || CONTROL_RE.test(v)) bad(`invalid value for ${k}: ${JSON.stringify(v)}`);
    out.push(`${k}=${v}`);
  }
  return out;
}

/** Runs `puppet resource` for one resource, setting `params` when given, and returns its resulting state. */
export async function puppetResource(s: PuppetResourceSettings, type: string, name: string, params: readonly (readonly [string, string])[], opts: PuppetResourceOptions = {}): Promise<PuppetResourceResult> {
  const bin = s.puppetBin ?? "puppet";
  const args = puppetResourceArgs(s, type, name, params);
  const r = await run(bin, args, { env: { ...process.env, ...(s.env ?? {}) }, signal: opts.signal, timeoutMs: opts.timeoutMs ?? 120_000 });
  if (r.aborted) throw new MusterError("MUSTER_PUPPET_FAILED", `puppet resource ${type} ${name} was cancelled`);
  if (r.timedOut) throw new MusterError("MUSTER_TIMEOUT", `puppet resource ${type} ${name} did not finish within ${Math.round((opts.timeoutMs ?? 120_000) / 1000)} s`);
  const { state, notices } = parseResourceOutput(r.stdout, type);
  const stderrLines = stripAnsi(r.stderr).split("\n");
  const errors = stderrLines.filter((l) => l.startsWith("Error: ")).map((l) => l.slice(7));
  const warnings = stderrLines.filter((l) => l.startsWith("Warning: ")).map((l) => l.slice(9));
  if (r.code !== 0 && errors.length === 0) errors.push(stripAnsi(r.stderr).trim().split("\n").slice(-5).join("\n") || `puppet exited with ${r.code ?? r.signal}`);
  return {
    state,
    changes: notices,
    errors: [...new Set(errors)],
    warnings: [...new Set(warnings)],
    ok: r.code === 0 && errors.length === 0,
    exitcode: r.code,
    durationMs: r.durationMs,
  };
}

/** Splits puppet's stdout into the Notice lines before the YAML document and the resource's state. */
export function parseResourceOutput(stdout: string, type: string): { state: Record<string, unknown>; notices: string[] } {
  const lines = stripAnsi(stdout).split("\n");
  const start = lines.findIndex((l) => l === "---");
  const notices = (start < 0 ? lines : lines.slice(0, start)).filter((l) => l.trim() !== "").map((l) => l.replace(/^Notice: /, ""));
  if (start < 0) return { state: {}, notices };
  let doc: unknown;
  try {
    doc = parseYaml(lines.slice(start).join("\n"), { logLevel: "silent" });
  } catch (e) {
    throw new MusterError("MUSTER_PUPPET_FAILED", `cannot read puppet resource's YAML: ${(e as Error).message}`);
  }
  const byTitle = isObject(doc) ? doc[type.toLowerCase()] : undefined;
  if (!isObject(byTitle)) return { state: {}, notices };
  const first = Object.values(byTitle)[0];
  return { state: isObject(first) ? first : {}, notices };
}

/**
 * The resources the node's last catalog manages: Puppet's resourcefile (`<vardir>/state/resources.txt`,
 * one `type[title]` per line, lower-cased). A missing file means none; an unreadable one is an error,
 * so a caller fails closed.
 */
export function readManagedResources(path: string): Set<string> {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return new Set();
    throw new MusterError("MUSTER_PUPPET_FAILED", `cannot read Puppet's resource file ${path}: ${(e as Error).message}`);
  }
  return new Set(
    text
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => l !== "")
      .map(normaliseRef),
  );
}

export function defaultResourcesFile(vardir: string): string {
  return join(vardir, "state", "resources.txt");
}

/** Whether `type[name]` is among the managed resources (file paths compare without trailing slashes). */
export function isManagedResource(managed: ReadonlySet<string>, type: string, name: string): boolean {
  return managed.has(normaliseRef(`${type}[${name}]`));
}

function normaliseRef(ref: string): string {
  const r = ref.toLowerCase();
  const m = /^file\[(.*)\]$/s.exec(r);
  return m && m[1]!.length > 1 ? `file[${m[1]!.replace(/\/+$/, "") || "/"}]` : r;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  durationMs: number;
  timedOut: boolean;
  aborted: boolean;
}

// exec.ts interleaves stdout and stderr; here the YAML on stdout must stay apart from the log
// lines on stderr. Same discipline: own process group, deadline, cancellation, bounded output.
async function run(bin: string, args: string[], opts: { env: NodeJS.ProcessEnv; signal?: AbortSignal; timeoutMs: number }): Promise<RunResult> {
  const started = Date.now();
  if (opts.signal?.aborted) return { code: null, signal: null, stdout: "", stderr: "", durationMs: 0, timedOut: false, aborted: true };
  const child = spawn(bin, args, { env: opts.env, stdio: ["ignore", "pipe", "pipe"], detached: true });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => {
    if (stdout.length < MAX_OUTPUT) stdout += d.toString("utf8");
  });
  child.stderr.on("data", (d: Buffer) => {
    stderr += d.toString("utf8");
    if (stderr.length > MAX_OUTPUT) stderr = stderr.slice(-MAX_OUTPUT / 2);
  });
  let timedOut = false;
  let aborted = false;
  let hardKill: NodeJS.Timeout | undefined;
  const terminate = () => {
    const kill = (sig: NodeJS.Signals) => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, sig);
      } catch {
        /* already gone */
      }
    };
    kill("SIGTERM");
    hardKill = setTimeout(() => kill("SIGKILL"), 5000);
  };
  const timer = setTimeout(() => ((timedOut = true), terminate()), opts.timeoutMs);
  const onAbort = () => ((aborted = true), terminate());
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  try {
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
      child.once("error", (e: NodeJS.ErrnoException) =>
        reject(new MusterError("MUSTER_PUPPET_FAILED", e.code === "ENOENT" ? `${bin} not found: install it (apt-get install puppet-agent) or set puppet_bin in the agent's config` : `cannot run ${bin}: ${e.message}`, { cause: e })),
      );
      child.once("close", (c, sg) => resolve([c, sg]));
    });
    return { code, signal, stdout, stderr, durationMs: Date.now() - started, timedOut, aborted };
  } finally {
    clearTimeout(timer);
    if (hardKill) clearTimeout(hardKill);
    opts.signal?.removeEventListener("abort", onAbort);
  }
}
