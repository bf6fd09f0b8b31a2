import { appendLog, type NodeRecord } from "../protocol/provision-record.js";
import type { EnginePolicy } from "./engine.js";

// What a parked node waits for, and for how long: the node itself, gone (docs/provisioner.md,
// Machines that die), or its Puppet master, which does not answer (Masters that do not answer).
// Pure: the record's mark (`gone`, `masterWait`), the end of the wait, the reason shown, the error
// a wait that ran out ends with. The engine (engine.ts) parks or fails the run accordingly.

/** gone.timeout's default: machines reboot, and a parked node holds no slot. */
export const GONE_TIMEOUT_S = 3600;

/** master_wait's default: a master's puppetserver takes minutes to start, and a waiting node holds no slot. */
export const MASTER_WAIT_S = 3600;

/** An unanswered question (lost in transit, or nobody there), as the client words it. */
export function noReply(error: string): boolean {
  return /no reply/.test(error);
}

/** A wait recorded on the node: parked with our claim for `leaseS`, or, past its end, failed with `error`. */
export type WaitMark = { leaseS: number } | { error: string };

/** When the wait for a gone node ends (ms epoch). */
export function goneUntil(rec: NodeRecord, policy: EnginePolicy): number {
  return (rec.gone?.since ?? 0) + (policy.goneTimeoutS ?? GONE_TIMEOUT_S) * 1000;
}

/**
 * The node is gone: recorded (since when and how we know; kept from the first time); its claim
 * lasts until the wait ends, so no other provisioner takes it meanwhile.
 */
export function markGone(rec: NodeRecord, policy: EnginePolicy, now: number, reason: string): WaitMark {
  rec.gone ??= { since: now, reason };
  const until = goneUntil(rec, policy);
  if (now >= until) {
    rec.lastError = `gone for ${Math.round((now - rec.gone.since) / 1000)}s and not back (${rec.gone.reason})`;
    return { error: rec.lastError };
  }
  appendLog(rec, `waiting up to ${Math.round((until - now) / 1000)}s for the node to come back (${rec.gone.reason})`, now);
  return { leaseS: Math.ceil((until - now) / 1000) };
}

/** When the wait for a master ends (ms epoch; Infinity with master_wait 0). */
export function masterWaitUntil(rec: NodeRecord, policy: EnginePolicy): number {
  const s = policy.masterWaitS ?? MASTER_WAIT_S;
  return s > 0 ? (rec.masterWait?.since ?? 0) + s * 1000 : Number.POSITIVE_INFINITY;
}

/** What a node waiting for a master shows (status, the board, the log). */
export function masterWaitReason(master: string | undefined, looking = "the configured masters"): string {
  return master ? `waiting for its master ${master}, which does not answer` : `waiting for a Puppet master: none answers (${looking})`;
}

/**
 * No master answers for the node (`master`: its own; none: any): recorded (since the first time
 * for that master); its claim is an ordinary lease, renewed while it waits (decision 0009). Past
 * master_wait, the error names the master and how long it waited; the mark goes, a failed node
 * waits for nothing.
 */
export function markMasterWait(rec: NodeRecord, policy: EnginePolicy, now: number, master: string | undefined, looking?: string): WaitMark {
  if (!rec.masterWait || rec.masterWait.master !== master) rec.masterWait = { since: now, reason: masterWaitReason(master, looking), ...(master ? { master } : {}) };
  const wait = rec.masterWait;
  const until = masterWaitUntil(rec, policy);
  if (now >= until) {
    const waited = Math.round((now - wait.since) / 1000);
    rec.lastError = master ? `its master ${master} did not answer for ${waited}s (master_wait)` : `no Puppet master answered for ${waited}s (${looking ?? "the configured masters"}; master_wait)`;
    delete rec.masterWait;
    return { error: rec.lastError };
  }
  appendLog(rec, `${wait.reason}; ${until === Number.POSITIVE_INFINITY ? "waiting for it (master_wait 0: no limit)" : `waiting up to ${Math.round((until - now) / 1000)}s`}, holding no slot`, now);
  return { leaseS: policy.lockLeaseS };
}

/** The run begins: whatever the node waited for is there (or not needed); the log says how long it waited. */
export function clearWaits(rec: NodeRecord, now: number): void {
  const repeating = rec.current ? `; repeating ${rec.current}` : "";
  if (rec.gone) {
    appendLog(rec, `the node is back after ${Math.round((now - rec.gone.since) / 1000)}s (it was gone: ${rec.gone.reason})${repeating}`, now);
    delete rec.gone;
  }
  if (rec.masterWait) {
    const what = rec.masterWait.master ? `its master ${rec.masterWait.master}` : "a Puppet master";
    appendLog(rec, `${what} answers after ${Math.round((now - rec.masterWait.since) / 1000)}s of waiting${rec.master && !rec.masterWait.master ? ` (${rec.master})` : ""}${repeating}`, now);
    delete rec.masterWait;
  }
}
