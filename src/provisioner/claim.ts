import { appendLog, newRecord, noteRound, type NodeRecord } from "../protocol/provision-record.js";
import { disabledAlready } from "./stages.js";
import type { Versioned } from "./state.js";

// Who may take a node: the claim rule, pure, so it is unit-tested. The runner writes the record
// claimRecord returns with a compare-and-set (ProvisionState), so of two provisioners only one wins.

/** May `owner` take this node now? */
export function claimable(rec: NodeRecord | undefined, owner: string, now: number): boolean {
  if (!rec) return true;
  if (rec.status === "done" || rec.status === "failed") return false;
  if (rec.status === "pending") return true;
  return rec.owner === owner || (rec.claimExpires ?? 0) < now;
}

/**
 * The record `owner` writes (compare-and-set) to claim a node, or undefined when it may not: a new
 * round for a pending, new or re-queued node; a resume of our own or of an expired claim, naming
 * the provisioner it takes over from.
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
    noteRound(rec, { event: "started", by: owner }, now);
    delete rec.masterWait; // a new round chooses its master afresh
    delete rec.masterFallback;
  }
  const previousOwner = rec.status === "in_progress" ? rec.owner : undefined;
  rec.status = "in_progress";
  rec.owner = owner;
  rec.claimExpires = now + leaseS * 1000;
  const takenOverFrom = previousOwner && previousOwner !== owner ? previousOwner : undefined;
  if (takenOverFrom) appendLog(rec, takenOverLine(takenOverFrom), now);
  return { v, takenOverFrom };
}

/** The log line a takeover writes; deploy-lock.ts reads it to know whose lock is stale. */
export const takenOverLine = (from: string): string => `taken over from ${from}, whose claim expired`;

/**
 * What a resume scan does with a record: take it up now (ours, or a claim that expired), wait for a
 * gone node until its wait ends or for a master that does not answer (ours: checked now and then
 * meanwhile), or leave it.
 */
export function resumeVerdict(rec: NodeRecord, owner: string, now: number): "resume" | { waitUntil: number } | "wait-for-master" | undefined {
  if (rec.status !== "in_progress") return undefined;
  const live = (rec.claimExpires ?? 0) >= now;
  // a node that switched provisioning off is not waited for (an older provisioner parked some): it is finished
  if (rec.gone && live && !disabledAlready(rec)) return rec.owner === owner ? { waitUntil: rec.claimExpires! } : undefined;
  if (rec.masterWait && live) return rec.owner === owner ? "wait-for-master" : undefined;
  return rec.owner === owner || !live ? "resume" : undefined;
}

/**
 * A node waiting for a master may wait for an hour or for ever, so its owner's claim is a normal
 * lease renewed while it waits (not one as long as the wait, as a gone node's): a provisioner that
 * dies meanwhile leaves its waiting nodes to another within one lease. Renewed when less than half
 * of it is left, so a waiting node costs one write per half lease.
 */
export function claimNeedsRenewal(claimExpires: number, now: number, leaseS: number): boolean {
  return claimExpires - now < (leaseS * 1000) / 2;
}

/**
 * Our claim on a node waiting for a master, renewed: the record to write (compare-and-set), or
 * undefined when it is no longer waited for here (gone, retried, taken over, decommissioned).
 */
export function renewedWaitClaim(v: Versioned | undefined, owner: string, now: number, leaseS: number): Versioned | undefined {
  const rec = v?.record;
  if (!v || !rec || rec.status !== "in_progress" || rec.owner !== owner || !rec.masterWait) return undefined;
  return { ...v, record: { ...rec, claimExpires: now + leaseS * 1000 } };
}

/** A record write is tried for at least this long, ms (a leader election)... */
export const WRITE_RETRY_MS = 20_000;
/** ...and while the claim last written holds, up to this long before it runs out, ms. */
export const CLAIM_MARGIN_MS = 30_000;

/**
 * How long a record write is tried while the bucket does not take it: while the claim last
 * written (`heldUntil`) holds nobody else may take the node, so the run waits the outage out;
 * giving up sooner would leave the node to a resume. Stopping (the abandon's write), 20 s only.
 */
export function writeWindowMs(heldUntil: number, now: number, stopping: boolean): number {
  return stopping ? WRITE_RETRY_MS : Math.max(WRITE_RETRY_MS, heldUntil - CLAIM_MARGIN_MS - now);
}
