import type { NatsConnection } from "@nats-io/transport-node";
import type { KV, KvEntry } from "@nats-io/kv";
import type { JsMsg } from "@nats-io/jetstream";
import { MusterError } from "../errors.js";
import { kvStreamName } from "../protocol/buckets.js";

// muster's own key-value bucket, and the only place that makes one. A JetStream KV bucket is
// opened here and handed out as the small `Bucket` interface below: the registry, the agents'
// stores, the provisioner's state, the key directory and the client hold a Bucket and never the
// library's KV, its stream or its error codes. JetStream is imported on demand, so a process that
// never opens a bucket (an idle node, `muster --help`) never loads it.

/** One key's value as stored: a put, or the marker a delete or purge leaves. */
export interface BucketEntry {
  key: string;
  /** Empty for a delete or purge. */
  value: Uint8Array;
  /** The stream sequence of this write: what compare-and-set compares. */
  revision: number;
  operation: "PUT" | "DEL" | "PURGE";
  /** When the broker stored it, ms epoch (the broker's clock). */
  created: number;
}

/** What a watch delivers: every change, and once, when the values there at its start are all delivered, `caught-up`. */
export type BucketChange = { kind: "entry"; entry: BucketEntry } | { kind: "caught-up" };

export interface BucketWatch extends AsyncIterable<BucketChange> {
  stop(): void;
}

export interface BucketStatus {
  /** Messages held (every key's kept history, deletes included). */
  values: number;
  /** How long a value lives, ms (0: for ever). */
  ttlMs: number;
  history: number;
}

export interface Bucket {
  readonly name: string;
  /** The key's current value; undefined when absent, deleted or purged. */
  get(key: string): Promise<BucketEntry | undefined>;
  /** Unconditional write; resolves with the new revision. */
  put(key: string, value: Uint8Array | string): Promise<number>;
  /** Writes only when the key holds no value; else rejects with RevisionConflict. */
  create(key: string, value: Uint8Array | string): Promise<number>;
  /** Compare-and-set: writes only when the key is still at `revision`; else rejects with RevisionConflict. */
  update(key: string, value: Uint8Array | string, revision: number): Promise<number>;
  /** Leaves a delete marker (history kept). */
  delete(key: string): Promise<void>;
  /** Drops the key and its history; with `revision`, only while the key is still at it (else RevisionConflict). */
  purge(key: string, revision?: number): Promise<void>;
  /** Every key with a current value. */
  keys(): Promise<string[]>;
  /**
   * The current value of every key, then each change as it happens (`updatesOnly`: changes only;
   * `fromRevision`: every write from that revision on). `caught-up` follows the values there at the
   * start (at once when there are none, or with `updatesOnly`).
   */
  watch(opts?: { updatesOnly?: boolean; fromRevision?: number }): Promise<BucketWatch>;
  /**
   * The current value of every key, read once as one stream of last values (not a request per
   * key), with the highest revision read: a watch from the next one misses nothing. Rejects when
   * the read does not finish within `timeoutMs`.
   */
  values(timeoutMs?: number): Promise<BucketValues>;
  /** The key's kept values (the bucket's `history`), oldest first, deletes and purges included. */
  history(key: string): Promise<BucketEntry[]>;
  status(): Promise<BucketStatus>;
}

export interface BucketValues {
  /** Puts only, one per key. */
  entries: BucketEntry[];
  lastRevision: number;
}

/** A create or compare-and-set lost: someone else wrote the key first. */
export class RevisionConflict extends Error {
  constructor(
    readonly bucket: string,
    readonly key: string,
    cause: unknown,
  ) {
    super(`${bucket}/${key} was written by someone else first`, { cause });
    this.name = "RevisionConflict";
  }
}

/** Options a bucket is created with; an existing bucket keeps its own unless `enforceTtl`. */
export interface BucketCreate {
  history?: number;
  replicas?: number;
  /** How long a value lives, ms. */
  ttlMs?: number;
  /**
   * An existing bucket whose TTL differs is changed to `ttlMs` (the owner's config is the truth:
   * the registry's expiry, an agent's dedupe window).
   */
  enforceTtl?: boolean;
  /**
   * Reads by key go to the stream's leader, never a replica (JetStream's direct get lets any copy
   * answer, one still catching up after its member's return among them). For state that decides
   * what is done next: a provisioner read a node done before a broker's cut as in progress, and
   * provisioned it again. A bucket opened without creating it reads from the leader already.
   */
  leaderReads?: boolean;
}

