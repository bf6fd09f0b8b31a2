import { spawn } from "node:child_process";

// Runs a Nagios plugin (no shell, own process group, a deadline) and reads its result the way
// Nagios does: exit code 0-3 is the state (anything else UNKNOWN); the first line is
// `text|perfdata`, further lines are long output, and perfdata may continue after a '|' on them.

export const State = { OK: 0, WARNING: 1, CRITICAL: 2, UNKNOWN: 3 } as const;
export const stateName = ["OK", "WARNING", "CRITICAL", "UNKNOWN"] as const;

export interface PluginResult {
  exitcode: number;
  output: string;
  perfdata: string;
}

/** NRPE returns at most 64 KiB of output. */
const MAX_OUTPUT = 64 * 1024;

export function parsePluginOutput(text: string): { output: string; perfdata: string } {
  const lines = text.replace(/\r\n/g, "\n").replace(/\n+$/, "").split("\n");
  const [first = "", ...rest] = lines;
  const bar = first.indexOf("|");
  const out = [bar >= 0 ? first.slice(0, bar).trimEnd() : first];
  const perf = bar >= 0 ? [first.slice(bar + 1).trim()] : [];
  let inPerf = false;
  for (const l of rest) {
    if (inPerf) perf.push(l.trim());
    else {
      const b = l.indexOf("|");
      if (b >= 0) {
        out.push(l.slice(0, b).trimEnd());
        perf.push(l.slice(b + 1).trim());
        inPerf = true;
      } else out.push(l);
    }
  }
  return { output: out.join("\n").trimEnd(), perfdata: perf.filter((p) => p !== "").join(" ") };
}

export interface RunPluginOptions {
  timeoutMs: number;
  signal?: AbortSignal;
  env: NodeJS.ProcessEnv;
}

/** Resolves with the plugin's result; failures to start it and timeouts are UNKNOWN results, as in NRPE. */
export function runPlugin(argv: readonly string[], opts: RunPluginOptions): Promise<PluginResult & { aborted: boolean }> {
  const [bin, ...args] = argv;
  return new Promise((resolve) => {
    const unknown = (output: string, aborted = false) => resolve({ exitcode: State.UNKNOWN, output, perfdata: "", aborted });
    if (!bin) return unknown("UNKNOWN: empty command");
    if (opts.signal?.aborted) return unknown("UNKNOWN: check cancelled before it started", true);
    const child = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"], detached: true, env: opts.env, cwd: "/" });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => {
      if (stdout.length < MAX_OUTPUT) stdout += d.toString("utf8");
    });
    child.stderr.on("data", (d: Buffer) => {
      if (stderr.length < MAX_OUTPUT) stderr += d.toString("utf8");
    });
    let timedOut = false;
    let aborted = false;
    let hardKill: NodeJS.Timeout | undefined;
    const kill = (sig: NodeJS.Signals) => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, sig);
      } catch {
        /* already gone */
      }
    };
    const terminate = () => {
      kill("SIGTERM");
      hardKill = setTimeout(() => kill("SIGKILL"), 2000);
    };
    const timer = setTimeout(() => ((timedOut = true), terminate()), opts.timeoutMs);
    const onAbort = () => ((aborted = true), terminate());
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    const done = () => {
      clearTimeout(timer);
      if (hardKill) clearTimeout(hardKill);
      opts.signal?.removeEventListener("abort", onAbort);
    };
    child.once("error", (e: NodeJS.ErrnoException) => {
      done();
      unknown(`UNKNOWN: cannot run ${bin}: ${e.code === "ENOENT" ? "no such file" : e.code === "EACCES" ? "permission denied" : e.message}`);
    });
    child.once("close", (code, signal) => {
      done();
      if (aborted) return unknown("UNKNOWN: check cancelled", true);
      if (timedOut) return unknown(`UNKNOWN: command timed out after ${Math.round(opts.timeoutMs / 100) / 10} seconds`);
      const text = stdout.slice(0, MAX_OUTPUT).trim() !== "" ? stdout.slice(0, MAX_OUTPUT) : stderr.slice(0, MAX_OUTPUT);
      const parsed = text.trim() === "" ? { output: "(No output returned from plugin)", perfdata: "" } : parsePluginOutput(text);
      if (signal) return resolve({ exitcode: State.UNKNOWN, output: `UNKNOWN: plugin killed by ${signal}${parsed.output ? `: ${parsed.output}` : ""}`, perfdata: parsed.perfdata, aborted: false });
      const exitcode = code !== null && code >= 0 && code <= 3 ? code : State.UNKNOWN;
      const output = exitcode === code ? parsed.output : `${parsed.output} (plugin exited with ${code}, reported as UNKNOWN)`;
      resolve({ exitcode, output, perfdata: parsed.perfdata, aborted: false });
    });
  });
}
