import type { KV } from "@nats-io/kv";
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

  /** Reads every entry of `kv` and resolves once they are in; later changes keep arriving. */
  static async watch(kv: KV): Promise<KeyDirectory> {
    const dir = new KeyDirectory();
    const status = await kv.status();
    const it = await kv.watch();
    dir.stopWatch = () => it.stop();
    let initial = status.values > 0;
    let resolveLoaded!: () => void;
    const loaded = new Promise<void>((r) => (resolveLoaded = r));
    if (!initial) resolveLoaded();
    void (async () => {
      for await (const e of it) {
        if (e.operation === "DEL" || e.operation === "PURGE") dir.keys.delete(identityOfNodeKeyName(e.key));
        else {
          const p = parseNodeKeyEntry(e.value, e.key);
          if (p.ok) dir.keys.set(p.entry.identity, p.entry);
          else dir.invalid++;
        }
        if (initial && e.delta === 0) {
          initial = false;
          resolveLoaded();
        }
      }
    })().catch(() => resolveLoaded());
    await loaded;
    return dir;
  }

  close(): void {
    this.stopWatch();
  }
}
