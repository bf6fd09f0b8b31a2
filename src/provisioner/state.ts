import type { NatsConnection } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import type { NodeStatus, Stage } from "./stages.js";

// The durable per-node record in JetStream KV. Every write is a compare-and-set on the revision we
// read, so two provisioners can never both own a node: the loser's write fails and it backs off.

export interface NodeRecord {
  identity: string;
  status: NodeStatus;
  /** The last completed stage. */
  stage?: Stage;
  /** The stage being worked on (for status displays). */
  current?: Stage;
  /** Failed attempts of the current stage. */
  attempts: number;
  /** Provisioning rounds started (1 + operator retries and restarts). */
  rounds: number;
  master?: string;
  masterAddress?: string;
  nodeAddress?: string;
  owner?: string;
  /** ms epoch after which another provisioner may take the node over. */
  claimExpires?: number;
  /** ms epoch at which the node's deploy lock (ours) expires. */
  lockExpires?: number;
  startedAt?: number;
  updatedAt: number;
  finishedAt?: number;
  timings: Partial<Record<Stage, number>>;
  /** When each stage of this round started (its first try) and ended (ms epoch), for timelines (the web board). Absent in records written before it existed. */
  stageTimes?: Partial<Record<Stage, { start: number; end?: number }>>;
  fingerprint?: string;
  /**
   * The node's ed25519 public key, pinned from its first signed reply to a directed request: from
   * then on a reply or startup event for this identity that does not verify against it is refused.
   */
  nodeKey?: string;
  hadCert?: boolean;
  signedBy?: string;
  lastError?: string;
  log: string[];
}

const LOG_TAIL = 30;
/** The order of localeCompare, without building a collator per comparison. */
const byLocale = new Intl.Collator();
const enc = new TextEncoder();
const dec = new TextDecoder();

/** KV keys allow [-/_=.a-zA-Z0-9]; identities may hold : and @, which are hex-escaped. */
export function keyFor(identity: string): string {
  return identity.replace(/[^-/_=.a-zA-Z0-9]/g, (c) => `_${c.charCodeAt(0).toString(16).padStart(2, "0")}`);
}

export function newRecord(identity: string, now = Date.now()): NodeRecord {
  return { identity, status: "pending", attempts: 0, rounds: 0, updatedAt: now, timings: {}, log: [] };
}

export function appendLog(rec: NodeRecord, line: string, now = Date.now()): void {
  rec.log.push(`${new Date(now).toISOString()} ${line}`);
  if (rec.log.length > LOG_TAIL) rec.log.splice(0, rec.log.length - LOG_TAIL);
}

export interface Versioned {
  record: NodeRecord;
  revision: number; // 0 = not stored yet
}

/** Seconds a KV operation is retried through a broker outage or a JetStream leader election. */
const TRANSIENT_MS = 20_000;

/**
 * No responders (reported as "jetstream is not enabled") and timeouts are what a clustered
 * JetStream answers while a server is down or a stream leader is being elected: they pass.
 */
function isTransient(e: unknown): boolean {
  const err = e as Error;
  return err?.name === "TimeoutError" || /jetstream is not enabled|no responders|timeout|503|disconnect|reconnect/i.test(err?.message ?? "");
}

async function retrying<T>(op: (attempt: number) => Promise<T>): Promise<T> {
  const deadline = Date.now() + TRANSIENT_MS;
  for (let attempt = 0; ; attempt++) {
    try {
      return await op(attempt);
    } catch (e) {
      if (!isTransient(e) || Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, Math.min(100 * 2 ** attempt, 1000))); // backoff while the cluster recovers
    }
  }
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

export class StateStore {
  private constructor(readonly kv: KV) {}

  /** The bucket's options when the provisioner creates it (client.kv(bucket, { create })). */
  static readonly bucketOptions = { history: 5 } as const;

  /** A store over a bucket the caller opened (through the client: client.kv / client.kvIfExists). */
  static fromKv(kv: KV): StateStore {
    return new StateStore(kv);
  }

