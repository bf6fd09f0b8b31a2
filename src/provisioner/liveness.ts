import { appendLog, type NodeRecord } from "../protocol/provision-record.js";
import type { EnginePolicy } from "./engine.js";
import { noReply } from "./waits.js";

// Whether a node is there: the engine's rules (pure, like engine.ts, which decides a run) for
// what a node's own lifecycle events mean, when an unanswered question is asked again, when a node
// the provisioner waits on counts as gone, and what a check on a parked (gone) node leads to.
// docs/provisioner.md#machines-that-die.

/** How the provisioner watches a node it waits on (config `gone`). */
export interface LivenessPolicy {
  /** Seconds between liveness checks (rpcutil#ping) while a step waits on the node; 0: no checks. */
  checkS: number;
  /** Unanswered checks in a row before the node counts as gone. */
  checks: number;
}

/**
 * A waiting node announced it started (its startup event, already authenticated). In flight: the
 * step it was doing for us died with it, so the wait is abandoned and the step asked again. Failed:
 * a fresh round (operators fix the cause, then reboot or `provision retry`). Done: nothing to do.
 * Otherwise (new, pending, or parked while it was gone) it is provisioned from where it stood.
 */
export function onNodeStarted(rec: NodeRecord | undefined, inFlight: boolean): "repeat-step" | "requeue" | "provision" | "ignore" {
  if (inFlight) return "repeat-step";
  if (rec?.status === "failed") return "requeue";
  if (rec?.status === "done") return "ignore";
  return "provision";
}

/** The record a restarted failed node is re-queued with (then compare-and-set). */
export function requeueRestarted(rec: NodeRecord, now: number): void {
  rec.status = "pending";
  rec.attempts = 0;
  rec.stage = undefined;
  delete rec.gone;
  appendLog(rec, "node restarted; provisioning will be retried", now);
}

/** A node announced it is stopping (its shutdown event, authenticated): a step waiting on it waits for nothing. */
export const STOPPING_REASON = "it announced it is stopping (shutdown event)";

/**
 * A request published while a broker fails over is simply lost (core NATS is at-most-once). A
 * question that changes nothing on the node (inventory, has_cert) whose reply did not come is
 * asked again, up to retries.attempts times in all, rather than failing the node.
 */
export function askAgain(attempt: number, error: string, policy: Pick<EnginePolicy, "attempts">): boolean {
  return attempt < policy.attempts && noReply(error);
}

/** After `misses` liveness checks in a row went unanswered: why the node counts as gone, or undefined while it does not. */
export function goneAfter(misses: number, p: LivenessPolicy): string | undefined {
  if (p.checkS <= 0 || misses < p.checks) return undefined;
  return `no answer for ${misses * p.checkS}s (${misses} liveness checks)`;
}

/**
 * A parked node checked again (one liveness check): answered, it is back and provisioned from
 * where it stood; unanswered past the end of its wait, its run begins once more to fail it; else
 * it is checked again later.
 */
export function whileGone(answered: boolean, now: number, until: number): "back" | "give-up" | "keep-waiting" {
  if (answered) return "back";
  return now >= until ? "give-up" : "keep-waiting";
}

/**
 * A node parked while no master answers for it, at a master discovery (`answering`: the masters
 * found): its master (or, when it has none yet, any master) answers: back, provisioned on from
 * where it stood; unanswered past the end of its wait: its run begins once more to fail it; else
 * it waits on.
 */
export function whileMasterAway(master: string | undefined, answering: readonly string[], now: number, until: number): "back" | "give-up" | "keep-waiting" {
  return whileGone(master ? answering.includes(master) : answering.length > 0, now, until);
}

/** After `misses` master discoveries in a row without the node's master, while a step needs it: why the master counts as away, or undefined while it does not. */
export function masterAwayAfter(master: string, misses: number, p: LivenessPolicy): string | undefined {
  return goneAfter(misses, p) === undefined ? undefined : `${master} missing from ${misses} master discoveries in a row`;
}

/** Between checks on a parked node: as long as it takes an in-step check to call a node gone, at most 60 s. */
export function recheckMs(p: LivenessPolicy): number {
  return p.checkS > 0 ? Math.min(60_000, Math.max(1000, p.checkS * p.checks * 1000)) : 15_000;
}
