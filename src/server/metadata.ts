import { statSync, watch, type FSWatcher } from "node:fs";
import { readFile } from "node:fs/promises";
import { basename, dirname } from "node:path";
import { parse as parseYaml } from "yaml";
import type { Logger } from "pino";

// Facts are the ones Puppet uses (`puppet facts show` as root: puppet/facter.ts, through the
// privileged helper for an unprivileged daemon), merged with a YAML facts file (which wins, so
// operators can pin or add facts). The file is re-read on an interval; Puppet's view is gathered
// again after each Puppet run and otherwise once `gatherEveryMs` has passed: it changes with
// the runs, and each gather starts the root helper and a Ruby process. Classes come from the
// classes file of the node's own Puppet (ClassesSource), re-read whenever Puppet rewrites it.

export async function readFactsFile(path: string): Promise<Record<string, unknown>> {
  const v = parseYaml(await readFile(path, "utf8")) as unknown;
  if (v === null || v === undefined) return {};
  if (typeof v !== "object" || Array.isArray(v)) throw new Error(`facts file ${path} must hold a mapping of fact names to values`);
  return v as Record<string, unknown>;
}

export async function readClassesFile(path: string): Promise<string[]> {
  return classesOf(await readFile(path, "utf8"));
}

/** Pure: the classes file's text as a sorted list of distinct classes. */
export function classesOf(text: string): string[] {
  return [...new Set(text.split(/\r?\n/).map((l) => l.trim()).filter(Boolean))].sort();
}

export interface FactSourceOptions {
  /** Gathers the node's facts (Puppet's view, puppet/facter.ts); absent: facts come from the file and `extra` alone. */
  gather?: () => Promise<Record<string, unknown>>;
  factsFile?: string;
  extra: Record<string, unknown>;
  log: Logger;
  /** A refresh gathers only when the last gather is this old (ms); absent: every refresh gathers. */
  gatherEveryMs?: number;
  now?: () => number;
}

/** Holds the node's current facts; `refresh()` reloads them, keeping the last good set on error. */
export class FactSource {
  facts: Record<string, unknown> = {};
  private facterFacts: Record<string, unknown> = {};
  constructor(private readonly opts: FactSourceOptions) {
    this.facts = { ...opts.extra };
  }

  /** When Puppet's view was last gathered (ms; 0: never). */
  gatheredAt = 0;

  private queue: Promise<void> = Promise.resolve();

  /**
   * Reloads the facts file, and gathers Puppet's view when `gather` is true (a Puppet run just
   * ended, the node starts or switches phase) or when the last gather is `gatherEveryMs` old.
   * One at a time: a refresh asked for during another runs after it.
   */
  refresh(gather?: boolean): Promise<void> {
    const next = this.queue.then(() => this.load(gather));
    this.queue = next.catch(() => undefined);
    return next;
  }

