import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, openSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

// Starting muster's own processes (servers, provisioner, receiver) for the lab and the tests.
// Detached ones outlive us (the lab); attached ones die with us: a shell watchdog kills them if
// this process goes away without stopping them (a crashed test run leaks nothing).

export const MUSTER_BIN = fileURLToPath(new URL("../cli/main.js", import.meta.url));

export interface MusterProcess {
  pid: number;
  child?: ChildProcess;
  /** Resolves with the exit code (attached processes only). */
  exited: Promise<number | null>;
  /** undefined while it runs; its exit code (null: killed by a signal) once it has exited. */
  exitCode(): number | null | undefined;
  stop(signal?: NodeJS.Signals, graceMs?: number): Promise<void>;
}

/** Whether a process runs. Only a real pid: kill(0) and kill(-1) would mean our group or everyone. */
export function isAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export interface SpawnOptions {
  logFile: string;
  detached?: boolean;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
}

/** `bin`: another muster executable (an unpacked .deb's usr/bin/muster) instead of this one. */
export function spawnMuster(args: string[], opts: SpawnOptions & { bin?: string }): MusterProcess {
  return spawnProcess(opts.bin ? [opts.bin, ...args] : [process.execPath, MUSTER_BIN, ...args], opts);
}

/** Any lab process (socat relays, machines' supervisors), with the same detached/watchdog rules. */
export function spawnProcess(argv: string[], opts: SpawnOptions): MusterProcess {
  const out = openSync(opts.logFile, "a");
  let child: ChildProcess;
  try {
    const [cmd, ...args] = argv as [string, ...string[]];
    child = spawn(cmd, args, { detached: true, stdio: ["ignore", out, out], env: { ...process.env, ...opts.env }, cwd: opts.cwd });
  } finally {
    closeSync(out);
  }
  const pid = child.pid ?? -1;
  let code: number | null | undefined;
  const exited = new Promise<number | null>((resolve) => {
    child.once("exit", (c) => {
      code = c;
      resolve(c);
    });
    // not found or not executable: it never ran, and no exit follows
    child.once("error", () => {
      code ??= -1;
      resolve(code);
    });
  });
  let endWatchdog: (() => void) | undefined;
  if (opts.detached) child.unref();
  else if (pid > 0) endWatchdog = watchdog(pid);
  return {
    pid,
    child,
    exited,
    exitCode: () => code,
    async stop(signal = "SIGTERM", graceMs = 10_000) {
      if (pid > 0 && code === undefined) await stopChild(child, signal, graceMs);
      endWatchdog?.();
    },
  };
}

/**
 * A shell that sends `pid` SIGTERM when this process goes away without stopping it (a crashed
 * test run leaks nothing); call the returned function once `pid` is stopped.
 */
export function watchdog(pid: number): () => void {
  if (!(pid > 0)) return () => undefined; // never "kill -TERM -1": that is every process
  const w = spawn("/bin/sh", ["-c", 'while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done; kill -TERM "$2" 2>/dev/null', "watchdog", String(process.pid), String(pid)], { detached: true, stdio: "ignore" });
  w.unref();
  return () => {
    if (!w.pid) return;
    try {
      process.kill(-w.pid, "SIGKILL");
    } catch {
      /* gone */
    }
  };
}

/** Stops a child we spawned: `signal`, then SIGKILL after `graceMs`; resolves once it has exited. */
export async function stopChild(child: ChildProcess, signal: NodeJS.Signals = "SIGTERM", graceMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const gone = new Promise((r) => child.once("exit", r));
  try {
    child.kill(signal);
  } catch {
    /* already gone */
  }
  const t = setTimeout(() => child.exitCode === null && child.signalCode === null && child.kill("SIGKILL"), graceMs);
  // A detached child is unref'd: past the timer nothing else may hold the event loop, and `lab up`
  // stopping what it started after a failed step exited 13 (an unsettled await) before the exit
  // came, its error unsaid. This holds the loop until it does.
  const hold = setInterval(() => undefined, 1000);
  await gone;
  clearTimeout(t);
  clearInterval(hold);
}

/**
 * Stop a process we did not spawn (a detached one from an earlier `lab up`) by pid. `group`: its
 * whole process group (a detached process leads its own): socat's forked children with it.
 */
export async function stopPid(pid: number, graceMs = 10_000, o: { group?: boolean } = {}): Promise<void> {
  if (!isAlive(pid)) return;
  const signal = (sig: NodeJS.Signals) => {
    if (o.group) {
      try {
        return void process.kill(-pid, sig);
      } catch {
        // it leads no group (or the group is gone): the process alone, if it still runs
      }
    }
    if (isAlive(pid)) {
      try {
        process.kill(pid, sig);
      } catch {
        /* gone meanwhile */
      }
    }
  };
  signal("SIGTERM");
  const deadline = Date.now() + graceMs;
  while (isAlive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100)); // no exit event for a non-child
  if (isAlive(pid) || o.group) signal("SIGKILL"); // a group: its forked children too, which may outlive their parent
}

/**
 * When the process `pid` started (clock ticks after boot, /proc/<pid>/stat's 22nd field), which
 * with its pid names one process for good: pids come round again (32768 of them here, and a
 * suite's labs spawn thousands), so a pid written down earlier may be another's now.
 */
export function processStart(pid: number): string | undefined {
  return statFields(pid)?.[19];
}

/** A process's state letter (R, S, T when stopped...), undefined when it is gone. */
export function processState(pid: number): string | undefined {
  return statFields(pid)?.[0];
}

/** /proc/<pid>/stat's fields from the third (state) on: after the command's name, which may hold spaces and parentheses. */
function statFields(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  } catch {
    return undefined;
  }
}

/** A pid file's text: the pid and when that process started (processStart). */
export const pidFileText = (pid: number): string => `${pid} ${processStart(pid) ?? ""}`.trimEnd() + "\n";

/** The live process a pid file's text names: its pid when it runs and, where the file says when it started, is still that process. */
export function livePidOf(text: string): number | undefined {
  const [p, start] = text.trim().split(/\s+/);
  const pid = Number(p);
  if (!isAlive(pid)) return undefined;
  return start === undefined || processStart(pid) === start ? pid : undefined;
}

/** The command line a process runs with (empty when it is gone). */
export function cmdlineOf(pid: number): string {
  if (!isAlive(pid)) return "";
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replace(/\0/g, " ").trim();
  } catch {
    return "";
  }
}
