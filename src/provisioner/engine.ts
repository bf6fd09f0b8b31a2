import { appendLog, noteRound, noticeKey, type NodeRecord, type Stage } from "../protocol/provision-record.js";
import { lockNeedsRenewal } from "./deploy-lock.js";
import { attemptsFor, backoffMs, CERT_STAGES, disabledAlready, needsNothingOfNode, pastDisable, remainingStages, SLOW_STAGES } from "./stages.js";
import { clearWaits, goneUntil, markGone, markMasterWait, masterWaitUntil, noReply, type WaitMark } from "./waits.js";

// The provisioning engine for one node: what to do next, given its record and what just happened.
// Pure: no timers, no I/O, the clock and the dice passed in. It owns every decision about a node:
// the step order, the skipping of certificate steps, retries with backoff, the repeat after a node
// restart, the wait on a busy Puppet, and how a run ends (failed: unlock, tell the admins, record;
// abandoned: record, unlock; lost to another provisioner: touch nothing). The edge
// (src/provisioner/driver.ts) carries out each action and feeds back the event it produced, until
// the action is terminal (done, fail, abandon, leave, park). What a node's own events mean, when a
// question is asked again and when a node or a master counts as away are its rules in liveness.ts;
// what a parked node waits for (itself, gone; its master) and for how long, in waits.ts.
//
//   [prepare] begin -> [probe-cert] -> [renew-lock] -> [persist] -> run --ok--> persist --> next stage ... persist -> done
//                                                                  |failed: node restarted -> run (no attempt)
//                                                                  |failed: Puppet busy    -> wait -> run (no attempt)
//                                                                  |failed                 -> persist -> wait -> run
//                                                                  |   after the last attempt, or prepare-failed:
//                                                                  |   release-lock -> [notify] -> persist (failed) -> fail
//   any persist answered "someone else wrote" -> leave;  the provisioner stopping -> persist -> release-lock -> abandon
//   the node gone (mid-step, or unreachable before it) -> persist (gone, claim until the wait ends) -> park;
//   back (its run begins again) -> the step repeated; still gone when the wait ends -> [notify] -> persist (failed) -> fail
//   no master answers (before the first step), or a master step failed and its master no longer answers
//     -> persist (masterWait, claim renewed while it waits) -> park; the master answers -> the step repeated;
//     still no answer when master_wait ends -> release-lock -> [notify] -> persist (failed) -> fail

export interface EnginePolicy {
  /** The enabled stages, in order. */
  stages: readonly Stage[];
  attempts: number;
  backoffS: number;
  maxBackoffS: number;
  puppetTimeoutS: number;
  lockLeaseS: number;
  /** The notify step is on: a failure is told to the admins too. */
  notifyFailures?: boolean;
  /** How long a node that went away is waited for before it fails (config gone.timeout), s. */
  goneTimeoutS?: number;
  /** How long a node waits for a Puppet master that does not answer before it fails (master_wait), s; 0: no limit; for the known master its criteria pick before it falls back (known_master_wait), s. */
  masterWaitS?: number;
  knownMasterWaitS?: number;
}

export type EngineAction =
  | { type: "probe-cert" }
  /** Take the node's deploy lock again for `leaseS` (it would run out during a slow step). */
  | { type: "renew-lock"; leaseS: number }
  /** Write the record, our claim renewed for `leaseS` (0: given up, another may take it at once). */
  | { type: "persist"; leaseS: number }
  /** Carry out `stage` once; `first` is the first try of this stage (announce it). */
  | { type: "run"; stage: Stage; first: boolean }
  /** Let `ms` pass. `retry` when it is a backoff after a counted failure. */
  | { type: "wait"; ms: number; retry?: { stage: Stage; attempt: number; error: string } }
  /** Release the node's deploy lock, best effort (a lock that cannot be released expires with its lease). */
  | { type: "release-lock" }
  /** Tell the admins, best effort. */
  | { type: "notify"; subject: string; message: string; key: string }
  | { type: "done" }
  | { type: "fail"; error: string }
  /** We are stopping: the record is left in progress for a restart, the node's lock released. */
  | { type: "abandon"; reason: string }
  /** Someone else owns the node now, or (`unwritten`) its record could not be written while our claim held: touch nothing. */
  | { type: "leave"; reason: string; unwritten?: boolean }
  /** The node waits (its record says why) for itself ("node", gone) or its `master` (none: any); look again meanwhile, fail it past `until` (ms epoch; Infinity: never). */
  | { type: "park"; until: number; awaiting: "node" | "master"; master?: string };

