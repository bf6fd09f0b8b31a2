import { test } from "node:test";
import assert from "node:assert/strict";
import { Stages, newRecord, type NodeRecord, type Stage } from "../../src/protocol/provision-record.js";
import { claimRecord, resumeVerdict } from "../../src/provisioner/claim.js";
import { decide, isTerminal, newRun, type EngineAction, type EngineEvent, type EnginePolicy } from "../../src/provisioner/engine.js";
import { StepsInFlight } from "../../src/provisioner/in-flight.js";
import { STOPPING_REASON } from "../../src/provisioner/liveness.js";
import { restartExpected } from "../../src/provisioner/stages.js";

// Issue 40 §1: a node switches provisioning off and restarts onto its Puppet certificate right
// after its disable step; its shutdown event may arrive before the disable reply is taken, while
// notify runs, or after the run ended. None of these may turn a provisioned node into a gone one.
// Pure: the engine, and the in-flight step bookkeeping the scheduler's events go through
// (in-flight.ts), driven as the driver drives them, with the shutdown delivered at a chosen point.

const ALL: Stage[] = [...Stages];
const policy: EnginePolicy = { stages: ALL, attempts: 3, backoffS: 2, maxBackoffS: 60, puppetTimeoutS: 900, lockLeaseS: 600, notifyFailures: true };
const T0 = 1_700_000_000_000;
const inProgress = (over: Partial<NodeRecord> = {}): NodeRecord => ({ ...newRecord("node01.example.net", T0), status: "in_progress", owner: "p1", rounds: 1, claimExpires: T0 + 600_000, master: "puppet-eu.example.net", masterAddress: "192.0.2.11", ...over });

interface Plan {
  /** The node's shutdown event arrives while this stage's step is in flight. */
  stopDuring?: Stage;
  /** ... and it arrives before (or after) that step's own answer is taken. */
  stopBeforeAnswer?: boolean;
  /** The node announces itself in the fleet while this stage's step is in flight (its reply lost). */
  inFleetDuring?: Stage;
  /** The notify step's own answer: an error each time (a notifier that is down). */
  notifyError?: string;
  /** How many of the notify step's answers are that error (default all). */
  notifyFailures?: number;
}

/**
 * The driver's part, pure: each step registered in flight as it starts; the scheduler's event goes
 * through StepsInFlight as the scheduler sends it; a step whose wait was ended early fails with
 * what ended it, else it answers as the node would.
 */
function drive(rec: NodeRecord, plan: Plan): { actions: EngineAction[]; end: EngineAction; stopping: ("gone" | "restart" | undefined)[] } {
  const run = newRun(rec, policy);
  const inFlight = new StepsInFlight();
  const actions: EngineAction[] = [];
  const stopping: ("gone" | "restart" | undefined)[] = [];
  let now = T0;
  let notifyTries = 0;
  let a = decide(run, { type: "begin" }, policy, now, () => 0.5);
  for (let guard = 0; guard < 1000; guard++) {
    actions.push(a);
    if (isTerminal(a)) {
      inFlight.delete(rec.identity);
      // the event after the run ended: nothing in flight to end, nothing changed
      if (plan.stopDuring === undefined) stopping.push(inFlight.nodeStopping(rec.identity, STOPPING_REASON));
      return { actions, end: a, stopping };
    }
    let ev: EngineEvent;
    now += 100;
    if (a.type === "run") {
      const step = inFlight.start(rec, a.stage);
      const failNotice = a.stage === "notify" && plan.notifyError && (plan.notifyFailures === undefined || notifyTries++ < plan.notifyFailures);
      let answer: EngineEvent = failNotice ? { type: "step-failed", error: plan.notifyError!, busy: false, nodeRestarted: false } : { type: "step-ok", ms: 100 };
      const stop = () => stopping.push(inFlight.nodeStopping(rec.identity, STOPPING_REASON));
      if (plan.stopDuring === a.stage && plan.stopBeforeAnswer) stop();
      if (plan.inFleetDuring === a.stage) inFlight.nodeInFleet(rec.identity);
      // a step whose wait was ended fails with why, as runStep reports it
      if (step.controller.signal.aborted) answer = { type: "step-failed", error: "aborted", busy: false, nodeRestarted: false, gone: step.gone, ...(step.inFleet ? { inFleet: true } : {}) };
      if (plan.stopDuring === a.stage && !plan.stopBeforeAnswer) stop();
      ev = answer;
    } else if (a.type === "persist") ev = { type: "persisted" };
    else if (a.type === "wait") ev = { type: "waited" };
    else if (a.type === "release-lock") ev = { type: "lock-released" };
    else if (a.type === "notify") ev = { type: "notified" };
    else if (a.type === "probe-cert") ev = { type: "cert-probed", hasCert: false };
    else if (a.type === "renew-lock") ev = { type: "lock-renewed", expires: now + a.leaseS * 1000 };
    else throw new Error(`unexpected ${a.type}`);
    a = decide(run, ev, policy, now, () => 0.5);
  }
  throw new Error("the engine did not finish");
}

