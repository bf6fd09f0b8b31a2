import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import type { Bucket } from "../broker/bucket.js";
import type { Logger } from "pino";
import { subjects } from "../protocol/subjects.js";
import { encodeRecord, fingerprint, keyFor, parseRegistration, RejectReason, type RegistrationLimits, type RegistryRecord } from "./record.js";
import type { RegistryStore } from "./store.js";

// Registration messages in, KV writes out. Every message is checked (record.ts); a bad one is
// counted and logged (at most one line per reason per LOG_EVERY_MS) and never stops the receiver.
//
// Writes are coalesced, so a fleet registering costs the broker little:
// - accepted registrations wait in a map keyed by identity for `flushMs`; a node heard twice in
//   that window (two collectives, a short interval) is written once, with the later data;
// - a registration carrying the same data as the stored record is not written at all until the
//   stored record is `refreshMs` old. The bucket's expiry is max_age + refresh (config.ts), so a
//   node is never expired sooner than max_age after it was last heard.
// - writes are pipelined, WRITE_WINDOW in flight.
// Queue subscriptions: several registry daemons on one bucket share the registrations.

const WRITE_WINDOW = 256;
const LOG_EVERY_MS = 10_000;

export interface ReceiverOptions {
  nc: NatsConnection;
  kv: Bucket;
  store: RegistryStore;
  collectives: string[];
  log: Logger;
  limits: RegistrationLimits;
  refreshMs: number;
  flushMs: number;
  /** Distinct identities waiting to be written before new ones are dropped (a flood). */
  maxPending: number;
  /** Queue group shared by registry daemons of one bucket. */
  queue: string;
  now?: () => number;
}

export interface ReceiverStats {
  received: number;
  accepted: number;
  rejected: Record<RejectReason, number>;
  /** Records written to the bucket. */
  written: number;
  /** Registrations that changed nothing and were not written (coalesced). */
  unchanged: number;
  /** Registrations of a node already waiting to be written (coalesced). */
  merged: number;
  /** Accepted but dropped: too many distinct nodes waiting. */
  dropped: number;
  writeErrors: number;
}

export class RegistrationReceiver {
  readonly stats: ReceiverStats = {
    received: 0,
    accepted: 0,
    rejected: Object.fromEntries(Object.values(RejectReason).map((r) => [r, 0])) as Record<RejectReason, number>,
    written: 0,
    unchanged: 0,
    merged: 0,
    dropped: 0,
    writeErrors: 0,
  };
  private readonly subs: Subscription[] = [];
  private pending = new Map<string, RegistryRecord>();
  /** What this daemon wrote and the store has not echoed back yet (fingerprint, last_seen). */
  private readonly written = new Map<string, { fp: string; seen: number }>();
  private readonly storedFp = new WeakMap<RegistryRecord, string>();
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  private readonly lastLog = new Map<RejectReason, { at: number; suppressed: number }>();
  private readonly now: () => number;

  constructor(private readonly o: ReceiverOptions) {
    this.now = o.now ?? Date.now;
    // Once the store has a node's record (ours echoed back, or another daemon's), it is the
    // reference for "unchanged"; until then, what we wrote is.
    const forget = (identity: string) => this.written.delete(identity);
    o.store.on("update", (r) => forget(r.identity));
    o.store.on("remove", forget);
  }

  start(): void {
    for (const c of this.o.collectives) {
      this.subs.push(
        this.o.nc.subscribe(subjects.registration(c), {
          queue: this.o.queue,
          callback: (err, msg) => {
            if (err) {
              this.o.log.error({ err: err.message, collective: c }, "registration subscription error");
              return;
            }
            try {
              this.receive(c, msg.data);
            } catch (e) {
              this.o.log.error({ err: (e as Error).message }, "unexpected error handling a registration");
            }
          },
        }),
      );
    }
  }

  /** One registration message (public for tests and benches that feed bytes directly). */
  receive(collective: string, data: Uint8Array): void {
    this.stats.received++;
    const checked = parseRegistration(data, collective, this.now(), this.o.limits);
    if (!checked.ok) {
      this.stats.rejected[checked.reason]++;
      this.logRejection(collective, checked.reason, checked.detail);
      return;
    }
    this.stats.accepted++;
    const r = checked.record;
    if (this.pending.has(r.identity)) this.stats.merged++;
    else if (this.pending.size >= this.o.maxPending) {
      this.stats.dropped++;
      this.logRejection(collective, "oversized", `dropped ${r.identity}: ${this.pending.size} nodes already wait to be written`);
      return;
    }
    this.pending.set(r.identity, r);
    this.schedule();
  }

  private logRejection(collective: string, reason: RejectReason, detail: string): void {
    const now = this.now();
    const last = this.lastLog.get(reason);
    if (last && now - last.at < LOG_EVERY_MS) {
      last.suppressed++;
      return;
    }
    this.o.log.warn({ collective, reason, detail, suppressed: last?.suppressed ?? 0 }, "registration rejected");
    this.lastLog.set(reason, { at: now, suppressed: 0 });
  }

  private schedule(): void {
    if (this.timer || this.flushing) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.flushing = this.flush().finally(() => {
        this.flushing = undefined;
        if (this.pending.size > 0) this.schedule();
      });
    }, this.o.flushMs);
  }

  /** Is the record worth writing, or does the stored one already say the same recently enough? */
  private changed(r: RegistryRecord): { fp: string } | undefined {
    const fp = fingerprint(r);
    let prev = this.written.get(r.identity);
    if (!prev) {
      const stored = this.o.store.get(r.identity);
      if (stored) {
        let sfp = this.storedFp.get(stored);
        if (sfp === undefined) this.storedFp.set(stored, (sfp = fingerprint(stored)));
        prev = { fp: sfp, seen: stored.last_seen };
      }
    }
    if (prev && prev.fp === fp && r.last_seen - prev.seen < this.o.refreshMs) return undefined;
    return { fp };
  }

  /** Writes everything waiting. */
  async flush(): Promise<void> {
    const batch = this.pending;
    this.pending = new Map();
    const inFlight = new Set<Promise<void>>();
    for (const r of batch.values()) {
      const c = this.changed(r);
      if (!c) {
        this.stats.unchanged++;
        continue;
      }
      const p: Promise<void> = this.o.kv
        .put(keyFor(r.identity), encodeRecord(r))
        .then(
          () => {
            this.stats.written++;
            this.written.set(r.identity, { fp: c.fp, seen: r.last_seen });
          },
          (e: Error) => {
            this.stats.writeErrors++;
            this.o.log.warn({ identity: r.identity, err: e.message }, "cannot write a registry record; the node's next registration tries again");
          },
        )
        .finally(() => inFlight.delete(p));
      inFlight.add(p);
      if (inFlight.size >= WRITE_WINDOW) await Promise.race(inFlight);
    }
    await Promise.all(inFlight);
  }

  /** Stops listening and writes what is waiting. */
  async stop(): Promise<void> {
    for (const s of this.subs) s.unsubscribe();
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.flushing;
    if (this.pending.size > 0) await this.flush();
  }
}