export type EngineEvent =
  | { type: "begin" }
  /** Before the first step: the node's facts or its master could not be had. */
  | { type: "prepare-failed"; error: string }
  /** Before the first step: its own `master` (its CSR and certificate are there), or (`criterion`) the known one its criteria pick, or (none) any, does not answer; `looking`: how masters are found. */
  | { type: "master-away"; master?: string; looking: string; criterion?: string; value?: unknown }
  /** A gone node's run begun because it still did not answer (its wait may have ended): nothing was asked of it. */
  | { type: "still-gone" }
  | { type: "cert-probed"; hasCert: boolean }
  | { type: "lock-renewed"; expires?: number }
  | { type: "persisted" }
  | { type: "step-ok"; ms: number; note?: string }
  | { type: "step-failed"; error: string; /** the node answered that Puppet is busy */ busy: boolean; /** the node restarted while we waited */ nodeRestarted: boolean; /** the node went away while we waited: how we know */ gone?: string; /** the step needs the master, and the node's master did not answer discovery right after */ masterAway?: boolean; /** the node announced itself in the fleet (on its certificate) while we waited */ inFleet?: boolean }
  | { type: "waited" }
  | { type: "lock-released" }
  | { type: "notified"; error?: string }
  /** The record was not written: someone else wrote first, or (`error`) the bucket did not take it while our claim held. */
  | { type: "lost"; error?: string }
  | { type: "stopping" };

type Phase = "idle" | "probing" | "renewing" | "before-step" | "running" | "after-ok" | "after-failure" | "busy-wait" | "backoff" | "finishing" | "parking" | Closing | "finished";
type Closing = "failing:release" | "failing:notify" | "failing:persist" | "abandoning:persist" | "abandoning:release";

/** The engine's memory of one node's run (the durable part is the record). */
export interface NodeRun {
  rec: NodeRecord;
  todo: Stage[];
  index: number;
  attempt: number;
  restarts: number;
  busyWaitedMs: number;
  lastError?: string;
  /** Why the run is ending, while it ends (failing or abandoning). */
  ending?: string;
  /** The node is unreachable: its lock cannot be released (it expires with its lease). */
  unreachable?: boolean;
  /** While parking: what the node waits for. */
  awaiting?: "node" | "master";
  phase: Phase;
}

/** A run over the stages after the record's last completed one. */
export function newRun(rec: NodeRecord, policy: EnginePolicy): NodeRun {
  return { rec, todo: remainingStages(policy.stages, rec.stage), index: 0, attempt: 1, restarts: 0, busyWaitedMs: 0, phase: "idle" };
}

const isTerminal = (a: EngineAction): boolean => a.type === "done" || a.type === "fail" || a.type === "abandon" || a.type === "leave" || a.type === "park";
export { isTerminal };

const closing = (p: Phase): p is Closing => p.startsWith("failing:") || p.startsWith("abandoning:");