  /** `replicas` applies when the bucket is created (an existing bucket keeps its own). */
  static async open(nc: NatsConnection, bucket: string, replicas = 1): Promise<StateStore> {
    const kvm = new Kvm(jetstream(nc));
    const kv = await kvm.create(bucket, { ...StateStore.bucketOptions, replicas });
    return new StateStore(kv);
  }

  /**
   * Drop a node's record and its history (decommission). A provisioner working on the node loses
   * its compare-and-set at its next write and leaves the node; the next time the name is seen it
   * starts from nothing. Returns the record that was there, if any.
   */
  async remove(identity: string): Promise<NodeRecord | undefined> {
    const was = await this.get(identity);
    if (was) await retrying(() => this.kv.purge(keyFor(identity)));
    return was?.record;
  }

  async get(identity: string): Promise<Versioned | undefined> {
    const e = await retrying(() => this.kv.get(keyFor(identity)));
    if (!e || e.operation !== "PUT" || e.value.length === 0) return undefined;
    try {
      return { record: JSON.parse(dec.decode(e.value)) as NodeRecord, revision: e.revision };
    } catch {
      return undefined; // a corrupt record is treated as absent and rewritten
    }
  }

  /** Compare-and-set. Returns the new revision, or undefined when someone else wrote first. */
  async save(v: Versioned): Promise<number | undefined> {
    v.record.updatedAt = Date.now();
    const data = enc.encode(JSON.stringify(v.record));
    const key = keyFor(v.record.identity);
    const expected = v.revision;
    let retried = false;
    try {
      v.revision = await retrying((attempt) => {
        retried = attempt > 0;
        return expected === 0 ? this.kv.create(key, data) : this.kv.update(key, data, expected);
      });
      return v.revision;
    } catch (e) {
      const msg = (e as Error).message ?? "";
      if (!/wrong last sequence|key exists|10071|10164/i.test(msg)) throw e;
      // After a timed-out attempt the conflict may be our own write having landed: it is ours if
      // the stored value is exactly what we wrote.
      if (retried) {
        const cur = await retrying(() => this.kv.get(key));
        if (cur && cur.operation === "PUT" && sameBytes(cur.value, data)) return (v.revision = cur.revision);
      }
      return undefined;
    }
  }

  /** Unconditional write (operator commands). */
  async put(rec: NodeRecord): Promise<void> {
    rec.updatedAt = Date.now();
    const data = enc.encode(JSON.stringify(rec));
    await retrying(() => this.kv.put(keyFor(rec.identity), data));
  }

  /**
   * Resolves with the latest record of each id once `done` holds for all of them (a KV watch:
   * event-driven). `onUpdate` sees every record written meanwhile. Rejects at the deadline
   * naming the ids still waiting.
   */
  async waitFor(ids: readonly string[], done: (r: NodeRecord) => boolean, timeoutMs: number, onUpdate?: (r: NodeRecord) => void, rereadMs = 5000): Promise<Map<string, NodeRecord>> {
    const latest = new Map<string, NodeRecord>();
    const ok = () => ids.every((id) => latest.has(id) && done(latest.get(id)!));
    const seen = (r: NodeRecord, reread = false) => {
      const prev = latest.get(r.identity);
      if (reread && prev && prev.updatedAt >= r.updatedAt) return; // nothing the watch has not shown
      latest.set(r.identity, r);
      onUpdate?.(r);
    };
    const w = await this.kv.watch(); // starts with every current value, then follows updates
    const deadline = setTimeout(() => w.stop(), timeoutMs);
    // A watch can go quiet while its broker fails over (its consumer is recreated only after missed
    // heartbeats); re-reading the bucket now and then keeps the answer current meanwhile.
    const reread = setInterval(() => {
      void this.all()
        .then((recs) => {
          for (const r of recs) seen(r, true);
          if (ok()) w.stop();
        })
        .catch(() => undefined);
    }, rereadMs);
    try {
      for await (const e of w) {
        if (e.operation !== "PUT" || e.value.length === 0) continue;
        let r: NodeRecord;
        try {
          r = JSON.parse(dec.decode(e.value)) as NodeRecord;
        } catch {
          continue;
        }
        seen(r);
        if (ok()) return latest;
      }
    } finally {
      clearTimeout(deadline);
      clearInterval(reread);
      w.stop();
    }
    if (ok()) return latest;
    const waiting = ids.filter((id) => !latest.has(id) || !done(latest.get(id)!));
    throw new Error(`timed out after ${timeoutMs} ms waiting for ${waiting.length} node(s): ${waiting.slice(0, 10).map((id) => `${id} (${latest.get(id)?.status ?? "no record"}${latest.get(id)?.current ? ` at ${latest.get(id)?.current}` : ""}${latest.get(id)?.lastError ? `: ${latest.get(id)?.lastError}` : ""})`).join(", ")}`);
  }