test("the node's own restart after disabling: done whichever comes first, its shutdown event or the step's answer, during disable or during notify", () => {
  for (const stopDuring of ["disable", "notify"] as const) {
    for (const stopBeforeAnswer of [true, false]) {
      const rec = inProgress();
      const { end, stopping } = drive(rec, { stopDuring, stopBeforeAnswer });
      const what = `shutdown during ${stopDuring}, ${stopBeforeAnswer ? "before" : "after"} its answer`;
      assert.equal(end.type, "done", what);
      assert.deepEqual(stopping, ["restart"], `${what}: the expected restart`);
      assert.equal(rec.status, "done", what);
      assert.equal(rec.gone, undefined, what);
      assert.ok(!rec.history?.some((h) => h.event === "gone"), what);
    }
  }
  // after the run ended: no step in flight, nothing to end
  const after = drive(inProgress(), {});
  assert.equal(after.end.type, "done");
  assert.deepEqual(after.stopping, [undefined]);
});

test("a shutdown event at each step from the final run on: before disable it is the node going away (parked gone), from disable on the expected restart", () => {
  const later = ALL.slice(ALL.indexOf("production"));
  assert.deepEqual(later, ["production", "daemonize", "unlock", "disable", "notify"]);
  for (const stage of later) {
    const rec = inProgress();
    const { end, stopping } = drive(rec, { stopDuring: stage, stopBeforeAnswer: true });
    const expected = restartExpected(stage, rec);
    assert.equal(expected, stage === "disable" || stage === "notify", stage);
    if (expected) {
      assert.equal(end.type, "done", stage);
      assert.deepEqual(stopping, ["restart"], stage);
    } else {
      // not disabled yet: the node really went (it comes back to the provisioning collective)
      assert.equal(end.type, "park", stage);
      assert.deepEqual(stopping, ["gone"], stage);
      assert.equal(rec.gone?.reason, STOPPING_REASON, stage);
      assert.equal(rec.current, stage);
    }
  }
});

test("a notice that fails while a broker fails over or the notifier restarts is tried again past the steps' 3 attempts, and sent", () => {
  const rec = inProgress();
  const { end } = drive(rec, { stopDuring: "notify", stopBeforeAnswer: true, notifyError: "no notifier found (agent notify)", notifyFailures: 5 });
  assert.equal(end.type, "done");
  assert.ok(rec.log.some((l) => l.includes("notify failed (attempt 5/8)")), rec.log.join("\n"));
  assert.ok(!rec.log.some((l) => l.includes("could not be told")), rec.log.join("\n"));
});

