import { isTransient, openTimedOut, retryTransient, RevisionConflict, type Bucket, type Buckets } from "../broker/bucket.js";
import { DEFAULT_STATE_BUCKET } from "../protocol/buckets.js";
import { KNOWN_MASTERS_KEY } from "../protocol/known-masters.js";
import { decodeNodeRecord, encodeNodeRecord, recordKey, type NodeRecord } from "../protocol/provision-record.js";
import { selectFailed, type RetrySelection } from "./failures.js";
import { KnownMasterStore } from "./known-masters.js";
import { applyRetry, forgetRefusal, retryRefusal } from "./record-rules.js";

// ProvisionState: the one home of the provisioning record's operations. The provisioner claims and
// saves records through it; `muster provision`, the web console, the lab and decommission read,
// watch, retry (one node, a failure group, a master's), forget and decommission through it. The
// record itself (type, stages, codec) is protocol/provision-record.ts, the operator's rules
// record-rules.ts. Every write is a compare-and-set on the revision it read, so two provisioners
// can never both own a node, and a retry racing a provisioner's write never overwrites it: the
// loser's write fails, and it backs off or says the node changed meanwhile.
// A value that is not a record (the bucket is writable by admins) is skipped by readers and
// counted; the provisioner overwrites it as if the node had none. The masters the provisioners
// have seen live here too, under a key no node can have (protocol/known-masters.ts), read and
// written through `masters` (known-masters.ts): readers of records never see it.

/** What a retry by name did: every name is in exactly one list. */
export interface RetryOutcome {
  retried: { identity: string; was: NodeRecord["status"] }[];
  /** Changed by someone else between the check and the write: left alone. */
  changed: string[];
  /** No record (nothing was changed when any name is here). */
  unknown: string[];
  /** May not be retried, and why (nothing was changed when any is here). */
  refused: { identity: string; why: string }[];
}

export interface Versioned {
  record: NodeRecord;
  revision: number; // 0 = not stored yet
}

/** What a watch delivers: a record written, one removed (deleted, purged, or not a record), and once `caught-up`. */
export type StateChange = { type: "put"; key: string; record: NodeRecord } | { type: "removed"; key: string } | { type: "caught-up" };

export interface StateWatch extends AsyncIterable<StateChange> {
  stop(): void;
}

/** Seconds a bucket operation is retried through a broker outage or a JetStream leader election. */
const TRANSIENT_MS = 20_000;
/** The order of localeCompare, without building a collator per comparison. */
const byLocale = new Intl.Collator();

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

const retrying = <T>(op: (attempt: number) => Promise<T>) => retryTransient(op, TRANSIENT_MS);

export class ProvisionState {
  /** Values that were not records, skipped since this store was opened. */
  invalid = 0;
  /** The masters the provisioners have seen, kept beside the records. */
  readonly masters: KnownMasterStore;

  constructor(
    readonly bucket: Bucket,
    private readonly onInvalid: (key: string, reason: string) => void = () => undefined,
  ) {
    this.masters = new KnownMasterStore(bucket, onInvalid);
  }

  /** The bucket's options when it is created. */
  static readonly bucketOptions = { history: 5, leaderReads: true } as const;

  /** The state bucket, created when absent (`replicas` applies then; an existing bucket keeps its own). */
  static async open(buckets: Buckets, name: string = DEFAULT_STATE_BUCKET, opts: { replicas?: number; onInvalid?: (key: string, reason: string) => void } = {}): Promise<ProvisionState> {
    const bucket = await buckets.bucket(name, { create: { ...ProvisionState.bucketOptions, ...(opts.replicas !== undefined ? { replicas: opts.replicas } : {}) } });
    return new ProvisionState(bucket, opts.onInvalid);
  }

