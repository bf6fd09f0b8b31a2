import type { Bucket } from "../broker/bucket.js";
import { identityOfNodeKeyName, parseNodeKeyEntry, type NodeKeyEntry } from "../protocol/node-keys.js";

// The client's view of the node-key directory (protocol/node-keys.ts): every entry read once,
// then kept current by the same watch. Unusable entries are skipped and counted, never trusted.

export class KeyDirectory {
  private readonly keys = new Map<string, NodeKeyEntry>();
  /** Entries skipped as malformed. */
  invalid = 0;
  private stopWatch: () => void = () => undefined;

  /**
   * Why there is no directory (no bucket, no JetStream, no permission), when there is none;
   * `timedOut`: the read was given up (a broker too busy to answer then), worth trying again soon.
   */
  constructor(
    readonly unavailable?: string,
    readonly timedOut = false,
  ) {}

  /** The key this node signs with, when the directory knows it. */
  get(identity: string): NodeKeyEntry | undefined {
    return this.keys.get(identity);
  }

  get size(): number {
    return this.keys.size;
  }

  /**
   * Reads every entry of `bucket` and resolves once they are in; later changes keep arriving.
   * `progress` is told of each change read (the reader's limit is on silence, not on size).
   */
  static async watch(bucket: Bucket, progress?: () => void, opened?: (dir: KeyDirectory) => void): Promise<KeyDirectory> {
    const dir = new KeyDirectory();
    const it = await bucket.watch();
    dir.stopWatch = () => it.stop();
    opened?.(dir);
    let resolveLoaded!: () => void;
    const loaded = new Promise<void>((r) => (resolveLoaded = r));
    void (async () => {
      for await (const c of it) {
        if (c.kind === "caught-up") {
          resolveLoaded();
          continue;
        }
        progress?.();
        const e = c.entry;
        if (e.operation === "DEL" || e.operation === "PURGE") dir.keys.delete(identityOfNodeKeyName(e.key));
        else {
          const p = parseNodeKeyEntry(e.value, e.key);
          if (p.ok) dir.keys.set(p.entry.identity, p.entry);
          else dir.invalid++;
        }
      }
    })()
      .catch(() => undefined)
      .finally(() => resolveLoaded()); // a watch that ended early leaves what it read
    await loaded;
    return dir;
  }

  close(): void {
    const stop = this.stopWatch;
    this.stopWatch = () => undefined;
    stop();
  }
}

/**
 * The directory in `bucket` (opened by `open`; none there gives an unavailable one). The read is
 * given up when nothing arrives for `idleMs` (opening the bucket included), or past `maxMs` in all:
 * a limit on silence, not on size, since 50,000 keys take seconds to arrive while a large call's
 * replies share the connection. A read given up is not left running: its watch is stopped, now or
 * when it opens. (A client reloads an unavailable directory a minute later, so every slow read
 * would otherwise leave one more consumer on the bucket for good.)
 */
export async function readKeyDirectory(open: () => Promise<Bucket | undefined>, name: string, idleMs: number, maxMs = Math.max(idleMs, 120_000)): Promise<KeyDirectory> {
  const t0 = performance.now();
  let timer: NodeJS.Timeout | undefined;
  let cap: NodeJS.Timeout | undefined;
  let late = false;
  let settled = false; // the later changes a kept directory follows are not the read's progress
  let read = 0;
  let reading: KeyDirectory | undefined;
  let giveUp!: (why: string) => void;
  const timeout = new Promise<KeyDirectory>((r) => {
    giveUp = (why) => {
      late = true;
      reading?.close();
      r(new KeyDirectory(`reading the key directory ${name} ${why} (${read} entries read in ${Math.round(performance.now() - t0)} ms)`, true));
    };
    timer = setTimeout(() => giveUp(`timed out after ${idleMs} ms with nothing arriving`), idleMs);
    cap = setTimeout(() => giveUp(`timed out after ${maxMs} ms in all`), maxMs);
  });
  const progress = () => {
    if (settled) return;
    read++;
    timer?.refresh();
  };
  const loading = (async () => {
    try {
      const b = await open();
      if (!b) return new KeyDirectory(`no key directory (bucket ${name}) on this broker`);
      if (late) return new KeyDirectory("given up");
      if (!settled) timer?.refresh(); // the bucket answered: the entries' silence counts from here
      const dir = await KeyDirectory.watch(b, progress, (d) => {
        reading = d;
        if (late) d.close();
      });
      if (late) dir.close();
      return dir;
    } catch (e) {
      return new KeyDirectory(`cannot read the key directory ${name}: ${(e as Error).message}`);
    }
  })();
  try {
    return await Promise.race([loading, timeout]);
  } finally {
    settled = true;
    clearTimeout(timer);
    clearTimeout(cap);
  }
}