test("a notifier that is down while the node restarts: the notice retried, then the node done with its notice said lost; never gone", () => {
  const rec = inProgress();
  const { end } = drive(rec, { stopDuring: "notify", stopBeforeAnswer: true, notifyError: "no notifier found (agent notify)" });
  assert.equal(end.type, "done");
  assert.equal(rec.status, "done");
  assert.equal(rec.gone, undefined, "not gone");
  assert.ok(rec.log.some((l) => l.includes("notify failed (attempt 8/8)")), rec.log.join("\n"));
  assert.ok(rec.log.some((l) => l.endsWith("provisioned, but the admins could not be told: no notifier found (agent notify)")), rec.log.join("\n"));
  // an edge that still reports the stop as gone at notify (an older driver's report): the engine does not park it either
  const old = inProgress({ stage: "disable" });
  const run = newRun(old, policy);
  assert.deepEqual(decide(run, { type: "begin" }, policy, T0), { type: "run", stage: "notify", first: true });
  const a = decide(run, { type: "step-failed", error: "no notifier found (agent notify)", busy: false, nodeRestarted: false, gone: STOPPING_REASON }, policy, T0 + 100);
  assert.deepEqual(a, { type: "persist", leaseS: 600 }, "a counted failure of the notice, not a park");
  assert.equal(old.gone, undefined);
});

test("the node back in the fleet on its certificate while disable waits (its reply lost): the step took effect, the run goes on to done", () => {
  const rec = inProgress();
  const { end, actions } = drive(rec, { inFleetDuring: "disable" });
  assert.equal(end.type, "done");
  assert.ok(rec.log.some((l) => /disable ok: the node is back in the fleet: provisioning is off \(its reply was lost\)/.test(l)), rec.log.join("\n"));
  assert.equal(actions.filter((a) => a.type === "run" && a.stage === "disable").length, 1, "not asked again");
  // at any other step, being in the fleet ends nothing
  const steps = new StepsInFlight();
  steps.start(inProgress(), "production");
  assert.equal(steps.nodeInFleet("node01.example.net"), false);
});

test("a record an older provisioner left gone at notify after the final run and disable: a restarted provisioner finishes it, not waits for it", () => {
  const stuck = (): NodeRecord =>
    inProgress({
      stage: "disable",
      current: "notify",
      owner: "p1",
      gone: { since: T0, reason: STOPPING_REASON },
      claimExpires: T0 + 3_600_000, // a gone node's claim lasts its whole wait
      history: [{ at: T0, round: 1, event: "gone", stage: "notify", detail: STOPPING_REASON }],
    });
  // its owner restarted: resumed now, not parked until the wait ends
  assert.equal(resumeVerdict(stuck(), "p1", T0 + 60_000), "resume");
  // another provisioner leaves a live claim alone, and takes it once it expires, as any other
  assert.equal(resumeVerdict(stuck(), "p2", T0 + 60_000), undefined);
  assert.equal(resumeVerdict(stuck(), "p2", T0 + 3_600_001), "resume");
  // a node gone before disabling still waits, as before
  assert.deepEqual(resumeVerdict(inProgress({ stage: "production", current: "daemonize", gone: { since: T0, reason: STOPPING_REASON }, claimExpires: T0 + 3_600_000 }), "p1", T0 + 60_000), { waitUntil: T0 + 3_600_000 });

  const rec = claimRecord({ record: stuck(), revision: 7 }, "node01.example.net", "p1", T0 + 60_000, 600)!.v.record;
  const { end, actions } = drive(rec, {});
  assert.equal(end.type, "done");
  assert.deepEqual(actions.filter((a) => a.type === "run").map((a) => a.type === "run" && a.stage), ["notify"], "only the notice was left");
  assert.equal(rec.gone, undefined);
  assert.ok(rec.log.some((l) => l.includes("not waiting for the node: it switched provisioning off, and its stop (it announced it is stopping (shutdown event)) was the restart that causes")), rec.log.join("\n"));
  assert.equal(rec.rounds, 1, "the same round, finished");
  // taken up because its wait ran out (the unanswered path): finished too, not failed as gone
  const late = stuck();
  const run = newRun(late, policy);
  assert.deepEqual(decide(run, { type: "still-gone" }, policy, T0 + 3_700_000), { type: "run", stage: "notify", first: true });
});
