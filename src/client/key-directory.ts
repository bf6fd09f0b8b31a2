import type { Bucket } from "../broker/bucket.js";
import { identityOfNodeKeyName, parseNodeKeyEntry, type NodeKeyEntry } from "../protocol/node-keys.js";

// The client's view of the node-key directory (protocol/node-keys.ts): every entry read once,
// then kept current by the same watch. Unusable entries are skipped and counted, never trusted.

export class KeyDirectory {
  private readonly keys = new Map<string, NodeKeyEntry>();
  /** Entries skipped as malformed. */
  invalid = 0;
  private stopWatch: () => void = () => undefined;

  /** Why there is no directory (no bucket, no JetStream, no permission), when there is none. */
  constructor(readonly unavailable?: string) {}

  /** The key this node signs with, when the directory knows it. */
  get(identity: string): NodeKeyEntry | undefined {
    return this.keys.get(identity);
  }

  get size(): number {
    return this.keys.size;
  }

  /** Reads every entry of `bucket` and resolves once they are in; later changes keep arriving. */
  static async watch(bucket: Bucket): Promise<KeyDirectory> {
    const dir = new KeyDirectory();
    const it = await bucket.watch();
    dir.stopWatch = () => it.stop();
    let resolveLoaded!: () => void;
    const loaded = new Promise<void>((r) => (resolveLoaded = r));
    void (async () => {
      for await (const c of it) {
        if (c.kind === "caught-up") {
          resolveLoaded();
          continue;
        }
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
    this.stopWatch();
  }
}

/**
 * The directory in `bucket` (opened by `open`; none there gives an unavailable one), read within
 * `timeoutMs`. A read that outlives the limit is not left running: when it lands, its watch is
 * stopped. (A client reloads an unavailable directory a minute later, so every slow read would
 * otherwise leave one more consumer on the bucket for good.)
 */
export async function readKeyDirectory(open: () => Promise<Bucket | undefined>, name: string, timeoutMs: number): Promise<KeyDirectory> {
  let timer: NodeJS.Timeout | undefined;
  let late = false;
  const timeout = new Promise<KeyDirectory>(
    (r) =>
      (timer = setTimeout(() => {
        late = true;
        r(new KeyDirectory(`reading the key directory ${name} timed out after ${timeoutMs} ms`));
      }, timeoutMs)),
  );
  const read = (async () => {
    try {
      const b = await open();
      if (!b) return new KeyDirectory(`no key directory (bucket ${name}) on this broker`);
      const dir = await KeyDirectory.watch(b);
      if (late) dir.close();
      return dir;
    } catch (e) {
      return new KeyDirectory(`cannot read the key directory ${name}: ${(e as Error).message}`);
    }
  })();
  try {
    return await Promise.race([read, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