/** Feed one event; the record is updated in place and the next action comes back. */
export function decide(run: NodeRun, ev: EngineEvent, policy: EnginePolicy, now: number, rand: () => number = Math.random): EngineAction {
  const rec = run.rec;
  if (run.phase === "finished") throw new Error(`engine: event ${ev.type} after the run of ${rec.identity} ended`);
  // Ending is best effort: a write that loses or a stop meanwhile does not stop the unlock and the notice.
  if (closing(run.phase)) return close(run, ev, policy, now);
  // Unwritten (an error), the bucket's record is still our claim: resumed from it once the bucket answers.
  if (ev.type === "lost" && ev.error !== undefined) return finish(run, { type: "leave", reason: `the record of ${rec.identity} could not be written (${ev.error}); it is resumed from the last one written once the state bucket answers`, unwritten: true });
  if (ev.type === "lost") return finish(run, { type: "leave", reason: `state of ${rec.identity} was changed by someone else; leaving the node to them` });
  if (ev.type === "stopping") return abandon(run, "provisioner stopping", now);
  // still gone: a node that switched provisioning off never answers there again, and what remains needs nothing of it
  if (ev.type === "still-gone") return disabledAlready(rec) ? decide(run, { type: "begin" }, policy, now, rand) : park(run, "node", markGone(rec, policy, now, "no answer"), policy, now);
  if (ev.type === "master-away") return park(run, "master", markMasterWait(rec, policy, now, ev.master, ev.looking, ev.criterion ? { criterion: ev.criterion, value: ev.value } : undefined), policy, now);
  if (ev.type === "prepare-failed") {
    // No answer at all before the first step: the node is gone (it may come back), not broken.
    if (noReply(ev.error) && !pastDisable(rec)) return park(run, "node", markGone(rec, policy, now, "no answer before its next step"), policy, now);
    rec.lastError = ev.error;
    return failing(run, ev.error, policy, now);
  }
  const stage = run.todo[run.index];
  switch (ev.type) {
    case "begin":
      // the run begins only once the node answered again, its master answers (or it needs nothing more of them)
      clearWaits(rec, now);
      return advance(run, policy, now);
    case "cert-probed":
      rec.hadCert = ev.hasCert;
      if (ev.hasCert) appendLog(rec, "node already has a certificate; skipping certificate steps", now);
      return advance(run, policy, now);
    case "lock-renewed":
      rec.lockExpires = ev.expires;
      run.phase = "before-step";
      return { type: "persist", leaseS: slowLease(policy) };
    case "persisted":
      if (run.phase === "before-step") return startStep(run);
      if (run.phase === "parking") {
        if (run.awaiting === "master") return finish(run, { type: "park", until: masterWaitUntil(rec, policy), awaiting: "master", ...(rec.masterWait?.master ? { master: rec.masterWait.master } : {}) });
        return finish(run, { type: "park", until: goneUntil(rec, policy), awaiting: "node" });
      }
      if (run.phase === "finishing") return finish(run, { type: "done" });
      if (run.phase === "after-ok") {
        run.index++;
        return advance(run, policy, now);
      }
      if (run.phase === "after-failure") {
        // A notice that cannot be sent does not undo a provisioned, disabled node (failed, it could never be retried).
        if (run.attempt >= attemptsFor(stage, policy.attempts) && stage === "notify") return noticeLost(run, policy, now);
        if (run.attempt >= attemptsFor(stage, policy.attempts)) return failing(run, run.lastError ?? "failed", policy, now);
        run.phase = "backoff";
        return { type: "wait", ms: backoffMs(run.attempt, policy.backoffS, policy.maxBackoffS, rand), retry: { stage: stage!, attempt: run.attempt, error: run.lastError ?? "" } };
      }
      break;
    case "step-ok":
      if (run.phase !== "running" || !stage) break;
      rec.timings[stage] = Math.round(ev.ms);
      (rec.stageTimes ??= {})[stage] = { start: rec.stageTimes[stage]?.start ?? now - Math.round(ev.ms), end: now };
      rec.stage = stage;
      rec.attempts = 0;
      rec.lastError = undefined;
      appendLog(rec, `${stage} ok${ev.note ? `: ${ev.note}` : ""} (${Math.round(ev.ms)} ms)`, now);
      run.phase = "after-ok";
      return { type: "persist", leaseS: policy.lockLeaseS };
    case "step-failed":
      if (run.phase !== "running" || !stage) break;
      // Back in the fleet on its certificate while disable ran: it took effect, its reply lost on the way.
      if (ev.inFleet && stage === "disable") return decide(run, { type: "step-ok", ms: now - (rec.stageTimes?.[stage]?.start ?? now), note: "the node is back in the fleet: provisioning is off (its reply was lost)" }, policy, now, rand);
      // The node went away (unless nothing more is asked of it): no attempt is spent, no slot held meanwhile.
      if (ev.gone && !needsNothingOfNode(stage, rec)) {
        appendLog(rec, `${stage}: the node is gone (${ev.gone})`, now);
        return park(run, "node", markGone(rec, policy, now, ev.gone), policy, now);
      }
      // The node's master went away: the master's failure, not the node's. No attempt is spent;
      // the node waits for that master (its CSR and certificate are there), holding no slot.
      if (ev.masterAway && rec.master) {
        appendLog(rec, `${stage}: its master ${rec.master} does not answer (${ev.error})`, now);
        return park(run, "master", markMasterWait(rec, policy, now, rec.master), policy, now);
      }
      // Every step is idempotent: a node restart costs a repeat, not an attempt (bounded, for a node that keeps restarting).
      if (ev.nodeRestarted && ++run.restarts <= policy.attempts * 2) {
        appendLog(rec, `${stage}: the node restarted; asking again`, now);
        return { type: "run", stage, first: false };
      }
      // Another Puppet run holds the node's lock (e.g. one started before a provisioner restart):
      // wait for it without spending attempts, up to one Puppet run's time.
      if (ev.busy && run.busyWaitedMs < policy.puppetTimeoutS * 1000) {
        const wait = Math.max(2000, backoffMs(1, policy.backoffS, policy.maxBackoffS, rand));
        run.busyWaitedMs += wait;
        appendLog(rec, `${stage}: a Puppet run is already in progress on the node; waiting ${Math.round(wait / 1000)}s`, now);
        run.phase = "busy-wait";
        return { type: "wait", ms: wait };
      }
      rec.attempts = run.attempt;
      rec.lastError = `${stage}: ${ev.error}`;
      run.lastError = ev.error;
      appendLog(rec, `${stage} failed (attempt ${run.attempt}/${attemptsFor(stage, policy.attempts)}): ${ev.error}`, now);
      run.phase = "after-failure";
      return { type: "persist", leaseS: policy.lockLeaseS };
    case "waited":
      if (run.phase === "backoff") run.attempt++;
      else if (run.phase !== "busy-wait") break;
      run.phase = "running";
      return { type: "run", stage: stage!, first: false };
  }
  throw new Error(`engine: unexpected ${ev.type} for ${rec.identity} in phase ${run.phase}`);
}

