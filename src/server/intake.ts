import type { Logger } from "pino";
import { MusterError } from "../errors.js";
import { decodeRequestText, envelopeText } from "../protocol/envelope.js";
import { checkFreshness, ReplayCache, type FreshnessPolicy } from "../protocol/freshness.js";
import { verifyRequestSignature } from "../protocol/signing.js";
import { Status, type StatusCode } from "../protocol/status.js";
import { subjects } from "../protocol/subjects.js";
import { checkTarget, ProvenTargets } from "../protocol/targets.js";
import type { Request } from "../protocol/types.js";
import type { TrustStore } from "../security/keys.js";
import type { IntakeStats } from "./stats.js";

// Pipeline stages 1-2: decode and verify. Each failure maps to one reply status and one counter.
//
// A client calling N nodes directly publishes one signed request N times, so a process hosting many
// nodes (the emulator) receives N messages with identical bytes. Decoding and verifying identical
// bytes against the same key cannot give another answer, so the verified request is remembered by
// its exact text and reused; trust, freshness and replay are still checked for every message.
// (docs/decisions/collective-speed.md)

/** Messages up to this many characters are remembered once verified; bigger ones are rare and not worth the memory. */
const VERIFIED_MAX_CHARS = 64 * 1024;
const VERIFIED_ENTRIES = 64;

export type IntakeResult =
  | { ok: true; request: Request }
  | { ok: false; status: StatusCode; reason: string; request?: Request };

export interface IntakeOptions {
  trust: TrustStore;
  freshness: FreshnessPolicy;
  maxBytes: number;
  stats: IntakeStats;
  log: Logger;
  now?: () => number;
}

export class RequestIntake {
  private readonly replay: ReplayCache;
  /** Verified requests by message text, oldest first (a Map keeps insertion order). */
  private readonly verified = new Map<string, Request>();
  /** The directed requests' proven target paths: the N copies of one request share them. */
  private readonly proven = new ProvenTargets();
  constructor(private readonly opts: IntakeOptions) {
    this.replay = new ReplayCache(opts.freshness);
  }

  /**
   * `target` and `proof`: the Muster-Target and Muster-Proof headers of a directed request.
   * `identity`: the node whose direct subject it arrived on (undefined on broadcast).
   */
  accept(subject: string, bytes: Uint8Array, addressed: { identity?: string; target?: string; proof?: string } = {}): IntakeResult {
    const { stats, trust } = this.opts;
    stats.total++;
    if (bytes.length > this.opts.maxBytes) {
      stats.unvalidated++;
      return { ok: false, status: Status.InvalidData, reason: `message of ${bytes.length} bytes exceeds the limit of ${this.opts.maxBytes}` };
    }
    let text: string;
    let req: Request;
    let known: Request | undefined;
    try {
      text = envelopeText(bytes, this.opts.maxBytes); // the size was checked above; the configured limit may exceed the default
      known = this.verified.get(text);
      req = known ?? decodeRequestText(text);
    } catch (e) {
      stats.unvalidated++;
      return { ok: false, status: Status.InvalidData, reason: e instanceof MusterError ? e.message : "invalid envelope" };
    }
    const key = trust.lookup(req.pubkey);
    if (!key || key.name !== req.caller) {
      stats.badsig++;
      return { ok: false, status: Status.Aborted, reason: `caller ${JSON.stringify(req.caller)} is not trusted by this node`, request: req };
    }
    if (!known) {
      if (!verifyRequestSignature(req, key.obj)) {
        stats.badsig++;
        return { ok: false, status: Status.Aborted, reason: "request signature does not verify", request: req };
      }
      this.remember(text, req);
    }
    // The target is signed: a copy of a request replayed onto a subject it was not sent to stops here.
    const bound = checkTarget(req.target, subjects.isBroadcast(subject) ? undefined : (addressed.identity ?? subject), addressed.target, addressed.proof, this.proven);
    if (!bound.ok) {
      stats.badtarget++;
      return { ok: false, status: Status.Aborted, reason: `request not addressed to this subject: ${bound.reason}`, request: req };
    }
    const now = (this.opts.now ?? Date.now)();
    const fresh = checkFreshness(req.time, req.ttl, now, this.opts.freshness);
    if (fresh !== "ok") {
      stats.ttlexpired++;
      return { ok: false, status: Status.Aborted, reason: fresh === "expired" ? "request has expired (check clocks or raise --ttl)" : "request time is too far in the future (check clocks)", request: req };
    }
    if (!this.admit(subject, req, now)) {
      stats.replayed++;
      return { ok: false, status: Status.Aborted, reason: `request ${req.id} was already received (replay)`, request: req };
    }
    stats.validated++;
    return { ok: true, request: req };
  }

  /** Counts a verified request whose filter the host could not compile. */
  filterRejected(): void {
    this.opts.stats.badfilter++;
  }

  /**
   * Replay check. One signed request may go to many nodes' direct subjects (a directed call), or
   * once to a broadcast subject, never both: a request seen directly and sent again on broadcast
   * would run on every node its (usually empty) filter matches.
   */
  private admit(subject: string, req: Request, now: number): boolean {
    const broadcastKey = `*broadcast|${req.id}`;
    if (this.replay.has(broadcastKey)) return false;
    if (subjects.isBroadcast(subject)) {
      if (this.replay.has(`*direct|${req.id}`)) return false;
      return this.replay.admit(broadcastKey, req.time, req.ttl, now);
    }
    if (!this.replay.admit(`${subject}|${req.id}`, req.time, req.ttl, now)) return false;
    if (!this.replay.has(`*direct|${req.id}`)) this.replay.admit(`*direct|${req.id}`, req.time, req.ttl, now);
    return true;
  }

  private remember(text: string, req: Request): void {
    if (text.length > VERIFIED_MAX_CHARS) return;
    this.verified.set(text, req);
    if (this.verified.size > VERIFIED_ENTRIES) this.verified.delete(this.verified.keys().next().value!);
  }
}
