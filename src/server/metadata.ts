import { spawn } from "node:child_process";
import { watch, type FSWatcher } from "node:fs";
import { readFile } from "node:fs/promises";
import { basename, dirname } from "node:path";
import { parse as parseYaml } from "yaml";
import type { Logger } from "pino";

// Facts come from the real `facter --json`, merged with a YAML facts file (which wins, so operators
// can pin or add facts), refreshed on an interval. Classes come from the classes file of the
// node's own Puppet (ClassesSource), re-read whenever Puppet rewrites it.

/**
 * Runs `facter --json`. Facter exits non-zero when some fact fails to resolve (in containers, for
 * instance, it cannot read /proc/1/environ) yet still prints every other fact: a JSON object on
 * stdout is used whatever the exit code, and `onPartial` hears about the failure.
 */
export function runFacter(command: string, timeoutMs = 60_000, onPartial?: (reason: string) => void): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, ["--json"], { stdio: ["ignore", "pipe", "pipe"] });
    const out: Buffer[] = [];
    let err = "";
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.stdout.on("data", (d: Buffer) => out.push(d));
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    child.once("error", (e) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ${command}: ${e.message} (apt-get install facter, or set facts.facter: false)`));
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      let v: unknown;
      try {
        v = JSON.parse(Buffer.concat(out).toString("utf8")) as unknown;
        if (!v || typeof v !== "object" || Array.isArray(v)) throw new Error("not an object");
      } catch (e) {
        if (code !== 0) return reject(new Error(`${command} --json exited ${code}: ${err.slice(-500)}`));
        return reject(new Error(`${command} --json printed something that is not a JSON object: ${(e as Error).message}`));
      }
      if (code !== 0) onPartial?.(`${command} --json exited ${code} but printed facts; some did not resolve: ${err.slice(-500)}`);
      resolve(v as Record<string, unknown>);
    });
  });
}

export async function readFactsFile(path: string): Promise<Record<string, unknown>> {
  const v = parseYaml(await readFile(path, "utf8")) as unknown;
  if (v === null || v === undefined) return {};
  if (typeof v !== "object" || Array.isArray(v)) throw new Error(`facts file ${path} must hold a mapping of fact names to values`);
  return v as Record<string, unknown>;
}

export async function readClassesFile(path: string): Promise<string[]> {
  const text = await readFile(path, "utf8");
  return [...new Set(text.split(/\r?\n/).map((l) => l.trim()).filter(Boolean))].sort();
}

export interface FactSourceOptions {
  facter: boolean;
  facterCommand: string;
  factsFile?: string;
  extra: Record<string, unknown>;
  log: Logger;
}

/** Holds the node's current facts; `refresh()` reloads them, keeping the last good set on error. */
export class FactSource {
  facts: Record<string, unknown> = {};
  private facterFacts: Record<string, unknown> = {};
  constructor(private readonly opts: FactSourceOptions) {
    this.facts = { ...opts.extra };
  }

  async refresh(): Promise<void> {
    const { opts } = this;
    if (opts.facter) {
      try {
        this.facterFacts = await runFacter(opts.facterCommand, undefined, (reason) => opts.log.warn({ err: reason }, "facter reported errors; using the facts it resolved"));
      } catch (e) {
        opts.log.warn({ err: (e as Error).message }, "facter failed; keeping the previous facts");
      }
    }
    let fileFacts: Record<string, unknown> = {};
    if (opts.factsFile) {
      try {
        fileFacts = await readFactsFile(opts.factsFile);
      } catch (e) {
        opts.log.warn({ err: (e as Error).message, file: opts.factsFile }, "cannot read facts file; keeping the previous facts");
        return;
      }
    }
    this.facts = { ...this.facterFacts, ...opts.extra, ...fileFacts };
  }
}

export interface ClassesSourceOptions {
  /** Where the classes file is now; asked at the first refresh and whenever locationKey() changes. */
  locate: () => Promise<string>;
  /** A cheap signature of what decides the location (puppet.conf's stat); absent: it never moves. */
  locationKey?: () => string;
  /** The fallback when no watch event comes (a filesystem without inotify, a directory made later). */
  pollMs: number;
  /** How long a burst of change events must be quiet before the file is read: Puppet rewrites it in place. */
  settleMs?: number;
  log: Logger;
  /** Called when the classes changed (not for the first read). */
  onChange?: (classes: string[]) => void;
}

/**
 * The node's classes, from the classes file its Puppet agent rewrites after every catalog run
 * (the daemon's, cron's, muster's): watched (fs.watch on its directory, since the directory may
 * be made or the file replaced), polled every pollMs as a fallback, and re-read at once by
 * refresh(). A missing file means no classes (Puppet has not run); an unreadable one keeps the
 * last good list.
 */
export class ClassesSource {
  classes: string[] = [];
  /** The classes file followed, once located. */
  path: string | undefined;
  private key: string | undefined;
  private watcher: FSWatcher | undefined;
  private watchedDir: string | undefined;
  private poll: NodeJS.Timeout | undefined;
  private settle: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private queued: Promise<void> | undefined;
  private loaded = false;
  private stopped = false;

  constructor(private readonly opts: ClassesSourceOptions) {}

  /** The first read, then watching and polling. */
  async start(): Promise<void> {
    await this.refresh();
    this.poll = setInterval(() => void this.refresh(), this.opts.pollMs);
    this.poll.unref();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.poll);
    clearTimeout(this.settle);
    this.watcher?.close();
    this.watcher = undefined;
  }

  /**
   * Re-read the file now. Resolves once the classes reflect the file as it is after this call:
   * a call while a read is under way (which may have missed the change) queues one more.
   */
  refresh(): Promise<void> {
    if (!this.running) {
      this.running = this.pass().finally(() => (this.running = undefined));
      return this.running;
    }
    this.queued ??= this.running.then(() => {
      this.queued = undefined;
      return this.refresh();
    });
    return this.queued;
  }

  private async pass(): Promise<void> {
    const { opts } = this;
    const key = opts.locationKey?.() ?? "";
    if (this.path === undefined || key !== this.key) {
      try {
        const path = await opts.locate();
        if (path !== this.path) opts.log.info({ file: path }, "following Puppet's classes file");
        this.path = path;
        this.key = key;
      } catch (e) {
        opts.log.warn({ err: (e as Error).message }, "cannot tell where Puppet's classes file is; keeping the previous classes");
        if (this.path === undefined) return;
      }
    }
    const path = this.path;
    this.watchDir(dirname(path));
    let classes: string[];
    try {
      classes = await readClassesFile(path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") {
        opts.log.warn({ err: (e as Error).message, file: path }, "cannot read classes file; keeping the previous classes");
        return;
      }
      classes = []; // Puppet has not run yet
    }
    const changed = !sameList(classes, this.classes);
    this.classes = classes;
    if (changed && this.loaded && !this.stopped) {
      try {
        opts.onChange?.(classes);
      } catch (e) {
        opts.log.warn({ err: (e as Error).message }, "classes change handler failed");
      }
    }
    this.loaded = true;
  }

  /** Watch the file's directory (the file itself may be replaced); retried by the poll until it exists. */
  private watchDir(dir: string): void {
    if (this.stopped || (this.watcher && this.watchedDir === dir)) return;
    this.watcher?.close();
    this.watcher = undefined;
    const file = basename(this.path ?? "");
    try {
      const w = watch(dir, { persistent: false }, (_event, name) => {
        if (name !== null && name !== file) return;
        clearTimeout(this.settle);
        this.settle = setTimeout(() => void this.refresh(), this.opts.settleMs ?? 200);
        this.settle.unref();
      });
      w.on("error", () => {
        // e.g. the directory was removed: fall back to the poll, which watches again
        w.close();
        if (this.watcher === w) this.watcher = undefined;
      });
      this.watcher = w;
      this.watchedDir = dir;
    } catch {
      // the directory does not exist yet (Puppet makes it on its first run): the poll retries
    }
  }
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}
