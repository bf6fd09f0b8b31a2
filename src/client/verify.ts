import { availableParallelism } from "node:os";
import { Worker } from "node:worker_threads";
import { fastest, openssl } from "../protocol/ed25519.js";
import { PublicKeyCache, verifyMessage } from "../protocol/signing.js";
import type { Reply } from "../protocol/types.js";

// Reply signatures checked off the event loop. One ed25519 verification costs 36-200 µs, so 10,000
// replies verified inline would hold the client's event loop for 0.4 to 2 seconds; a pool of
// worker threads, one per core, verifies them in batches while the main thread keeps reading the
// socket. Until the workers are up (tens of ms) and for small calls, replies are checked inline:
// for a small call with OpenSSL, as loading libsodium (10 ms) would cost it more than its checks;
// once a large call has warmed the pool, with libsodium (protocol/ed25519.ts), as the workers do:
// 36 µs a reply here against OpenSSL's 80 plus 66 to parse each node's key.

export const SigVerdict = { Bad: 0, Valid: 1, Unsigned: 2 } as const;
export type SigVerdict = (typeof SigVerdict)[keyof typeof SigVerdict];

/** What goes to a worker: raw replies packed end to end; reply i is buf[offsets[i], offsets[i+1]). */
export interface VerifyBatch {
  id: number;
  buf: ArrayBuffer;
  offsets: Uint32Array;
}
export interface VerifyResult {
  id: number;
  verdicts: Uint8Array;
}

/** The verdict on one decoded reply or event, on this thread. */
export function signatureVerdict(r: { pubkey?: unknown; signature?: unknown }, keys?: PublicKeyCache): SigVerdict {
  if (r.signature === undefined && r.pubkey === undefined) return SigVerdict.Unsigned;
  return verifyMessage(r, keys) ? SigVerdict.Valid : SigVerdict.Bad;
}

export type TrustVerdict = { keep: true; verified: boolean } | { keep: false; why: string };

/**
 * What a client does with a reply or event from `sender` (docs/security.md, "Verifying replies"),
 * given its signature verdict and the key the node-key directory names for the sender, if any:
 * a bad signature, or anything but the directory's key, is dropped; a sender the directory does
 * not know is kept unverified.
 */
export function judgeSigned(sender: string, sig: SigVerdict, pubkey: unknown, known: string | undefined): TrustVerdict {
  if (sig === SigVerdict.Bad) return { keep: false, why: "its signature does not verify" };
  if (known && sig === SigVerdict.Unsigned) return { keep: false, why: `it is unsigned, and the key directory names ${known} for ${sender}` };
  if (known && pubkey !== known) return { keep: false, why: `it is signed by ${String(pubkey)}, not by ${known}, the key the directory names for ${sender}` };
  return { keep: true, verified: known !== undefined };
}

type Done = (v: SigVerdict) => void;
interface Item {
  raw: Uint8Array;
  reply: Reply;
  done: Done;
}
interface Slot {
  worker: Worker;
  ready: boolean;
  outstanding: number;
}

/** Replies posted to a worker at once; a call's replies go the moment this many wait. */
export const BATCH = 128;
/**
 * A flush of this many replies or fewer, with no batch at the workers, is checked here: posting
 * one costs more than checking it with libsodium (a provisioner's one reply per call spent 82 µs a
 * reply posting to the pool; a check is about 40, so 16 hold the event loop under a millisecond).
 * A large call's batches still go to the workers.
 */
const INLINE_MAX = 16;

export class VerifyPool {
  private slots: Slot[] = [];
  private queue: Item[] = [];
  private readonly inFlight = new Map<number, { slot: Slot; items: Item[] }>();
  private nextId = 1;
  private flushScheduled = false;
  private closed = false;
  private readonly smallKeys = new PublicKeyCache(100_000, () => openssl);
  private readonly largeKeys = new PublicKeyCache(100_000, fastest);
  /** The keys inline checks use: libsodium once a large call has warmed the pool. */
  private get keys(): PublicKeyCache {
    return this.slots.length ? this.largeKeys : this.smallKeys;
  }
  /** Replies verified on this thread and by the workers (for the bench and stats). */
  readonly counts = { inline: 0, workers: 0 };

