import { spawn } from "node:child_process";
import { MusterError } from "../errors.js";

// Spawning puppet and friends: bounded output, a deadline, cancellation, and a clear message
// when the binary is missing. Every child runs in its own process group so a timeout or an
// abort takes down whatever puppet started too.

export interface ExecOptions {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  signal?: AbortSignal;
  timeoutMs?: number;
  /** Bytes of combined output kept (the tail). Default 256 KiB. */
  maxOutput?: number;
}

export interface ExecResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** stdout and stderr interleaved as they arrived (tail), ANSI colours stripped. */
  output: string;
  durationMs: number;
  timedOut: boolean;
  aborted: boolean;
}

export async function execCommand(bin: string, args: string[], opts: ExecOptions = {}): Promise<ExecResult> {
  const max = opts.maxOutput ?? 256 * 1024;
  const started = Date.now();
  if (opts.signal?.aborted) throw new MusterError("MUSTER_PUPPET_FAILED", `${bin} not started: the request was cancelled`);
  const child = spawn(bin, args, {
    env: opts.env ?? process.env,
    cwd: opts.cwd,
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  let out = "";
  const onData = (d: Buffer) => {
    out += d.toString("utf8");
    if (out.length > max * 2) out = out.slice(-max);
  };
  child.stdout?.on("data", onData);
  child.stderr?.on("data", onData);
  let timedOut = false;
  let aborted = false;
  const killGroup = (sig: NodeJS.Signals) => {
    if (child.pid === undefined) return;
    try {
      process.kill(-child.pid, sig);
    } catch {
      /* already gone */
    }
  };
  let hardKill: NodeJS.Timeout | undefined;
  const terminate = () => {
    killGroup("SIGTERM");
    hardKill = setTimeout(() => killGroup("SIGKILL"), 5000);
  };
  const timer = opts.timeoutMs ? setTimeout(() => ((timedOut = true), terminate()), opts.timeoutMs) : undefined;
  const onAbort = () => ((aborted = true), terminate());
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  try {
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
      child.once("error", (e: NodeJS.ErrnoException) =>
        reject(
          new MusterError(
            "MUSTER_PUPPET_FAILED",
            e.code === "ENOENT" ? `${bin} not found: install it (apt-get install puppet-agent) or set the binary path in the agent's config` : `cannot run ${bin}: ${e.message}`,
            { cause: e },
          ),
        ),
      );
      child.once("close", (c, s) => resolve([c, s]));
    });
    return { code, signal, output: stripAnsi(out).slice(-max), durationMs: Date.now() - started, timedOut, aborted };
  } finally {
    if (timer) clearTimeout(timer);
    if (hardKill) clearTimeout(hardKill);
    opts.signal?.removeEventListener("abort", onAbort);
  }
}

export function stripAnsi(s: string): string {
  // eslint-disable-next-line no-control-regex
  return s.replace(/\x1b\[[0-9;]*m/g, "");
}

/** The last `lines` lines of text, runs of identical lines collapsed. */
export function tailLines(s: string, lines = 40): string {
  const out: string[] = [];
  let repeats = 0;
  for (const line of s.trimEnd().split("\n")) {
    if (out.length && out[out.length - 1] === line) {
      repeats++;
      continue;
    }
    if (repeats) out.push(`(previous line repeated ${repeats} more times)`);
    repeats = 0;
    out.push(line);
  }
  if (repeats) out.push(`(previous line repeated ${repeats} more times)`);
  return out.slice(-lines).join("\n");
}