function noticeLost(run: NodeRun, policy: EnginePolicy, now: number): EngineAction {
  appendLog(run.rec, `provisioned, but the admins could not be told: ${run.lastError ?? "the notice failed"}`, now);
  run.index++;
  return advance(run, policy, now);
}

const finish = (run: NodeRun, a: EngineAction): EngineAction => ((run.phase = "finished"), a);

/** A failure that ends the run: unlock first and tell the admins, then record it, so a node that reads "failed" is unlocked and its admins told. */
function failing(run: NodeRun, error: string, policy: EnginePolicy, now: number): EngineAction {
  run.ending = error;
  run.phase = "failing:release";
  // an unreachable node's lock cannot be released: it expires with its lease
  if (run.unreachable) return close(run, { type: "lock-released" }, policy, now);
  return { type: "release-lock" };
}

/** The node waits (gone, or for its master) as waits.ts marked it: parked with our claim, or past the wait failed (a gone node asked nothing more). */
function park(run: NodeRun, awaiting: "node" | "master", w: WaitMark, policy: EnginePolicy, now: number): EngineAction {
  if ("error" in w) {
    if (awaiting === "node") run.unreachable = true;
    return failing(run, w.error, policy, now);
  }
  run.phase = "parking";
  run.awaiting = awaiting;
  return { type: "persist", leaseS: w.leaseS };
}

