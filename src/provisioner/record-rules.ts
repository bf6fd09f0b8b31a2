import { appendLog, noteRound, type NodeRecord } from "../protocol/provision-record.js";

// The operator's rules over a provisioning record: may it be retried, or forgotten, and what a
// retry writes. Pure; ProvisionState (state.ts) applies them with a compare-and-set, for the CLI,
// the console and the lab alike.

/** A gone node (the provisioner's mark, while it waits for the node to come back). */
const isGone = (rec: NodeRecord) => (rec.status === "in_progress" || rec.status === "pending") && rec.gone !== undefined;

/**
 * Why `rec` may not be retried, or undefined when it may: failed nodes, and gone ones (retried now
 * rather than after their wait), or with `force` a done or pending one (say, reinstalled).
 */
export function retryRefusal(rec: NodeRecord, force = false): string | undefined {
  if (isGone(rec)) return undefined;
  if (rec.status === "in_progress") return `${rec.identity} is being provisioned right now (by ${rec.owner ?? "a provisioner"}); wait for it to finish or fail`;
  if (rec.status === "failed" || force) return undefined;
  return `${rec.identity} is ${rec.status}; retry applies to failed and gone nodes (--force starts a ${rec.status} node over, e.g. after a reinstall)`;
}

/** Re-queues the record in place (the provisioner picks it up next cycle); `by` names who asked. */
export function applyRetry(rec: NodeRecord, by = "operator", now = Date.now()): void {
  const was = isGone(rec) ? "gone" : rec.status;
  rec.status = "pending";
  rec.stage = undefined;
  rec.current = undefined;
  rec.attempts = 0;
  rec.lastError = undefined;
  rec.hadCert = undefined;
  rec.finishedAt = undefined;
  rec.claimExpires = undefined;
  delete rec.gone;
  appendLog(rec, was === "failed" ? `retry requested by ${by}` : `retry requested by ${by} (was ${was})`, now);
  noteRound(rec, { event: "retried", by, detail: `was ${was}` }, now);
}

/**
 * Why `rec` may not be forgotten (its record dropped, to be provisioned afresh if it ever waits
 * again), or undefined when it may: gone and failed nodes; never one being provisioned now.
 */
export function forgetRefusal(rec: NodeRecord): string | undefined {
  if (isGone(rec) || rec.status === "failed") return undefined;
  return `${rec.identity} is ${rec.status}; forget applies to gone and failed nodes (decommission takes a node out for good)`;
}