  /** The state bucket if a provisioner ever created it; never creates it. */
  static async openExisting(buckets: Buckets, name: string = DEFAULT_STATE_BUCKET, opts: { onInvalid?: (key: string, reason: string) => void } = {}): Promise<ProvisionState | undefined> {
    const bucket = await buckets.bucketIfExists(name);
    return bucket ? new ProvisionState(bucket, opts.onInvalid) : undefined;
  }

  get name(): string {
    return this.bucket.name;
  }

  private decode(key: string, value: Uint8Array): NodeRecord | undefined {
    const r = decodeNodeRecord(value, key);
    if (r.ok) return r.record;
    this.invalid++;
    this.onInvalid(key, r.reason);
    return undefined;
  }

  async get(identity: string): Promise<Versioned | undefined> {
    const key = recordKey(identity);
    const e = await retrying(() => this.bucket.get(key));
    if (!e || e.value.length === 0) return undefined;
    const record = this.decode(key, e.value);
    return record ? { record, revision: e.revision } : undefined;
  }

  /**
   * Compare-and-set on the revision `v` was read at (0: create). Returns the new revision (also
   * set on `v`), or undefined when someone else wrote first. Rejects when the bucket did not answer
   * within `withinMs` (default 20 s) of trying, or once `signal` aborts.
   */
  async compareAndSet(v: Versioned, o: { withinMs?: number; signal?: AbortSignal } = {}): Promise<number | undefined> {
    v.record.updatedAt = Date.now();
    const data = encodeNodeRecord(v.record);
    const key = recordKey(v.record.identity);
    const expected = v.revision;
    let retried = false;
    try {
      // the same bytes every attempt: a conflict after a timed-out one can be recognised as our own write
      v.revision = await retryTransient(
        (attempt) => {
          retried = attempt > 0;
          return expected === 0 ? this.bucket.create(key, data) : this.bucket.update(key, data, expected);
        },
        o.withinMs ?? TRANSIENT_MS,
        isTransient,
        o.signal,
      );
      return v.revision;
    } catch (e) {
      if (!(e instanceof RevisionConflict)) throw e;
      const cur = await retrying(() => this.bucket.get(key));
      // After a timed-out attempt the conflict may be our own write having landed: it is ours if
      // the stored value is exactly what we wrote.
      if (retried && cur && sameBytes(cur.value, data)) return (v.revision = cur.revision);
      // A value that is not a record counts as none: it is overwritten, still compare-and-set.
      if (expected === 0 && cur && !decodeNodeRecord(cur.value, key).ok) {
        try {
          return (v.revision = await retrying(() => this.bucket.update(key, data, cur.revision)));
        } catch (e2) {
          if (!(e2 instanceof RevisionConflict)) throw e2;
        }
      }
      return undefined;
    }
  }

  /** Unconditional write: seeding records (tests, benches). Operators' actions compare-and-set. */
  async put(rec: NodeRecord): Promise<void> {
    rec.updatedAt = Date.now();
    const data = encodeNodeRecord(rec);
    await retrying(() => this.bucket.put(recordKey(rec.identity), data));
  }

  /**
   * Retry nodes by name (`muster provision retry`, the console's retry): every identity is checked
   * first, and if any is unknown or refused nothing changes; then each record is re-queued with a
   * compare-and-set on the revision checked, so a node a provisioner (or another operator) wrote
   * meanwhile is left alone and listed in `changed`.
   */
  async retry(ids: readonly string[], by: string, o: { force?: boolean } = {}): Promise<RetryOutcome> {
    const read: Versioned[] = [];
    const unknown: string[] = [];
    const refused: { identity: string; why: string }[] = [];
    for (const id of [...new Set(ids)]) {
      const v = await this.get(id);
      const why = v && retryRefusal(v.record, o.force);
      if (!v) unknown.push(id);
      else if (why) refused.push({ identity: id, why });
      else read.push(v);
    }
    const out: RetryOutcome = { retried: [], changed: [], unknown, refused };
    if (unknown.length || refused.length) return out;
    for (const v of read) {
      const was = v.record.status;
      applyRetry(v.record, by);
      if ((await this.compareAndSet(v)) === undefined) out.changed.push(v.record.identity);
      else out.retried.push({ identity: v.record.identity, was });
    }
    return out;
  }

