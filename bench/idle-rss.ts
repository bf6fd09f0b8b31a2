import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";

// Idle resident memory of a whole process, as bench/run.ts and bench/daemon-rss.ts read it.

/** VmRSS of a process, MB (one decimal). */
export function rssMB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Math.round((Number(m[1]) / 1024) * 10) / 10 : NaN;
}

/** RssAnon and RssFile of a process, MB: the heap and malloc, and the pages of files (the node binary). */
export function rssParts(pid: number): { anonMB: number; fileMB: number } {
  const text = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (k: string) => Math.round((Number(new RegExp(`${k}:\\s+(\\d+) kB`).exec(text)?.[1]) / 1024) * 10) / 10;
  return { anonMB: kb("RssAnon"), fileMB: kb("RssFile") };
}

export interface IdleRss {
  /** VmRSS once idle (see below), MB */
  rssMB: number;
  /** VmRSS right after `ready`, MB */
  readyRssMB: number;
  /** ms from ready until the reading */
  settledAfterMs: number;
  /** RssAnon and RssFile at the reading, MB */
  anonMB?: number;
  fileMB?: number;
}

/**
 * Idle means: at least IDLE_MIN_MS after `ready`, and no VmRSS sample in the last 3 s moved more
 * than 0.5 MB. The minimum matters: V8's memory reducer shrinks the young generation (16 MB after
 * start-up, 1 MB idle) once allocation has stopped for a while (observed 15-35 s after ready), and
 * a node daemon spends its life idle. Polling is the measurement itself here (memory has no
 * "settled" event); bounded at 120 s.
 */
export const IDLE_MIN_MS = 45_000;

/**
 * Starts a process, waits for `readyText` on stdout (if given) and `afterReady` (work it should
 * have done once, e.g. one request), then until it is idle; reads VmRSS. `children` tracks the
 * process for the caller's clean-up on failure.
 */
export async function idleRss(cmd: string, argv: string[], env: NodeJS.ProcessEnv, opts: { readyText?: string; afterReady?: () => Promise<unknown>; children?: Set<ChildProcess> } = {}): Promise<IdleRss> {
  const readyText = opts.readyText;
  const children = opts.children ?? new Set<ChildProcess>();
  const child = spawn(cmd, argv, { env, stdio: ["ignore", "pipe", "pipe"] });
  children.add(child);
  let out = "";
  let err = "";
  child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
  try {
    await new Promise<void>((ok, fail) => {
      const t = setTimeout(() => fail(new Error(`${argv.join(" ")}: not ready after 120 s; stderr: ${err.slice(-1000)}`)), 120_000);
      child.once("exit", (code) => fail(new Error(`${argv.join(" ")} exited with ${code}; stderr: ${err.slice(-1000)}`)));
      const check = () => {
        if (!readyText || out.includes(readyText)) {
          clearTimeout(t);
          ok();
        }
      };
      child.stdout!.on("data", (d: Buffer) => {
        out += d.toString();
        check();
      });
      check();
    });
    await opts.afterReady?.();
    const t0 = Date.now();
    const readyRssMB = rssMB(child.pid!);
    const samples: number[] = [];
    for (;;) {
      await new Promise((r) => setTimeout(r, 250));
      samples.push(rssMB(child.pid!));
      const last = samples.slice(-12);
      if (Date.now() - t0 >= IDLE_MIN_MS && last.length === 12 && Math.max(...last) - Math.min(...last) <= 0.5) break;
      if (Date.now() - t0 > 120_000) break;
    }
    return { rssMB: samples[samples.length - 1]!, readyRssMB, settledAfterMs: Date.now() - t0, ...rssParts(child.pid!) };
  } finally {
    const gone = new Promise((r) => (child.exitCode === null ? child.once("exit", r) : r(undefined)));
    child.kill("SIGTERM");
    const t = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await gone;
    clearTimeout(t);
    children.delete(child);
  }
}