/** Stopping: the record stays in progress (a restart resumes it) with its claim given up, and the lock is released. */
function abandon(run: NodeRun, reason: string, now: number): EngineAction {
  run.ending = reason;
  appendLog(run.rec, `abandoned at ${run.rec.current ?? "start"}: ${reason}`, now);
  run.phase = "abandoning:persist";
  return { type: "persist", leaseS: 0 };
}

/** The ending's next action once the last one completed (whatever its outcome). */
function close(run: NodeRun, ev: EngineEvent, policy: EnginePolicy, now: number): EngineAction {
  const rec = run.rec;
  const error = run.ending ?? "failed";
  switch (run.phase) {
    case "abandoning:persist":
      run.phase = "abandoning:release";
      return { type: "release-lock" };
    case "abandoning:release":
      return finish(run, { type: "abandon", reason: error });
    case "failing:release":
      if (policy.notifyFailures) {
        run.phase = "failing:notify";
        const message = `muster could not provision ${rec.identity}.\nStep: ${rec.current ?? "start"}\nError: ${rec.lastError ?? error}\n\nRecent log:\n${rec.log.slice(-10).join("\n")}`;
        return { type: "notify", subject: `Provisioning ${rec.identity} FAILED`, message, key: noticeKey(rec, "failed") };
      }
      return failed(run, error, now);
    case "failing:notify":
      if (ev.type === "notified" && ev.error) appendLog(rec, `could not notify the admins: ${ev.error}`, now);
      return failed(run, error, now);
    case "failing:persist":
      return finish(run, { type: "fail", error });
  }
  throw new Error(`engine: unexpected ${ev.type} for ${rec.identity} in phase ${run.phase}`);
}

function failed(run: NodeRun, error: string, now: number): EngineAction {
  const rec = run.rec;
  rec.status = "failed";
  rec.finishedAt = now;
  rec.claimExpires = undefined;
  appendLog(rec, `failed: ${error}`, now);
  noteRound(rec, { event: "failed", stage: rec.current ?? rec.stage, detail: rec.lastError ?? error }, now);
  run.phase = "failing:persist";
  return { type: "persist", leaseS: 0 };
}

const slowLease = (policy: EnginePolicy): number => policy.lockLeaseS + policy.puppetTimeoutS;

/** To the next stage to run (skipping certificate steps of a node with a certificate), or done. */
function advance(run: NodeRun, policy: EnginePolicy, now: number): EngineAction {
  const rec = run.rec;
  for (;;) {
    const stage = run.todo[run.index];
    if (!stage) {
      rec.status = "done";
      rec.current = undefined;
      rec.finishedAt = now;
      rec.claimExpires = undefined;
      appendLog(rec, `provisioned against ${rec.master ?? "its master"} in ${((now - (rec.startedAt ?? now)) / 1000).toFixed(1)}s`, now);
      noteRound(rec, { event: "done", by: rec.master }, now);
      run.phase = "finishing";
      return { type: "persist", leaseS: policy.lockLeaseS };
    }
    if (CERT_STAGES.has(stage)) {
      if (rec.hadCert === undefined) {
        run.phase = "probing";
        return { type: "probe-cert" };
      }
      if (rec.hadCert) {
        run.index++;
        continue;
      }
    }
    rec.current = stage;
    (rec.stageTimes ??= {})[stage] = { start: now };
    run.attempt = 1;
    run.restarts = 0;
    run.busyWaitedMs = 0;
    run.lastError = undefined;
    // One KV write per step: fast steps are recorded when they complete; slow ones also when they
    // start, with claim and node lock renewed to outlast the step (a Puppet run may exceed the lease).
    if (SLOW_STAGES.has(stage)) {
      if (lockNeedsRenewal(rec, policy.stages.includes("lock"), policy.puppetTimeoutS, now)) {
        run.phase = "renewing";
        return { type: "renew-lock", leaseS: slowLease(policy) };
      }
      run.phase = "before-step";
      return { type: "persist", leaseS: slowLease(policy) };
    }
    return startStep(run);
  }
}

function startStep(run: NodeRun): EngineAction {
  run.phase = "running";
  return { type: "run", stage: run.todo[run.index]!, first: true };
}