  /**
   * Retries every failed node of a failure group, of a master, or of a master within a group
   * (provisioner/failures.ts selectFailed) from `records` (the bucket's, or a live copy), each
   * read again and re-queued with a compare-and-set: one that changed meanwhile (no longer failed,
   * or failing for another cause) is left alone and listed in `changed`.
   */
  async retryFailed(records: Iterable<NodeRecord>, sel: RetrySelection, by: string, concurrency = 64): Promise<{ retried: string[]; changed: string[] }> {
    const wanted = selectFailed(records, sel).map((r) => r.identity);
    const retried: string[] = [];
    const changed: string[] = [];
    let next = 0;
    const worker = async () => {
      while (next < wanted.length) {
        const id = wanted[next++]!;
        const v = await this.get(id);
        if (!v || selectFailed([v.record], sel).length === 0) {
          changed.push(id);
          continue;
        }
        applyRetry(v.record, by);
        if ((await this.compareAndSet(v)) === undefined) changed.push(id);
        else retried.push(id);
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, wanted.length) }, worker));
    return { retried: retried.sort(), changed: changed.sort() };
  }

  /**
   * Forget a gone or failed node: its record is dropped, if it is still the one read (a
   * compare-and-set), so the node is provisioned afresh should it ever wait again.
   */
  async forget(identity: string): Promise<{ ok: true; was: NodeRecord } | { ok: false; code: "unknown" | "refused" | "changed"; why: string }> {
    const v = await this.get(identity);
    if (!v) return { ok: false, code: "unknown", why: `the provisioner has no record of ${identity}` };
    const why = forgetRefusal(v.record);
    if (why) return { ok: false, code: "refused", why };
    try {
      await retrying(() => this.bucket.purge(recordKey(identity), v.revision));
    } catch (e) {
      if (e instanceof RevisionConflict) return { ok: false, code: "changed", why: `${identity} changed meanwhile; look at it again` };
      throw e;
    }
    return { ok: true, was: v.record };
  }

  /**
   * Drop a node's record and its history (decommission). A provisioner working on the node loses
   * its compare-and-set at its next write and leaves the node; the next time the name is seen it
   * starts from nothing. Returns the record that was removed, if any. A compare-and-set like
   * every other write: a record written between the read and the purge is read again, so what is
   * returned (and reported) is what was dropped.
   */
  async remove(identity: string): Promise<NodeRecord | undefined> {
    for (let attempt = 0; ; attempt++) {
      const was = await this.get(identity);
      if (!was) return undefined;
      try {
        await retrying(() => this.bucket.purge(recordKey(identity), was.revision));
        return was.record;
      } catch (e) {
        // a provisioner writing the node every few ms cannot hold a decommission off for long
        if (!(e instanceof RevisionConflict) || attempt >= 20) throw e;
      }
    }
  }

  /**
   * Every record (`updatesOnly`: changes from now on), then every change as it happens; records
   * are checked by the codec, and a value that is not one reads as `removed`.
   */
  async watch(opts: { updatesOnly?: boolean } = {}): Promise<StateWatch> {
    const w = await this.bucket.watch(opts);
    const decode = (key: string, value: Uint8Array) => this.decode(key, value);
    async function* changes(): AsyncGenerator<StateChange> {
      for await (const c of w) {
        if (c.kind === "caught-up") yield { type: "caught-up" };
        else if (c.entry.key !== KNOWN_MASTERS_KEY) {
          const { key, value, operation } = c.entry;
          const record = operation === "PUT" && value.length > 0 ? decode(key, value) : undefined;
          yield record ? { type: "put", key, record } : { type: "removed", key };
        }
      }
    }
    const it = changes();
    return { [Symbol.asyncIterator]: () => it, stop: () => w.stop() };
  }

  /**
   * Every record, sorted by identity, read as one stream of the bucket's last values (an ordered
   * consumer in large batches, Bucket.values) rather than a request per key: at 10,000 records
   * reading key by key took seconds, too slow for `muster provision status` during a run.
   */
  async list(): Promise<NodeRecord[]> {
    const { entries } = await retrying(() => this.bucket.values(TRANSIENT_MS));
    const out: NodeRecord[] = [];
    for (const e of entries) {
      if (e.key === KNOWN_MASTERS_KEY) continue;
      const r = this.decode(e.key, e.value);
      if (r) out.push(r);
    }
    return out.sort((a, b) => byLocale.compare(a.identity, b.identity));
  }

  /**
   * Resolves with the latest record of each id, and of no other node, once `done` holds for all
   * of them (a watch: event-driven). `onUpdate` sees every record written meanwhile. Rejects at
   * the deadline naming the ids still waiting.
   */
  async waitFor(ids: readonly string[], done: (r: NodeRecord) => boolean, timeoutMs: number, onUpdate?: (r: NodeRecord) => void, rereadMs = 5000): Promise<Map<string, NodeRecord>> {
    const latest = new Map<string, NodeRecord>();
    const ok = () => ids.every((id) => latest.has(id) && done(latest.get(id)!));
    // the answer names the nodes asked for only: a caller that takes its values (a site e2e) got
    // another node's in_progress record beside its own
    const mine = () => new Map(ids.flatMap((id) => (latest.has(id) ? [[id, latest.get(id)!] as const] : [])));
    let over = false;
    const seen = (r: NodeRecord, reread = false) => {
      // a re-read still under way when the wait ended would change the answer the caller holds
      if (over) return;
      const prev = latest.get(r.identity);
      // never back in time: a re-read through a member that is behind, or a watch opened afresh
      // during a failover, can bring a record older than one already seen (a site e2e once got a
      // node's earlier in_progress back after its done)
      if (prev && (reread ? prev.updatedAt >= r.updatedAt : prev.updatedAt > r.updatedAt)) return;
      latest.set(r.identity, r);
      onUpdate?.(r);
    };
    const giveUp = Date.now() + timeoutMs;
    // starts with every current value, then follows updates; a cluster still electing after a
    // broker loss may time out the watch's consumer for longer than the bucket's own retry (a CI
    // run's site e2e): asked again until the wait's own deadline
    const w = await retryTransient(() => this.watch(), timeoutMs, openTimedOut);
    const deadline = setTimeout(() => w.stop(), Math.max(0, giveUp - Date.now()));
    // A watch can go quiet while its broker fails over (its consumer is recreated only after missed
    // heartbeats); re-reading the bucket now and then keeps the answer current meanwhile.
    const reread = setInterval(() => {
      void this.list()
        .then((recs) => {
          for (const r of recs) seen(r, true);
          if (ok()) w.stop();
        })
        .catch(() => undefined);
    }, rereadMs);
    try {
      for await (const c of w) {
        if (c.type !== "put") continue;
        seen(c.record);
        if (ok()) return mine();
      }
    } finally {
      over = true;
      clearTimeout(deadline);
      clearInterval(reread);
      w.stop();
    }
    if (ok()) return mine();
    const waiting = ids.filter((id) => !latest.has(id) || !done(latest.get(id)!));
    const why = (id: string) => {
      const r = latest.get(id);
      // its last log lines say where it stands (waiting, retrying, left for a resume)
      const tail = r?.status === "in_progress" && r.log.length ? `; last: ${r.log.slice(-3).join(" | ")}` : "";
      return `${id} (${r?.status ?? "no record"}${r?.current ? ` at ${r.current}` : ""}${r?.lastError ? `: ${r.lastError}` : ""}${tail})`;
    };
    throw new Error(`timed out after ${timeoutMs} ms waiting for ${waiting.length} node(s): ${waiting.slice(0, 10).map(why).join(", ")}`);
  }
}
