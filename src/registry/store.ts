import { EventEmitter } from "node:events";
import type { Bucket, BucketEntry, Buckets } from "../broker/bucket.js";
import type { Logger } from "pino";
import type { Filter } from "../protocol/types.js";
import { silentLogger } from "../log.js";
import { readRegistry } from "./bucket.js";
import { decodeRecord, keyFor, type RegistryRecord } from "./record.js";
import { isCurrent, registryStatus, selectNodes, type RegistryStatus } from "./select.js";

// Every registry record in memory, kept current by a KV watch: queries (HTTP, the query subject,
// the receiver's "unchanged?" check) never touch the broker. Loaded once with one streaming read
// (bucket.ts readRegistry), then the watch resumes right after the last sequence read.

export interface RegistryStoreEvents {
  /** A record was written (by this or another registry daemon). */
  update: [RegistryRecord];
  /** A record was deleted or purged, or expired (not seen within the bucket's max_age). */
  remove: [string];
}

export class RegistryStore extends EventEmitter<RegistryStoreEvents> {
  private readonly records = new Map<string, RegistryRecord>();
  private readonly byKey = new Map<string, string>();
  private stopped = false;
  private watcher: { stop(): void } | undefined;
  private retry: NodeJS.Timeout | undefined;
  private pruner: NodeJS.Timeout | undefined;
  private lastSequence = 0;
  /** Values in the bucket that were not valid records (skipped). */
  invalid = 0;

  private constructor(
    readonly kv: Bucket,
    readonly bucket: string,
    /** The bucket's expiry, ms (0: never). */
    readonly expireAfterMs: number,
    private readonly log: Logger,
  ) {
    super();
    this.setMaxListeners(0); // one per waiter: HTTP, the receiver, tests waiting on many nodes
  }

  /** Loads the bucket (which must exist) and follows it. */
  static async open(buckets: Buckets, bucket: string, log: Logger = silentLogger): Promise<RegistryStore> {
    const snapshot = await readRegistry(buckets, bucket);
    const kv = await buckets.bucket(bucket);
    const store = new RegistryStore(kv, bucket, snapshot.expireAfterMs, log);
    for (const r of snapshot.records) store.set(r);
    store.invalid = snapshot.invalid;
    store.lastSequence = snapshot.lastSequence;
    await store.follow();
    if (store.expireAfterMs > 0) {
      store.pruner = setInterval(() => store.prune(), Math.max(100, Math.min(store.expireAfterMs / 4, 60_000)));
      store.pruner.unref();
    }
    return store;
  }

  private async follow(): Promise<void> {
    const w = await this.kv.watch(this.lastSequence > 0 ? { fromRevision: this.lastSequence + 1 } : {});
    this.watcher = w;
    void (async () => {
      try {
        for await (const c of w) if (c.kind === "entry") this.apply(c.entry);
      } catch (e) {
        this.log.warn({ err: (e as Error).message }, "registry watch failed");
      }
      if (this.stopped) return;
      // The watch ended under us (broker restart, consumer lost): resume after what we have.
      this.log.warn({ bucket: this.bucket }, "registry watch ended; resuming");
      this.retry = setTimeout(() => void this.follow().catch((e: Error) => this.log.error({ err: e.message }, "cannot resume the registry watch")), 1000);
    })();
  }

  private apply(e: BucketEntry): void {
    this.lastSequence = Math.max(this.lastSequence, e.revision);
    if (e.operation !== "PUT" || e.value.length === 0) {
      const identity = this.byKey.get(e.key);
      if (identity !== undefined) {
        this.byKey.delete(e.key);
        this.records.delete(identity);
        this.emit("remove", identity);
      }
      return;
    }
    const r = decodeRecord(e.value);
    if (!r || keyFor(r.identity) !== e.key) {
      this.invalid++;
      this.log.warn({ key: e.key.slice(0, 120) }, "registry bucket holds a value that is not a registry record; skipped");
      return;
    }
    this.set(r);
    this.emit("update", r);
  }

  private set(r: RegistryRecord): void {
    this.records.set(r.identity, r);
    this.byKey.set(keyFor(r.identity), r.identity);
  }

  /** Drops records not seen within the expiry (the broker expires them without telling watchers). */
  prune(now = Date.now()): number {
    let n = 0;
    for (const r of this.records.values()) {
      if (!isCurrent(r, now, this.expireAfterMs)) {
        this.records.delete(r.identity);
        this.byKey.delete(keyFor(r.identity));
        this.emit("remove", r.identity);
        n++;
      }
    }
    return n;
  }

  get(identity: string, now = Date.now()): RegistryRecord | undefined {
    const r = this.records.get(identity);
    return r && isCurrent(r, now, this.expireAfterMs) ? r : undefined;
  }

  /** Current records (seen within the expiry), in no particular order. */
  *current(now = Date.now()): Iterable<RegistryRecord> {
    for (const r of this.records.values()) if (isCurrent(r, now, this.expireAfterMs)) yield r;
  }

  get size(): number {
    return this.records.size;
  }

  /** Records matching the filter, sorted by identity. Throws FilterError for filters the registry cannot answer. */
  select(filter: Filter, collective?: string, now = Date.now()): RegistryRecord[] {
    return selectNodes(this.records.values(), filter, { collective, now, expireAfterMs: this.expireAfterMs });
  }

  /** How full and fresh the store is (for `startedAt`, pass when the daemon started). */
  status(collective?: string, startedAt?: number, now = Date.now()): RegistryStatus {
    return registryStatus(this.records.values(), { collective, now, expireAfterMs: this.expireAfterMs, startedAt });
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.retry);
    clearInterval(this.pruner);
    this.watcher?.stop();
  }
}