/** No responders and timeouts are what a clustered JetStream answers while a server is down or a stream leader is elected. */
export function isTransient(e: unknown): boolean {
  const err = e as Error;
  return err?.name === "TimeoutError" || /jetstream is not enabled|no responders|timeout|503|disconnect|reconnect/i.test(err?.message ?? "") || unavailable(e);
}

/**
 * JetStream's answer while its meta group has no leader (error 10008, "JetStream system temporarily
 * unavailable"): seen in the site's broker cuts when a watch or a consumer was opened then, and
 * thrown for good where it was not asked again.
 */
const unavailable = (e: unknown) => /temporarily unavailable/i.test((e as Error)?.message ?? "");

/** Runs `op`, again with backoff while it fails transiently (`transient`, default isTransient), for at most `withinMs`. */
export async function retryTransient<T>(op: (attempt: number) => Promise<T>, withinMs = 20_000, transient: (e: unknown) => boolean = isTransient, signal?: AbortSignal): Promise<T> {
  const deadline = Date.now() + withinMs;
  for (let attempt = 0; ; attempt++) {
    try {
      return await op(attempt);
    } catch (e) {
      if (!transient(e) || Date.now() > deadline || signal?.aborted) throw e;
      await new Promise<void>((r) => {
        // backoff while the cluster recovers; a stop ends it at once
        const t = setTimeout(done, Math.min(100 * 2 ** attempt, 1000));
        function done() {
          clearTimeout(t);
          signal?.removeEventListener("abort", done);
          r();
        }
        signal?.addEventListener("abort", done, { once: true });
      });
    }
  }
}

const isConflict = (e: unknown) => /wrong last sequence|key exists|10071|10164/i.test((e as Error)?.message ?? "");
const isMissing = (e: unknown) => /stream not found|bucket not found|10059/i.test((e as Error)?.message ?? "");

function entryOf(e: KvEntry): BucketEntry {
  return { key: e.key, value: e.value, revision: e.revision, operation: e.operation, created: e.created.getTime() };
}

/** How long a last-value-per-key read waits for its consumer's first entry before asking for another consumer. */
const FIRST_ENTRY_MS = 5_000;

/** How long opening a bucket is retried through a broker outage: long enough for a leader election. */
const OPEN_RETRY_MS = 10_000;
/**
 * What opening retries: a request that timed out (a broker gone, a leader being elected), or one
 * JetStream answered as temporarily unavailable (its meta group electing). Not "no
 * responders" or "jetstream is not enabled": that is what a broker without JetStream answers at
 * once, and a client that merely looks for a bucket (node keys, the state) must learn it at once.
 */
export const openTimedOut = (e: unknown) => (e as Error)?.name === "TimeoutError" || /\btimeout\b/i.test((e as Error)?.message ?? "") || unavailable(e);

/**
 * Stops a library KV iterator and deletes the consumer behind it (the library keeps it as `_data`).
 * Stopped alone, an ordered consumer stays on the broker until its five-minute inactive threshold:
 * a daemon that watches and lists often leaves thousands there (issue 29's 10,000-node run).
 */
function stopAndDrop(it: { stop(): void }): void {
  it.stop();
  const c = (it as { _data?: { delete?: () => Promise<unknown> } })._data;
  if (typeof c?.delete === "function") void c.delete().catch(() => undefined);
}

/** The library's KV as a Bucket. */
class KvBucket implements Bucket {
  constructor(
    private readonly kv: KV,
    readonly name: string,
    private readonly nc: NatsConnection,
  ) {}

  async get(key: string): Promise<BucketEntry | undefined> {
    const e = await this.kv.get(key);
    return e && e.operation === "PUT" ? entryOf(e) : undefined;
  }

  put(key: string, value: Uint8Array | string): Promise<number> {
    return this.kv.put(key, value);
  }

  async create(key: string, value: Uint8Array | string): Promise<number> {
    try {
      return await this.kv.create(key, value);
    } catch (e) {
      throw isConflict(e) ? new RevisionConflict(this.name, key, e) : e;
    }
  }

  async update(key: string, value: Uint8Array | string, revision: number): Promise<number> {
    try {
      return await this.kv.update(key, value, revision);
    } catch (e) {
      throw isConflict(e) ? new RevisionConflict(this.name, key, e) : e;
    }
  }

  async delete(key: string): Promise<void> {
    await this.kv.delete(key);
  }

  async purge(key: string, revision?: number): Promise<void> {
    try {
      await this.kv.purge(key, revision !== undefined ? { previousSeq: revision } : undefined);
    } catch (e) {
      throw revision !== undefined && isConflict(e) ? new RevisionConflict(this.name, key, e) : e;
    }
  }

