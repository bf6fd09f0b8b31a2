import { appendLog, type NodeRecord } from "../protocol/provision-record.js";

// The operator's rules over provisioning records (`muster provision retry` and the web console's
// retry button share them). Pure: the records are read and written through ProvisionState
// (src/provisioner/state.ts).

/**
 * Why `rec` may not be retried, or undefined when it may (`muster provision retry` and the web
 * console's retry button share this rule). Only failed nodes, unless `force` (done or pending).
 */
export function retryRefusal(rec: NodeRecord, force = false): string | undefined {
  if (rec.status === "in_progress") return `${rec.identity} is being provisioned right now (by ${rec.owner ?? "a provisioner"}); wait for it to finish or fail`;
  if (rec.status === "failed" || force) return undefined;
  return `${rec.identity} is ${rec.status}; retry applies to failed nodes (--force starts a ${rec.status} node over, e.g. after a reinstall)`;
}

/** Re-queues the record in place (the provisioner picks it up next cycle); `by` names who asked. */
export function applyRetry(rec: NodeRecord, by = "operator", now = Date.now()): void {
  const was = rec.status;
  rec.status = "pending";
  rec.stage = undefined;
  rec.current = undefined;
  rec.attempts = 0;
  rec.lastError = undefined;
  rec.hadCert = undefined;
  rec.finishedAt = undefined;
  appendLog(rec, was === "failed" ? `retry requested by ${by}` : `retry requested by ${by} (--force; was ${was})`, now);
}
