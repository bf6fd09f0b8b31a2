import type { Bucket, BucketEntry, Buckets } from "../broker/bucket.js";
import { bucketKey, DEFAULT_ALIVE_BUCKET, DEFAULT_PUPPET_RUNS_BUCKET, DEFAULT_SERVICES_BUCKET } from "../protocol/buckets.js";
import { parseHeartbeat, type Heartbeat } from "../protocol/heartbeat.js";
import { DEFAULT_PUPPET_RUN_HISTORY, parsePuppetRun, type PuppetRunRecord } from "../protocol/puppet-run.js";
import { parseServiceBeat, type ServiceBeat } from "../protocol/service.js";

// The readers' side of the two buckets nodes write (protocol/heartbeat.ts, protocol/puppet-run.ts)
// and of the services bucket (protocol/service.ts; src/beacon.ts writes it): the one place that
// opens, reads, watches and forgets them. Values that do not parse (the buckets are writable by admins) are
// skipped and counted.

/** How long a silent node's last heartbeat is kept (and the node reported unreachable): a week. */
export const ALIVE_TTL_MS = 7 * 86_400_000;
/** How long a Puppet run is kept: 30 days. */
export const PUPPET_RUNS_TTL_MS = 30 * 86_400_000;

export interface Beat {
  heartbeat: Heartbeat;
  /** When the broker stored it, ms epoch. */
  at: number;
}

/** A node's value written, or its key dropped, an observer's probe come back (the alive bucket), and once, `caught-up`. */
export type NodeValueChange<V> = { type: "value"; identity: string; value: V } | { type: "removed"; identity: string } | { type: "probe"; observer: string; time: number; nonce: string } | { type: "caught-up" };

/**
 * Where observers write their probes in a bucket they watch (`=observer.<name>`): no node's or
 * service's key starts with "=" (bucketKey never leaves one in an identity, which holds none). An
 * observer that sees its own probe come back through its watch knows the watch is current up to the
 * probe's time (view.ts).
 */
export const PROBE_PREFIX = "=observer.";

/** A probe's value: who wrote it, when (its own clock, ms epoch), and which process (two on one host share the key). */
function parseProbe(e: BucketEntry): { observer: string; time: number; nonce: string } | undefined {
  try {
    const v = JSON.parse(new TextDecoder().decode(e.value)) as { observer?: unknown; time?: unknown; nonce?: unknown };
    return typeof v.observer === "string" && typeof v.time === "number" && Number.isFinite(v.time) ? { observer: v.observer, time: v.time, nonce: typeof v.nonce === "string" ? v.nonce : "" } : undefined;
  } catch {
    return undefined;
  }
}

export interface Watching<C> extends AsyncIterable<C> {
  stop(): void;
}

/** A bucket of per-node values: read, watched and forgotten through one decoder. */
class NodeValues<V> {
  invalid = 0;
  /** When the broker stored the newest value `latest` read (probes included), ms epoch; 0 before a read. */
  newest = 0;
  /** The observers' probes `latest` read, by observer: a reader finding its own knows the read is as new as its probe. */
  readonly probes = new Map<string, { time: number; nonce: string }>();

  constructor(
    readonly bucket: Bucket,
    private readonly parse: (e: BucketEntry) => { identity: string; value: V } | undefined,
  ) {}

  private decode(e: BucketEntry): { identity: string; value: V } | undefined {
    if (e.key.startsWith(PROBE_PREFIX)) return undefined; // an observer's, not a value: never counted invalid
    const v = e.operation === "PUT" && e.value.length > 0 ? this.parse(e) : undefined;
    if (!v && e.operation === "PUT" && e.value.length > 0) this.invalid++;
    return v;
  }

  /** Every node's latest value, read once. */
  async latest(timeoutMs?: number): Promise<Map<string, V>> {
    const out = new Map<string, V>();
    for (const e of (await this.bucket.values(timeoutMs)).entries) {
      this.newest = Math.max(this.newest, e.created);
      const p = e.key.startsWith(PROBE_PREFIX) ? parseProbe(e) : undefined;
      if (p) this.probes.set(p.observer, p);
      const v = this.decode(e);
      if (v) out.set(v.identity, v.value);
    }
    return out;
  }

  /** One node's latest value (a single read: what a look at a few named nodes needs). */
  async get(identity: string): Promise<V | undefined> {
    const e = await this.bucket.get(bucketKey(identity));
    return e && this.decode(e)?.value;
  }

  /** Every node's latest value, then each one as it is written. */
  async watch(): Promise<Watching<NodeValueChange<V>>> {
    const w = await this.bucket.watch();
    const names = new Map<string, string>(); // key -> identity: a purge says only the key
    const decode = (e: BucketEntry) => this.decode(e);
    async function* changes(): AsyncGenerator<NodeValueChange<V>> {
      for await (const c of w) {
        if (c.kind === "caught-up") {
          yield { type: "caught-up" };
          continue;
        }
        if (c.entry.key.startsWith(PROBE_PREFIX)) {
          const p = c.entry.operation === "PUT" ? parseProbe(c.entry) : undefined;
          if (p) yield { type: "probe", ...p };
          continue;
        }
        const v = decode(c.entry);
        if (v) {
          names.set(c.entry.key, v.identity);
          yield { type: "value", identity: v.identity, value: v.value };
        } else if (names.has(c.entry.key)) {
          const identity = names.get(c.entry.key)!;
          names.delete(c.entry.key);
          yield { type: "removed", identity };
        }
      }
    }
    const it = changes();
    return { [Symbol.asyncIterator]: () => it, stop: () => w.stop() };
  }