  constructor(private readonly size = Math.max(1, Math.min(8, availableParallelism()))) {}

  /** Start the workers now, ahead of a large call, so they are up when its replies arrive. */
  warm(): void {
    if (this.closed || this.slots.length) return;
    const url = new URL("./verify-worker.js", import.meta.url);
    for (let i = 0; i < this.size; i++) {
      const slot: Slot = { worker: new Worker(url), ready: false, outstanding: 0 };
      slot.worker.unref(); // an idle pool never keeps a process alive
      slot.worker.once("online", () => {
        slot.ready = true;
        this.flush();
      });
      slot.worker.on("message", (m: VerifyResult) => this.settle(m));
      // A worker that dies leaves its batches to this thread: no reply goes unchecked.
      slot.worker.on("error", () => this.drop(slot));
      slot.worker.on("exit", () => this.drop(slot));
      this.slots.push(slot);
    }
  }

  /** Workers up and taking batches. */
  get readyWorkers(): number {
    return this.slots.filter((s) => s.ready).length;
  }

  /** Calls `done` with the reply's verdict: at once when checked inline, later from a worker. */
  check(raw: Uint8Array, reply: Reply, done: Done): void {
    if (!this.slots.some((s) => s.ready)) {
      this.counts.inline++;
      done(signatureVerdict(reply, this.keys));
      return;
    }
    this.queue.push({ raw, reply, done });
    if (this.queue.length >= BATCH) this.flush();
    else if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(() => this.flush());
    }
  }

  private flush(): void {
    this.flushScheduled = false;
    if (this.queue.length <= INLINE_MAX && this.inFlight.size === 0) {
      for (const it of this.queue.splice(0)) this.inline(it);
      return;
    }
    while (this.queue.length) {
      const ready = this.slots.filter((s) => s.ready);
      if (!ready.length) {
        for (const it of this.queue.splice(0)) this.inline(it);
        return;
      }
      const slot = ready.reduce((a, b) => (b.outstanding < a.outstanding ? b : a));
      const items = this.queue.splice(0, BATCH);
      let total = 0;
      for (const it of items) total += it.raw.length;
      const buf = new Uint8Array(total);
      const offsets = new Uint32Array(items.length + 1);
      let at = 0;
      items.forEach((it, i) => {
        buf.set(it.raw, at);
        at += it.raw.length;
        offsets[i + 1] = at;
      });
      const id = this.nextId++;
      this.inFlight.set(id, { slot, items });
      slot.outstanding += items.length;
      slot.worker.postMessage({ id, buf: buf.buffer, offsets } satisfies VerifyBatch, [buf.buffer, offsets.buffer]);
    }
  }

  private settle(m: VerifyResult): void {
    const f = this.inFlight.get(m.id);
    if (!f) return;
    this.inFlight.delete(m.id);
    f.slot.outstanding -= f.items.length;
    this.counts.workers += f.items.length;
    f.items.forEach((it, i) => it.done(m.verdicts[i] as SigVerdict));
  }

  private inline(it: Item): void {
    this.counts.inline++;
    it.done(signatureVerdict(it.reply, this.keys));
  }

  private drop(slot: Slot): void {
    if (!this.slots.includes(slot)) return;
    this.slots = this.slots.filter((s) => s !== slot);
    for (const [id, f] of this.inFlight) {
      if (f.slot !== slot) continue;
      this.inFlight.delete(id);
      for (const it of f.items) this.inline(it);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    const slots = this.slots;
    this.slots = [];
    for (const [, f] of this.inFlight) for (const it of f.items) this.inline(it);
    this.inFlight.clear();
    for (const it of this.queue.splice(0)) this.inline(it);
    await Promise.all(slots.map((s) => s.worker.terminate().catch(() => undefined)));
  }
}