  async keys(timeoutMs = 30_000): Promise<string[]> {
    // through the same reader as values(), headers only: the library's keys() leaves its consumer
    // on the broker for five minutes, an empty bucket's included
    const out: string[] = [];
    await this.lastPerKey(true, timeoutMs, (key, m) => {
      const op = m.headers?.get("KV-Operation");
      if (op !== "DEL" && op !== "PURGE") out.push(key);
    });
    return out;
  }

  async watch(opts: { updatesOnly?: boolean; fromRevision?: number } = {}): Promise<BucketWatch> {
    const { KvWatchInclude } = await import("@nats-io/kv");
    // An empty bucket delivers nothing to catch up on: say so at once.
    // through a broker outage or a leader election the consumer's creation times out: asked again, as opening is
    const empty = opts.updatesOnly || opts.fromRevision !== undefined || (await retryTransient(() => this.kv.status(), OPEN_RETRY_MS, openTimedOut)).values === 0;
    const w = await retryTransient(() => this.kv.watch(opts.fromRevision !== undefined ? { resumeFromRevision: opts.fromRevision } : opts.updatesOnly ? { include: KvWatchInclude.UpdatesOnly } : {}), OPEN_RETRY_MS, openTimedOut);
    async function* changes(): AsyncGenerator<BucketChange> {
      let caughtUp = empty;
      try {
        if (caughtUp) yield { kind: "caught-up" };
        for await (const e of w) {
          yield { kind: "entry", entry: entryOf(e) };
          if (!caughtUp && e.delta === 0) {
            caughtUp = true; // every key's last value seen
            yield { kind: "caught-up" };
          }
        }
      } finally {
        stopAndDrop(w); // the reader left the loop early
      }
    }
    const it = changes();
    return { [Symbol.asyncIterator]: () => it, stop: () => stopAndDrop(w) };
  }

  async values(timeoutMs = 30_000): Promise<BucketValues> {
    const out: BucketValues = { entries: [], lastRevision: 0 };
    await this.lastPerKey(false, timeoutMs, (key, m) => {
      out.lastRevision = Math.max(out.lastRevision, m.seq);
      const op = m.headers?.get("KV-Operation");
      if (op !== "DEL" && op !== "PURGE" && m.data.length > 0) out.entries.push({ key, value: m.data, revision: m.seq, operation: "PUT", created: Math.round(Number(m.info.timestampNanos) / 1e6) });
    });
    return out;
  }

  /**
   * The last message of every key (`headersOnly`: without its value), each handed to `each`, from
   * an ordered consumer pulled in large batches and deleted once read (the library would leave it
   * on the broker for five minutes). Rejects when the read does not finish within `timeoutMs`.
   */
  private async lastPerKey(headersOnly: boolean, timeoutMs: number, each: (key: string, m: JsMsg) => void): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    // A consumer that delivers nothing at all (seen in the site's e2e after its brokers rebooted:
    // 0 of 9 entries in 20 s) is given up after FIRST_ENTRY_MS and another one asked for; one
    // that has delivered something is read to the end or to the deadline (its entries are kept).
    for (let consumers = 1; ; consumers++) {
      const left = Math.max(1, deadline - Date.now());
      const r = await this.lastPerKeyOnce(headersOnly, left, Math.min(left, FIRST_ENTRY_MS), each);
      if (r.complete) return;
      if (r.read > 0 || Date.now() >= deadline) throw new Error(`read ${r.read} of ${r.pending} entries of ${this.name} within ${timeoutMs} ms${consumers > 1 ? ` (${consumers} consumers asked)` : ""}`);
    }
  }

  private async lastPerKeyOnce(headersOnly: boolean, timeoutMs: number, firstMs: number, each: (key: string, m: JsMsg) => void): Promise<{ complete: boolean; read: number; pending: number }> {
    const { jetstream, DeliverPolicy } = await import("@nats-io/jetstream");
    const prefix = `$KV.${this.name}.`;
    const consumer = await jetstream(this.nc).consumers.get(kvStreamName(this.name), { filter_subjects: `${prefix}>`, deliver_policy: DeliverPolicy.LastPerSubject, ...(headersOnly ? { headers_only: true } : {}) });
    let read = 0;
    let complete = false;
    let pending = 0;
    try {
      pending = (await consumer.info(true)).num_pending;
      if (pending === 0) return { complete: true, read, pending };
      const messages = await consumer.consume({ max_messages: 5000 });
      const timer = setTimeout(() => void messages.stop(), timeoutMs);
      const first = setTimeout(() => read === 0 && void messages.stop(), firstMs);
      try {
        for await (const m of messages) {
          read++;
          each(m.subject.slice(prefix.length), m);
          if (m.info.pending === 0) {
            complete = true;
            break;
          }
        }
      } finally {
        clearTimeout(timer);
        clearTimeout(first);
        void messages.stop();
      }
    } finally {
      await consumer.delete().catch(() => undefined);
    }
    // A key expiring between counting and delivery leaves the count short of its last message:
    // rare, and the deadline ends the read; the caller says so.
    return { complete, read, pending };
  }

  async history(key: string): Promise<BucketEntry[]> {
    const out: BucketEntry[] = [];
    const it = await this.kv.history({ key });
    try {
      for await (const e of it) out.push(entryOf(e));
    } finally {
      stopAndDrop(it);
    }
    return out;
  }

  async status(): Promise<BucketStatus> {
    const s = await this.kv.status();
    return { values: s.values, ttlMs: s.ttl, history: s.history };
  }
}