  /**
   * Every record, sorted by identity, read as one stream of the bucket's last values (a KV watch,
   * stopped once it has caught up) rather than a request per key: at 10,000 records reading key
   * by key took seconds, too slow for `muster provision status` during a run.
   */
  async all(): Promise<NodeRecord[]> {
    const latest = new Map<string, NodeRecord>();
    if ((await retrying(() => this.kv.status())).values > 0) {
      const w = await this.kv.watch();
      const deadline = setTimeout(() => w.stop(), TRANSIENT_MS);
      let caughtUp = false;
      try {
        for await (const e of w) {
          if (e.operation !== "PUT" || e.value.length === 0) latest.delete(e.key);
          else {
            try {
              latest.set(e.key, JSON.parse(dec.decode(e.value)) as NodeRecord);
            } catch {
              latest.delete(e.key); // skip corrupt entries
            }
          }
          if (e.delta === 0) {
            caughtUp = true; // every key's last value seen
            break;
          }
        }
      } finally {
        clearTimeout(deadline);
        w.stop();
      }
      if (!caughtUp) throw new Error(`reading the provisioning records did not finish within ${TRANSIENT_MS / 1000}s`);
    }
    const out = [...latest.values()];
    return out.sort((a, b) => byLocale.compare(a.identity, b.identity));
  }
}

/** May `owner` take this node now? Pure, so the claim rule is unit-tested. */
export function claimable(rec: NodeRecord | undefined, owner: string, now: number): boolean {
  if (!rec) return true;
  if (rec.status === "done" || rec.status === "failed") return false;
  if (rec.status === "pending") return true;
  return rec.owner === owner || (rec.claimExpires ?? 0) < now;
}

/**
 * The record `owner` writes (compare-and-set) to claim a node, or undefined when it may not.
 * Pure: a new round for a pending, new or re-queued node; a resume of our own or of an expired
 * claim, naming the provisioner it takes over from.
 */
export function claimRecord(existing: Versioned | undefined, identity: string, owner: string, now: number, leaseS: number): { v: Versioned; takenOverFrom?: string } | undefined {
  if (!claimable(existing?.record, owner, now)) return undefined;
  const v: Versioned = existing ?? { record: newRecord(identity, now), revision: 0 };
  const rec = v.record;
  if (rec.status !== "in_progress") {
    // a new round (first time, operator retry, node restart); in_progress ones are resumed
    rec.rounds += 1;
    rec.startedAt = now;
    rec.timings = {};
    rec.stageTimes = {};
    rec.finishedAt = undefined;
  }
  const previousOwner = rec.status === "in_progress" ? rec.owner : undefined;
  rec.status = "in_progress";
  rec.owner = owner;
  rec.claimExpires = now + leaseS * 1000;
  const takenOverFrom = previousOwner && previousOwner !== owner ? previousOwner : undefined;
  if (takenOverFrom) appendLog(rec, `taken over from ${takenOverFrom}, whose claim expired`, now);
  return { v, takenOverFrom };
}
