import { appendLog, type NodeRecord } from "../protocol/provision-record.js";
import type { ProvisionState } from "../provisioner/state.js";
import { selectFailed, type RetrySelection } from "./provision-failures.js";

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

export interface GroupRetryResult {
  /** Nodes set back to pending. */
  retried: string[];
  /** Nodes that were selected but changed before their turn (a provisioner or another operator wrote first). */
  changed: string[];
}

/**
 * Retries every failed node of a group, of a master, or of a master within a group
 * (provision-failures.ts selectFailed), each with a compare-and-set on the record it read: a node a
 * provisioner (or another operator) changed meanwhile is left alone and reported in `changed`.
 * `records` is the selection's source: the bucket's records, or a live copy of them (the console's).
 */
export async function retryFailed(store: ProvisionState, records: Iterable<NodeRecord>, sel: RetrySelection, by: string, concurrency = 64): Promise<GroupRetryResult> {
  const wanted = selectFailed(records, sel).map((r) => r.identity);
  const retried: string[] = [];
  const changed: string[] = [];
  let next = 0;
  const worker = async () => {
    while (next < wanted.length) {
      const id = wanted[next++]!;
      const v = await store.get(id);
      // read again: still failed, and (for a group) still failing for the same cause
      if (!v || selectFailed([v.record], sel).length === 0) {
        changed.push(id);
        continue;
      }
      applyRetry(v.record, by);
      if ((await store.compareAndSet(v)) === undefined) changed.push(id);
      else retried.push(id);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, wanted.length) }, worker));
  return { retried: retried.sort(), changed: changed.sort() };
}
