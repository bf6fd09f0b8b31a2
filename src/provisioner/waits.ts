import { appendLog, noteRound, type NodeRecord } from "../protocol/provision-record.js";
import { disabledAlready } from "./stages.js";

// What a parked node waits for, and for how long: the node itself, gone (docs/provisioner.md,
// Machines that die), or its Puppet master, which does not answer (Masters that do not answer).
// Pure: the record's mark (`gone`, `masterWait`), the end of the wait, the reason shown, the error
// a wait that ran out ends with. The engine (engine.ts) parks or fails the run accordingly.

/** The engine's policy as far as waits go (engine.ts's EnginePolicy has these; named here so waits.ts needs nothing of engine.ts). */
export interface WaitPolicy {
  lockLeaseS: number;
  /** gone.timeout, s. */
  goneTimeoutS?: number;
  /** master_wait, s; 0: no limit. */
  masterWaitS?: number;
  /** known_master_wait, s: how long a node waits for the known master its criteria pick before it falls back. */
  knownMasterWaitS?: number;
}

/** gone.timeout's default: machines reboot, and a parked node holds no slot. */
export const GONE_TIMEOUT_S = 3600;

/** master_wait's default: a master's puppetserver takes minutes to start, and a waiting node holds no slot. */
export const MASTER_WAIT_S = 3600;

/** known_master_wait's default: a master rebooting or starting is back within minutes; a region's node should not wait an hour for it. */
export const KNOWN_MASTER_WAIT_S = 600;

/** An unanswered question (lost in transit, or nobody there), as the client words it. */
export function noReply(error: string): boolean {
  return /no reply/.test(error);
}

/** A wait recorded on the node: parked with our claim for `leaseS`, or, past its end, failed with `error`. */
export type WaitMark = { leaseS: number } | { error: string };

/** When the wait for a gone node ends (ms epoch). */
export function goneUntil(rec: NodeRecord, policy: WaitPolicy): number {
  return (rec.gone?.since ?? 0) + (policy.goneTimeoutS ?? GONE_TIMEOUT_S) * 1000;
}

/**
 * The node is gone: recorded (since when and how we know; kept from the first time); its claim
 * lasts until the wait ends, so no other provisioner takes it meanwhile.
 */
export function markGone(rec: NodeRecord, policy: WaitPolicy, now: number, reason: string): WaitMark {
  if (!rec.gone) noteRound(rec, { event: "gone", stage: rec.current, detail: reason }, now);
  rec.gone ??= { since: now, reason };
  const until = goneUntil(rec, policy);
  if (now >= until) {
    rec.lastError = `gone for ${Math.round((now - rec.gone.since) / 1000)}s and not back (${rec.gone.reason})`;
    return { error: rec.lastError };
  }
  appendLog(rec, `waiting up to ${Math.round((until - now) / 1000)}s for the node to come back (${rec.gone.reason})`, now);
  return { leaseS: Math.ceil((until - now) / 1000) };
}

/**
 * When the wait for a master ends (ms epoch; Infinity with master_wait 0). A wait for the known
 * master the node's criteria pick ends after known_master_wait, and then the node falls back.
 */
export function masterWaitUntil(rec: NodeRecord, policy: WaitPolicy): number {
  const since = rec.masterWait?.since ?? 0;
  if (rec.masterWait?.criterion) return since + (policy.knownMasterWaitS ?? KNOWN_MASTER_WAIT_S) * 1000;
  const s = policy.masterWaitS ?? MASTER_WAIT_S;
  return s > 0 ? since + s * 1000 : Number.POSITIVE_INFINITY;
}

/** The criterion that picked a known master for the node, and the node's value of it. */
export interface MasterPick {
  criterion: string;
  value: unknown;
}

/** What a node waiting for a master shows (status, the board, the log). */
export function masterWaitReason(master: string | undefined, looking = "the configured masters", pick?: MasterPick): string {
  if (master && pick) return `waiting for ${master}, the master its ${pick.criterion} ${String(pick.value)} picks, which does not answer`;
  return master ? `waiting for its master ${master}, which does not answer` : `waiting for a Puppet master: none answers (${looking})`;
}

/**
 * No master answers for the node (`master`: its own; none: any): recorded (since the first time
 * for that master); its claim is an ordinary lease, renewed while it waits (decision 0009). Past
 * master_wait, the error names the master and how long it waited; the mark goes, a failed node
 * waits for nothing.
 */
export function markMasterWait(rec: NodeRecord, policy: WaitPolicy, now: number, master: string | undefined, looking?: string, pick?: MasterPick): WaitMark {
  const criterion = master ? pick?.criterion : undefined;
  if (!rec.masterWait || rec.masterWait.master !== master || rec.masterWait.criterion !== criterion) rec.masterWait = { since: now, reason: masterWaitReason(master, looking, criterion ? pick : undefined), ...(master ? { master } : {}), ...(criterion ? { criterion } : {}) };
  const wait = rec.masterWait;
  const until = masterWaitUntil(rec, policy);
  // The known master's wait never fails the node: past it, the node's next look falls back (chooseMaster).
  if (criterion) {
    appendLog(rec, `${wait.reason}; waiting up to ${Math.max(0, Math.round((until - now) / 1000))}s, then it falls back to a master that answers (known_master_wait), holding no slot`, now);
    return { leaseS: policy.lockLeaseS };
  }
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
  if (rec.gone && disabledAlready(rec)) {
    // a record an older provisioner parked: the node's stop was the restart disabling causes
    appendLog(rec, `not waiting for the node: it switched provisioning off, and its stop (${rec.gone.reason}) was the restart that causes; what remains needs nothing of it`, now);
    delete rec.gone;
  } else if (rec.gone) {
    appendLog(rec, `the node is back after ${Math.round((now - rec.gone.since) / 1000)}s (it was gone: ${rec.gone.reason})${repeating}`, now);
    noteRound(rec, { event: "back", stage: rec.current }, now);
    delete rec.gone;
  }
  if (rec.masterWait) {
    const what = rec.masterWait.criterion ? `${rec.masterWait.master}, the master its ${rec.masterWait.criterion} picks,` : rec.masterWait.master ? `its master ${rec.masterWait.master}` : "a Puppet master";
    appendLog(rec, `${what} answers after ${Math.round((now - rec.masterWait.since) / 1000)}s of waiting${rec.master && !rec.masterWait.master ? ` (${rec.master})` : ""}${repeating}`, now);
    delete rec.masterWait;
  }
}

/**
 * The node does not get the master its criteria picked (`from`, a known master that did not answer
 * in time): said once per round in its log and kept on the record for the admins' notice; the
 * wait for that master is over.
 */
export function noteFallback(rec: NodeRecord, fb: { from: string; reason: string }, to: string | undefined, now: number): void {
  if (rec.masterFallback?.from !== fb.from) {
    rec.masterFallback = { from: fb.from, reason: fb.reason, at: now };
    appendLog(rec, `fell back ${to ? `to ${to}` : "to any master that answers"}: ${fb.reason}`, now);
  } else if (to) appendLog(rec, `fell back to ${to} (${fb.from} did not answer in time)`, now);
  if (rec.masterWait?.master === fb.from) delete rec.masterWait;
}