/**
 * The bucket `name` on this connection: opened, or created when absent with `create` (its options
 * apply only then, but for `enforceTtl`). Without `create` a missing bucket is
 * MUSTER_BUCKET_NOT_FOUND.
 */
export async function openBucket(nc: NatsConnection, name: string, opts: { create?: BucketCreate } = {}): Promise<Bucket> {
  if (!opts.create) {
    const b = await bucketIfExists(nc, name);
    if (!b) throw new MusterError("MUSTER_BUCKET_NOT_FOUND", `no KV bucket ${JSON.stringify(name)} on this broker: check the name against the config of the daemon that owns it (provisioner state_bucket, registry bucket)`);
    return b;
  }
  const [{ jetstream, jetstreamManager }, { Kvm }] = await Promise.all([import("@nats-io/jetstream"), import("@nats-io/kv")]);
  const c = opts.create;
  // a broker down or a JetStream leader being elected answers with a timeout: opened again for a while, as writes are
  const created = await retryTransient(() => new Kvm(jetstream(nc)).create(name, { ...(c.history !== undefined ? { history: c.history } : {}), ...(c.replicas !== undefined ? { replicas: c.replicas } : {}), ...(c.ttlMs !== undefined ? { ttl: c.ttlMs } : {}) }), OPEN_RETRY_MS, openTimedOut);
  // bound without allow_direct, nats.js asks the stream's own API (its leader) for a key
  const kv = c.leaderReads ? await retryTransient(() => new Kvm(jetstream(nc)).open(name, { allow_direct: false }), OPEN_RETRY_MS, openTimedOut) : created;
  if (c.enforceTtl && c.ttlMs !== undefined) {
    const jsm = await jetstreamManager(nc);
    const info = await jsm.streams.info(kvStreamName(name));
    const want = c.ttlMs * 1e6; // ns
    if (info.config.max_age !== want) await jsm.streams.update(info.config.name, { ...info.config, max_age: want, duplicate_window: Math.min(info.config.duplicate_window || want, want) });
  }
  return new KvBucket(kv, name, nc);
}

/** The bucket if it exists (something once created it), else undefined; never creates it. */
export async function bucketIfExists(nc: NatsConnection, name: string): Promise<Bucket | undefined> {
  const [{ jetstream, jetstreamManager }, { Kvm }] = await Promise.all([import("@nats-io/jetstream"), import("@nats-io/kv")]);
  try {
    await retryTransient(async () => (await jetstreamManager(nc)).streams.info(kvStreamName(name)), OPEN_RETRY_MS, openTimedOut);
  } catch (e) {
    if (isMissing(e)) return undefined;
    throw e;
  }
  return new KvBucket(await retryTransient(() => new Kvm(jetstream(nc)).open(name), OPEN_RETRY_MS, openTimedOut), name, nc);
}

/** Who hands out buckets (the client, a daemon's connection): what the buckets' owners open theirs through. */
export interface Buckets {
  bucket(name: string, opts?: { create?: BucketCreate }): Promise<Bucket>;
  bucketIfExists(name: string): Promise<Bucket | undefined>;
}

/** Buckets on a bare connection (the daemons' transports). */
export function bucketsOn(nc: NatsConnection): Buckets {
  return { bucket: (name, opts) => openBucket(nc, name, opts), bucketIfExists: (name) => bucketIfExists(nc, name) };
}