  private async load(gather?: boolean): Promise<void> {
    const { opts } = this;
    const now = (opts.now ?? Date.now)();
    const due = gather ?? (opts.gatherEveryMs === undefined || this.gatheredAt === 0 || now - this.gatheredAt >= opts.gatherEveryMs);
    if (opts.gather && due) {
      try {
        this.facterFacts = await opts.gather();
        this.gatheredAt = now;
      } catch (e) {
        opts.log.warn({ err: (e as Error).message }, "cannot gather the node's facts; keeping the previous facts");
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

/**
 * Tells when a file may have changed: fs.watch on its directory (Puppet replaces or rewrites
 * files; a directory watch sees both), or, while that directory does not exist yet, on the nearest
 * ancestor that does, moving down as directories appear. Events are coalesced until `settleMs` of
 * quiet, since a writer may need several writes. Best effort: callers poll as well.
 */
export class FileWatch {
  private watcher: FSWatcher | undefined;
  private watched: string | undefined;
  private settle: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private target: string,
    private readonly onChange: () => void,
    private readonly settleMs = 200,
  ) {
    this.arm();
  }

  /** Follow another file from now on. */
  retarget(target: string): void {
    if (target === this.target) return;
    this.target = target;
    this.unwatch();
    this.arm();
  }

  /** (Re)establish the watch if it is missing or no longer the deepest possible; cheap when in place. */
  arm(): void {
    if (this.closed) return;
    const file = this.target;
    // the deepest existing directory on the way to the file, and the name to listen for in it
    let dir = dirname(file);
    let name = basename(file);
    while (!isDir(dir)) {
      const up = dirname(dir);
      if (up === dir) return;
      name = basename(dir);
      dir = up;
    }
    if (this.watcher && this.watched === dir) return;
    this.unwatch();
    try {
      const w = watch(dir, { persistent: false }, (_event, changed) => {
        if (changed !== null && changed !== name) return;
        if (dir !== dirname(this.target)) this.arm(); // a directory on the way appeared: go deeper
        clearTimeout(this.settle);
        this.settle = setTimeout(this.onChange, this.settleMs);
        this.settle.unref();
      });
      w.on("error", () => {
        // e.g. the directory was removed: the next arm() (the caller's poll) watches again
        w.close();
        if (this.watcher === w) this.watcher = undefined;
      });
      this.watcher = w;
      this.watched = dir;
    } catch {
      // vanished meanwhile: the caller's poll arms again
    }
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.settle);
    this.unwatch();
  }

  private unwatch(): void {
    this.watcher?.close();
    this.watcher = undefined;
    this.watched = undefined;
  }
}

function isDir(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

export interface ClassesSourceOptions {
  /** Where the classes file is now; asked at the first refresh and whenever locationKey() changes. */
  locate: () => Promise<string>;
  /** A cheap signature of what decides the location (puppet.conf's stat); absent: it never moves. */
  locationKey?: () => string;
  /** A file whose change may move the classes file (puppet.conf): watched too. */
  locationFile?: string;
  /** The fallback when no watch event comes (a filesystem without inotify, say). */
  pollMs: number;
  /** How long a burst of change events must be quiet before the file is read: Puppet rewrites it in place. */
  settleMs?: number;
  log: Logger;
  /** Called when the classes changed (not for the first read). */
  onChange?: (classes: string[]) => void;
  /**
   * The classes file's text as root reads it (the privileged helper), for when the daemon may not
   * read it itself: Puppet keeps it 0640 in a 0750 directory where muster did not provision.
   */
  readAsRoot?: () => Promise<string | null>;
}

/**
 * The node's classes, from the classes file its Puppet agent rewrites after every catalog run
 * (the daemon's, cron's, muster's): watched, polled every pollMs as a fallback, and re-read at
 * once by refresh(). A missing file means no classes (Puppet has not run); an unreadable one
 * keeps the last good list.
 */
export class ClassesSource {
  classes: string[] = [];
  /** The classes file followed, once located. */
  path: string | undefined;
  private key: string | undefined;
  private fileWatch: FileWatch | undefined;
  private confWatch: FileWatch | undefined;
  private poll: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private queued: Promise<void> | undefined;
  private loaded = false;
  private stopped = false;

  constructor(private readonly opts: ClassesSourceOptions) {}

  /** The first read, then watching and polling. */
  async start(): Promise<void> {
    await this.refresh();
    const again = () => void this.refresh();
    if (this.opts.locationFile) this.confWatch = new FileWatch(this.opts.locationFile, again, this.opts.settleMs);
    this.poll = setInterval(() => {
      this.confWatch?.arm();
      again();
    }, this.opts.pollMs);
    this.poll.unref();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.poll);
    this.fileWatch?.close();
    this.confWatch?.close();
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
    if (!this.stopped) {
      if (this.fileWatch) this.fileWatch.retarget(path);
      else this.fileWatch = new FileWatch(path, () => void this.refresh(), opts.settleMs);
      this.fileWatch.arm();
    }
    let classes: string[];
    try {
      classes = await readClassesFile(path);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ENOENT") classes = []; // Puppet has not run yet
      else if ((code === "EACCES" || code === "EPERM") && opts.readAsRoot) {
        try {
          classes = classesOf((await opts.readAsRoot()) ?? "");
        } catch (e2) {
          opts.log.warn({ err: (e2 as Error).message, file: path }, "cannot read classes file, even through the privileged helper; keeping the previous classes");
          return;
        }
      } else {
        opts.log.warn({ err: (e as Error).message, file: path }, "cannot read classes file; keeping the previous classes");
        return;
      }
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
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}
