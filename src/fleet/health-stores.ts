import type { Bucket, BucketEntry, Buckets } from "../broker/bucket.js";
import { bucketKey, DEFAULT_ALIVE_BUCKET, DEFAULT_PUPPET_RUNS_BUCKET } from "../protocol/buckets.js";
import { parseHeartbeat, type Heartbeat } from "../protocol/heartbeat.js";
import { DEFAULT_PUPPET_RUN_HISTORY, parsePuppetRun, type PuppetRunRecord } from "../protocol/puppet-run.js";

// The readers' side of the two buckets nodes write (protocol/heartbeat.ts, protocol/puppet-run.ts):
// the one place that opens, reads, watches and forgets them. Values that do not parse (the buckets
// are writable by admins) are skipped and counted.

/** How long a silent node's last heartbeat is kept (and the node reported unreachable): a week. */
export const ALIVE_TTL_MS = 7 * 86_400_000;
/** How long a Puppet run is kept: 30 days. */
export const PUPPET_RUNS_TTL_MS = 30 * 86_400_000;

export interface Beat {
  heartbeat: Heartbeat;
  /** When the broker stored it, ms epoch. */
  at: number;
}

export type AliveChange = { type: "beat"; identity: string; beat: Beat } | { type: "removed"; identity: string } | { type: "caught-up" };
export type RunChange = { type: "run"; run: PuppetRunRecord } | { type: "removed"; identity: string } | { type: "caught-up" };

export interface Watching<C> extends AsyncIterable<C> {
  stop(): void;
}

/** Opens a bucket: created with `create` (an admin, the console), else only if it exists. */
async function openBucket(buckets: Buckets, name: string, create: { history: number; ttlMs: number } | undefined): Promise<Bucket | undefined> {
  return create ? buckets.bucket(name, { create }) : buckets.bucketIfExists(name);
}

/** Keys back to identities for deletes (a purge says only the key). */
class KeyNames {
  private readonly names = new Map<string, string>();
  seen(identity: string): void {
    this.names.set(bucketKey(identity), identity);
  }
  removed(key: string): string | undefined {
    const id = this.names.get(key);
    this.names.delete(key);
    return id;
  }
}

/** The alive bucket: each node's latest heartbeat. */
export class AliveStore {
  invalid = 0;
  static readonly bucketOptions = { history: 1, ttlMs: ALIVE_TTL_MS };

  private constructor(readonly bucket: Bucket) {}

  /** The bucket (`create`: made when missing, as the console does); undefined when absent and not created. */
  static async open(buckets: Buckets, opts: { create?: boolean; name?: string } = {}): Promise<AliveStore | undefined> {
    const b = await openBucket(buckets, opts.name ?? DEFAULT_ALIVE_BUCKET, opts.create ? AliveStore.bucketOptions : undefined);
    return b && new AliveStore(b);
  }

  private decode(e: BucketEntry): Beat | undefined {
    const r = parseHeartbeat(e.value, e.key);
    if (!r.ok) {
      this.invalid++;
      return undefined;
    }
    return { heartbeat: r.heartbeat, at: e.created };
  }

  /** Every node's latest heartbeat, read once. */
  async latest(timeoutMs?: number): Promise<Map<string, Beat>> {
    const out = new Map<string, Beat>();
    for (const e of (await this.bucket.values(timeoutMs)).entries) {
      const b = this.decode(e);
      if (b) out.set(b.heartbeat.identity, b);
    }
    return out;
  }

  /** Every node's latest heartbeat, then each one as it arrives. */
  async watch(): Promise<Watching<AliveChange>> {
    const w = await this.bucket.watch();
    const names = new KeyNames();
    const decode = (e: BucketEntry) => this.decode(e);
    async function* changes(): AsyncGenerator<AliveChange> {
      for await (const c of w) {
        if (c.kind === "caught-up") {
          yield { type: "caught-up" };
          continue;
        }
        const e = c.entry;
        const b = e.operation === "PUT" && e.value.length > 0 ? decode(e) : undefined;
        if (b) {
          names.seen(b.heartbeat.identity);
          yield { type: "beat", identity: b.heartbeat.identity, beat: b };
        } else {
          const id = names.removed(e.key);
          if (id) yield { type: "removed", identity: id };
        }
      }
    }
    const it = changes();
    return { [Symbol.asyncIterator]: () => it, stop: () => w.stop() };
  }

  /** Drops a node's heartbeat (decommission, forget): health stops reporting it. */
  async forget(identity: string): Promise<void> {
    await this.bucket.purge(bucketKey(identity));
  }
}

/** The Puppet runs bucket: each node's last runs. */
export class PuppetRunStore {
  invalid = 0;
  static readonly bucketOptions = { history: DEFAULT_PUPPET_RUN_HISTORY, ttlMs: PUPPET_RUNS_TTL_MS };

  private constructor(readonly bucket: Bucket) {}

  static async open(buckets: Buckets, opts: { create?: boolean; name?: string } = {}): Promise<PuppetRunStore | undefined> {
    const b = await openBucket(buckets, opts.name ?? DEFAULT_PUPPET_RUNS_BUCKET, opts.create ? PuppetRunStore.bucketOptions : undefined);
    return b && new PuppetRunStore(b);
  }

  private decode(e: BucketEntry): PuppetRunRecord | undefined {
    const r = parsePuppetRun(e.value, e.key);
    if (!r.ok) {
      this.invalid++;
      return undefined;
    }
    return r.run;
  }

  /** Every node's latest run, read once. */
  async latest(timeoutMs?: number): Promise<Map<string, PuppetRunRecord>> {
    const out = new Map<string, PuppetRunRecord>();
    for (const e of (await this.bucket.values(timeoutMs)).entries) {
      const r = this.decode(e);
      if (r) out.set(r.identity, r);
    }
    return out;
  }

  /** A node's kept runs, newest first, each run once (a node that restarts writes its last run again). */
  async history(identity: string): Promise<PuppetRunRecord[]> {
    const runs = new Map<number, PuppetRunRecord>();
    for (const e of await this.bucket.history(bucketKey(identity))) {
      if (e.operation !== "PUT") {
        runs.clear(); // purged (forgotten): what came before is gone
        continue;
      }
      const r = this.decode(e);
      if (r) runs.set(r.time, r);
    }
    return [...runs.values()].sort((a, b) => b.time - a.time);
  }

  /** Every node's latest run, then each run as it is written. */
  async watch(): Promise<Watching<RunChange>> {
    const w = await this.bucket.watch();
    const names = new KeyNames();
    const decode = (e: BucketEntry) => this.decode(e);
    async function* changes(): AsyncGenerator<RunChange> {
      for await (const c of w) {
        if (c.kind === "caught-up") {
          yield { type: "caught-up" };
          continue;
        }
        const e = c.entry;
        const r = e.operation === "PUT" && e.value.length > 0 ? decode(e) : undefined;
        if (r) {
          names.seen(r.identity);
          yield { type: "run", run: r };
        } else {
          const id = names.removed(e.key);
          if (id) yield { type: "removed", identity: id };
        }
      }
    }
    const it = changes();
    return { [Symbol.asyncIterator]: () => it, stop: () => w.stop() };
  }

  async forget(identity: string): Promise<void> {
    await this.bucket.purge(bucketKey(identity));
  }
}