  /** A node's kept values, oldest first (a purge drops what came before). */
  async history(identity: string): Promise<V[]> {
    let out: V[] = [];
    for (const e of await this.bucket.history(bucketKey(identity))) {
      if (e.operation !== "PUT") out = [];
      else {
        const v = this.decode(e);
        if (v) out.push(v.value);
      }
    }
    return out;
  }

  /**
   * Writes this observer's probe (an admin's credential may; a node's may not): resolves once
   * stored. Its coming back through the observer's watch is what says the watch is current.
   */
  async probe(observer: string, nonce = "", time = Date.now()): Promise<void> {
    await this.bucket.put(`${PROBE_PREFIX}${bucketKey(observer)}`, JSON.stringify({ observer, time, nonce }));
  }

  /** Drops a node's values (decommission, forget): health stops reporting it. */
  async forget(identity: string): Promise<void> {
    await this.bucket.purge(bucketKey(identity));
  }
}

type StoreOpen = { create?: boolean; name?: string; replicas?: number };

/** Opens a store's bucket: created with its options (and `replicas`) when `create` (an admin, the console), else only if it exists. */
async function open(buckets: Buckets, name: string, options: { history: number; ttlMs: number }, o: StoreOpen): Promise<Bucket | undefined> {
  return o.create ? buckets.bucket(o.name ?? name, { create: { ...options, ...(o.replicas ? { replicas: o.replicas } : {}) } }) : buckets.bucketIfExists(o.name ?? name);
}

/** The alive bucket: each node's latest heartbeat, with when the broker stored it. */
export class AliveStore extends NodeValues<Beat> {
  static readonly bucketOptions = { history: 1, ttlMs: ALIVE_TTL_MS };

  /** The bucket (`create`: made when missing, as the console does); undefined when absent and not created. */
  static async open(buckets: Buckets, opts: StoreOpen = {}): Promise<AliveStore | undefined> {
    const b = await open(buckets, DEFAULT_ALIVE_BUCKET, AliveStore.bucketOptions, opts);
    return b && new AliveStore(b);
  }

  private constructor(bucket: Bucket) {
    super(bucket, (e) => {
      const r = parseHeartbeat(e.value, e.key);
      return r.ok ? { identity: r.heartbeat.identity, value: { heartbeat: r.heartbeat, at: e.created } } : undefined;
    });
  }
}

/** The Puppet runs bucket: each node's last runs. */
export class PuppetRunStore extends NodeValues<PuppetRunRecord> {
  static readonly bucketOptions = { history: DEFAULT_PUPPET_RUN_HISTORY, ttlMs: PUPPET_RUNS_TTL_MS };

  static async open(buckets: Buckets, opts: StoreOpen = {}): Promise<PuppetRunStore | undefined> {
    const b = await open(buckets, DEFAULT_PUPPET_RUNS_BUCKET, PuppetRunStore.bucketOptions, opts);
    return b && new PuppetRunStore(b);
  }

  private constructor(bucket: Bucket) {
    super(bucket, (e) => {
      const r = parsePuppetRun(e.value, e.key);
      return r.ok ? { identity: r.run.identity, value: r.run } : undefined;
    });
  }

  /** A node's kept runs, newest first, each run once (a node that restarts writes its last run again). */
  async runs(identity: string): Promise<PuppetRunRecord[]> {
    const byTime = new Map((await this.history(identity)).map((r) => [r.time, r]));
    return [...byTime.values()].sort((a, b) => b.time - a.time);
  }
}

/** A service's latest beat, and when the broker stored it. */
export interface ServiceSeen {
  beat: ServiceBeat;
  /** When the broker stored it, ms epoch. */
  at: number;
}

/** The services bucket: each service's latest beat, keyed `<role>.<name>` (values and changes name that key). */
export class ServiceStore extends NodeValues<ServiceSeen> {
  static readonly bucketOptions = { history: 1, ttlMs: ALIVE_TTL_MS };

  static async open(buckets: Buckets, opts: StoreOpen = {}): Promise<ServiceStore | undefined> {
    const b = await open(buckets, DEFAULT_SERVICES_BUCKET, ServiceStore.bucketOptions, opts);
    return b && new ServiceStore(b);
  }

  private constructor(bucket: Bucket) {
    super(bucket, (e) => {
      const r = parseServiceBeat(e.value, e.key);
      return r.ok ? { identity: e.key, value: { beat: r.beat, at: e.created } } : undefined;
    });
  }
}
