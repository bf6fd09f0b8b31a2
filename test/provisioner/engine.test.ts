import { test } from "node:test";
import assert from "node:assert/strict";
import { DeployLock, lockNeedsRenewal, type AskNode } from "../../src/provisioner/deploy-lock.js";
import { askAgain, decide, isTerminal, lookAgainForMasters, newRun, onNodeStarted, pastDisable, requeueRestarted, type EngineAction, type EngineEvent, type EnginePolicy } from "../../src/provisioner/engine.js";
import { Stages, type Stage } from "../../src/protocol/provision-record.js";
import { CERT_STAGES, SLOW_STAGES } from "../../src/provisioner/stages.js";
import { newRecord, type NodeRecord } from "../../src/protocol/provision-record.js";
import { claimable, claimRecord } from "../../src/provisioner/claim.js";
import { type Versioned } from "../../src/provisioner/state.js";

// The engine without a broker: the record and an event go in, the next action comes out. Each
// scenario is a table over the stages; `drive` plays the edge, answering every action through a
// script, and returns the transcript of actions.

const ALL: Stage[] = [...Stages];
const policy: EnginePolicy = { stages: ALL, attempts: 3, backoffS: 2, maxBackoffS: 60, puppetTimeoutS: 900, lockLeaseS: 600 };
const T0 = 1_700_000_000_000;
const half = () => 0.5; // no jitter

/** What the edge answers to a `run`: ok, or a failure of some kind. */
type StepAnswer = "ok" | "lost" | "busy" | "restart" | "error";

interface Script {
  /** Answer to the n-th try (0-based) of `stage`. */
  step?(stage: Stage, n: number): StepAnswer;
  hasCert?: boolean;
  lockExpires?: number;
  /** A persist number (0-based) answered "someone else wrote first". */
  lostAtPersist?: number;
  stopAtRun?: number;
  /** The failure notice could not be sent. */
  notifyError?: string;
}

/** A fake provision agent for the deploy lock: answers every action with `f`'s data. */
const fakeAsk = (f: (action: string, input: Record<string, unknown>) => Record<string, unknown> | Promise<Record<string, unknown>>): AskNode => (async (_id: string, action: string, input: Record<string, unknown>) => f(action, input)) as unknown as AskNode;

function drive(rec: NodeRecord, script: Script = {}, p: EnginePolicy = policy): { actions: EngineAction[]; end: EngineAction; rec: NodeRecord } {
  const run = newRun(rec, p);
  const tries = new Map<Stage, number>();
  const actions: EngineAction[] = [];
  let now = T0;
  let persists = 0;
  let runs = 0;
  let a = decide(run, { type: "begin" }, p, now, half);
  for (let guard = 0; guard < 10_000; guard++) {
    actions.push(a);
    if (isTerminal(a)) return { actions, end: a, rec };
    let ev: EngineEvent;
    switch (a.type) {
      case "probe-cert":
        ev = { type: "cert-probed", hasCert: script.hasCert ?? false };
        break;
      case "renew-lock":
        ev = { type: "lock-renewed", expires: now + a.leaseS * 1000 };
        break;
      case "persist":
        ev = persists++ === script.lostAtPersist ? { type: "lost" } : { type: "persisted" };
        break;
      case "wait":
        now += a.ms;
        ev = { type: "waited" };
        break;
      case "release-lock":
        ev = { type: "lock-released" };
        break;
      case "notify":
        ev = { type: "notified", error: script.notifyError };
        break;
      case "run": {
        if (runs++ === script.stopAtRun) {
          ev = { type: "stopping" };
          break;
        }
        const n = tries.get(a.stage) ?? 0;
        tries.set(a.stage, n + 1);
        const answer = script.step?.(a.stage, n) ?? "ok";
        now += 100;
        if (answer === "ok") ev = { type: "step-ok", ms: 100 };
        else if (answer === "lost") ev = { type: "step-failed", error: `provision#x: no reply from ${rec.identity} within 60s`, busy: false, nodeRestarted: false };
        else if (answer === "busy") ev = { type: "step-failed", error: "a Puppet run is in progress", busy: true, nodeRestarted: false };
        else if (answer === "restart") ev = { type: "step-failed", error: "aborted", busy: false, nodeRestarted: true };
        else ev = { type: "step-failed", error: "boom", busy: false, nodeRestarted: false };
        break;
      }
      default:
        throw new Error(`unexpected ${a.type}`);
    }
    a = decide(run, ev, p, now, half);
  }
  throw new Error("the engine did not finish");
}

const ran = (actions: EngineAction[]) => actions.filter((a): a is Extract<EngineAction, { type: "run" }> => a.type === "run").map((a) => a.stage);
const firstRuns = (actions: EngineAction[]) => actions.filter((a): a is Extract<EngineAction, { type: "run" }> => a.type === "run" && a.first).map((a) => a.stage);
const inProgress = (over: Partial<NodeRecord> = {}): NodeRecord => ({ ...newRecord("n1", T0), status: "in_progress", owner: "p1", rounds: 1, claimExpires: T0 + 600_000, master: "m1", masterAddress: "127.3.0.1", ...over });

test("engine: a fresh node runs every enabled step once, in order, and is done", () => {
  const { actions, end, rec } = drive(inProgress());
  assert.equal(end.type, "done");
  assert.deepEqual(firstRuns(actions), ALL);
  assert.deepEqual(ran(actions), ALL);
  assert.equal(rec.status, "done");
  assert.equal(rec.stage, "notify");
  assert.equal(rec.current, undefined);
  // slow steps are recorded before they start, with a lease outlasting a Puppet run
  for (const s of SLOW_STAGES) {
    const i = actions.findIndex((a) => a.type === "run" && a.stage === s);
    assert.deepEqual(actions[i - 1], { type: "persist", leaseS: 1500 }, s);
  }
});

test("engine: switched-off steps never run", () => {
  const p = { ...policy, stages: ALL.filter((s) => s !== "clean_cert" && s !== "daemonize") };
  assert.deepEqual(ran(drive(inProgress(), {}, p).actions), p.stages);
});

test("engine: a node with a certificate skips the certificate steps (asked once)", () => {
  const { actions } = drive(inProgress(), { hasCert: true });
  assert.deepEqual(ran(actions), ALL.filter((s) => !CERT_STAGES.has(s)));
  assert.equal(actions.filter((a) => a.type === "probe-cert").length, 1);
});

// ---- a crash and restart at every stage ----

for (const done of [undefined, ...ALL]) {
  test(`crash after ${done ?? "the claim"}: the restarted provisioner resumes its record and runs only what is left`, () => {
    const crashed = inProgress({ stage: done, current: done ? undefined : "lock", claimExpires: T0 - 1 });
    // its own record: claimable at once, same round, no takeover
    const c = claimRecord({ record: structuredClone(crashed), revision: 7 }, "n1", "p1", T0, 600);
    assert.ok(c);
    assert.equal(c.takenOverFrom, undefined);
    assert.equal(c.v.record.rounds, 1, "a resume is not a new round");
    const { actions, end } = drive(c.v.record, { hasCert: false });
    assert.equal(end.type, "done");
    const left = done ? ALL.slice(ALL.indexOf(done) + 1) : ALL;
    assert.deepEqual(ran(actions), left);
  });
}

for (const done of ALL) {
  test(`crash after ${done}, taken over by another provisioner once the claim expired: the lock is broken and retaken before unlock only`, async () => {
    const orphan = inProgress({ stage: done, owner: "dead", claimExpires: T0 - 1 });
    assert.equal(claimable(orphan, "p2", T0), true);
    assert.equal(claimable({ ...orphan, claimExpires: T0 + 1 }, "p2", T0), false, "a live claim is not taken");
    const c = claimRecord({ record: orphan, revision: 3 }, "n1", "p2", T0, 600)!;
    assert.equal(c.takenOverFrom, "dead");
    const calls: string[] = [];
    const lock = new DeployLock({ enabled: true, owner: "p2", lockLeaseS: 600, puppetTimeoutS: 900 }, fakeAsk((action, data) => {
      calls.push(`${action}${data.force ? " force" : ""}`);
      return { expires: T0 + 1_500_000 };
    }));
    const disabled = pastDisable(c.v.record);
    assert.equal(disabled, ALL.indexOf(done) >= ALL.indexOf("disable"));
    if (lock.takeoverNeeded(c.v.record, disabled)) await lock.takeover(c.v.record);
    const beforeUnlock = ALL.indexOf(done) < ALL.indexOf("unlock");
    assert.deepEqual(calls, disabled ? [] : beforeUnlock ? ["unlock_deploy force", "lock_deploy"] : ["unlock_deploy force"]);
    assert.deepEqual(ran(drive(c.v.record).actions), ALL.slice(ALL.indexOf(done) + 1));
  });
}

// ---- a lost reply at every step ----

for (const stage of ALL) {
  test(`a lost reply at ${stage}: retried after backoff, then the run goes on`, () => {
    const { actions, end, rec } = drive(inProgress(), { step: (s, n) => (s === stage && n === 0 ? "lost" : "ok") });
    assert.equal(end.type, "done");
    assert.deepEqual(ran(actions).filter((s) => s === stage).length, 2);
    const waits = actions.filter((a) => a.type === "wait");
    assert.deepEqual(waits, [{ type: "wait", ms: 2000, retry: { stage, attempt: 1, error: `provision#x: no reply from n1 within 60s` } }]);
    assert.equal(rec.attempts, 0, "the success resets the count");
    assert.equal(rec.lastError, undefined);
  });

  test(`replies lost at ${stage} every time: ${policy.attempts} attempts with growing backoff, then fail`, () => {
    const { actions, end, rec } = drive(inProgress(), { step: (s) => (s === stage ? "lost" : "ok") });
    assert.equal(end.type, "fail");
    assert.equal(ran(actions).filter((s) => s === stage).length, policy.attempts);
    assert.deepEqual(actions.filter((a) => a.type === "wait").map((a) => (a as { ms: number }).ms), [2000, 4000]);
    assert.equal(rec.attempts, policy.attempts);
    assert.equal(rec.current, stage);
    assert.match(rec.lastError!, new RegExp(`^${stage}: .*no reply`));
    // every failed attempt is recorded before the backoff (a crash meanwhile resumes this step)
    const failedAt = actions.map((a, i) => (a.type === "persist" && actions[i + 1]?.type !== "run" ? i : -1)).filter((i) => i >= 0);
    assert.ok(failedAt.length >= policy.attempts);
  });
}

// ---- Puppet busy ----

for (const stage of ["bootstrap", "production"] as const) {
  test(`Puppet busy at ${stage}: waits without spending attempts, up to one Puppet run's time`, () => {
    const { actions, end, rec } = drive(inProgress(), { step: (s, n) => (s === stage && n < 5 ? "busy" : "ok") });
    assert.equal(end.type, "done");
    const waits = actions.filter((a) => a.type === "wait");
    assert.equal(waits.length, 5);
    assert.ok(waits.every((w) => w.type === "wait" && w.retry === undefined && w.ms >= 2000));
    assert.ok(rec.log.some((l) => l.includes(`${stage}: a Puppet run is already in progress on the node; waiting 2s`)));
  });

  test(`Puppet busy at ${stage} for longer than puppet_timeout: then busy counts as a failure`, () => {
    const p = { ...policy, puppetTimeoutS: 5 };
    const { actions, end } = drive(inProgress(), { step: (s) => (s === stage ? "busy" : "ok") }, p);
    assert.equal(end.type, "fail");
    const waits = actions.filter((a) => a.type === "wait");
    assert.equal(waits.filter((w) => w.type === "wait" && !w.retry).length, 3, "2 s each until 5 s are spent");
    assert.equal(waits.filter((w) => w.type === "wait" && w.retry).length, p.attempts - 1);
  });
}

// ---- a lease expiring mid-run ----

test("a node lock that would expire during a Puppet run is renewed before the slow step; a fresh one is not", () => {
  const stale = inProgress({ stage: "sign_csr", lockExpires: T0 + 60_000 });
  assert.equal(lockNeedsRenewal(stale, true, 900, T0), true);
  const { actions } = drive(stale);
  const i = actions.findIndex((a) => a.type === "renew-lock");
  assert.deepEqual(actions[i], { type: "renew-lock", leaseS: 1500 });
  assert.deepEqual(actions[i + 1], { type: "persist", leaseS: 1500 });
  assert.deepEqual(actions[i + 2], { type: "run", stage: "bootstrap", first: true });
  // renewed once: its new lease outlasts the next Puppet runs too
  assert.equal(actions.filter((a) => a.type === "renew-lock").length, 1);

  const fresh = inProgress({ stage: "sign_csr", lockExpires: T0 + 1_500_000 });
  assert.equal(drive(fresh).actions.filter((a) => a.type === "renew-lock").length, 0);
  // no lock step, or no lock taken yet: nothing to renew
  assert.equal(lockNeedsRenewal(stale, false, 900, T0), false);
  assert.equal(lockNeedsRenewal(inProgress(), true, 900, T0), false);
});

test("a claim expiring mid-run lets another provisioner in; the first one's next write loses and it leaves the node untouched", () => {
  const rec = inProgress({ claimExpires: T0 + 1000 });
  assert.equal(claimable(rec, "p2", T0 + 1001), true);
  for (let k = 0; k < 12; k++) {
    const { end, actions } = drive(inProgress(), { lostAtPersist: k });
    assert.equal(end.type, "leave", `lost at persist ${k}`);
    assert.ok(!actions.some((a) => a.type === "fail" || a.type === "abandon" || a.type === "release-lock" || a.type === "notify"), "no unlock, no failure notice: the node is someone else's");
  }
});

// ---- two provisioners racing ----

/** Compare-and-set on a revision, as JetStream KV does it. */
function cas(store: { v?: Versioned }, v: Versioned): boolean {
  const current = store.v?.revision ?? 0;
  if (v.revision !== current) return false;
  store.v = { record: structuredClone(v.record), revision: current + 1 };
  v.revision = current + 1;
  return true;
}

for (const existing of [undefined, { ...newRecord("n1", T0), status: "pending" as const }, inProgress({ owner: "dead", claimExpires: T0 - 1, stage: "bootstrap" as const })]) {
  test(`two provisioners claim ${existing ? `a ${existing.status} record${existing.owner ? " with an expired claim" : ""}` : "a new node"} at once: exactly one wins`, () => {
    const kv: { v?: Versioned } = existing ? { v: { record: existing, revision: 1 } } : {};
    const read = () => (kv.v ? { record: structuredClone(kv.v.record), revision: kv.v.revision } : undefined);
    const a = claimRecord(read(), "n1", "p1", T0, 600)!;
    const b = claimRecord(read(), "n1", "p2", T0, 600)!;
    assert.ok(a && b, "both may claim what they read");
    assert.equal(cas(kv, a.v), true);
    assert.equal(cas(kv, b.v), false, "the second write loses");
    assert.equal(kv.v!.record.owner, "p1");
    assert.equal(claimRecord(read(), "n1", "p2", T0, 600), undefined, "and p2, reading again, keeps off");
  });
}

// ---- a node restarting mid-step ----

for (const stage of ALL) {
  test(`the node restarts during ${stage}: the step is asked again at once, not counted as an attempt`, () => {
    const { actions, end, rec } = drive(inProgress(), { step: (s, n) => (s === stage && n < 2 ? "restart" : "ok") });
    assert.equal(end.type, "done");
    assert.equal(ran(actions).filter((s) => s === stage).length, 3);
    assert.equal(actions.filter((a) => a.type === "wait").length, 0, "no backoff");
    assert.equal(firstRuns(actions).filter((s) => s === stage).length, 1, "announced once");
    assert.ok(rec.log.some((l) => l.includes(`${stage}: the node restarted; asking again`)));
  });
}

test("a node that keeps restarting: repeats are bounded (2 x attempts), then they count", () => {
  const { actions, end } = drive(inProgress(), { step: (s) => (s === "production" ? "restart" : "ok") });
  assert.equal(end.type, "fail");
  assert.equal(ran(actions).filter((s) => s === "production").length, policy.attempts * 2 + policy.attempts);
});

// ---- stopping ----

for (let k = 0; k < ALL.length; k++) {
  test(`the provisioner stops before step ${ALL[k]}: abandon (record left in progress for a restart)`, () => {
    const { end, rec } = drive(inProgress(), { stopAtRun: k });
    assert.equal(end.type, "abandon");
    assert.equal(rec.status, "in_progress");
    assert.equal(rec.current, ALL[k]);
  });
}

test("the deploy lock: released only while the node holds ours, and never when the lock step is off", async () => {
  const calls: string[] = [];
  const ask = fakeAsk((action) => {
    calls.push(action);
    return {};
  });
  const on = new DeployLock({ enabled: true, owner: "p1", lockLeaseS: 600, puppetTimeoutS: 900 }, ask);
  const off = new DeployLock({ enabled: false, owner: "p1", lockLeaseS: 600, puppetTimeoutS: 900 }, ask);
  for (const stage of [undefined, ...ALL]) {
    const rec = inProgress({ stage });
    assert.equal(on.holds(rec), stage === undefined || ALL.indexOf(stage) < ALL.indexOf("unlock"), String(stage));
    assert.equal(off.holds(rec), false);
  }
  await on.release(inProgress({ stage: "production" }), () => assert.fail());
  await on.release(inProgress({ stage: "disable" }), () => assert.fail());
  await off.release(inProgress({ stage: "production" }), () => assert.fail());
  assert.deepEqual(calls, ["unlock_deploy"]);
  // a release the node does not answer is reported, not thrown: the lock expires with its lease
  const silent = new DeployLock({ enabled: true, owner: "p1", lockLeaseS: 600, puppetTimeoutS: 900 }, fakeAsk(() => {
    throw new Error("no reply");
  }));
  let reported = "";
  await silent.release(inProgress(), (e) => (reported = e.message));
  assert.equal(reported, "no reply");
});

test("engine: every stage's start (its first try) and end are recorded for timelines, across retries", () => {
  const { end, rec } = drive(inProgress(), { step: (s, n) => (s === "bootstrap" && n < 2 ? "error" : "ok") });
  assert.equal(end.type, "done");
  const times = rec.stageTimes!;
  assert.deepEqual(Object.keys(times), ALL);
  let prevEnd = T0;
  for (const s of ALL) {
    const t = times[s]!;
    assert.ok(t.end !== undefined && t.start >= prevEnd && t.end > t.start, `${s}: ${JSON.stringify(t)}`);
    prevEnd = t.end;
  }
  // two failed tries and their backoffs lie inside the bootstrap stage, not only the last try's 100 ms
  assert.ok(times.bootstrap!.end! - times.bootstrap!.start > 2000, JSON.stringify(times.bootstrap));
  assert.equal(rec.timings.bootstrap, 100);
});

test("claimRecord: a new round starts with empty stage times", () => {
  const old: NodeRecord = { ...newRecord("n1", T0), status: "pending", rounds: 1, stageTimes: { lock: { start: T0, end: T0 + 5 } } };
  const c = claimRecord({ record: old, revision: 3 }, "n1", "p1", T0 + 1000, 600)!;
  assert.deepEqual(c.v.record.stageTimes, {});
});

// ---- how a run ends: the failure policy ----

const types = (actions: EngineAction[]) => actions.map((a) => a.type);

test("a step failing for good: the lock released, then the admins told, then the record failed, in that order", () => {
  const p = { ...policy, notifyFailures: true };
  const { actions, end, rec } = drive(inProgress(), { step: (s) => (s === "bootstrap" ? "error" : "ok") }, p);
  assert.equal(end.type, "fail");
  assert.deepEqual(types(actions).slice(-4), ["release-lock", "notify", "persist", "fail"]);
  const notice = actions.find((a) => a.type === "notify") as Extract<EngineAction, { type: "notify" }>;
  assert.equal(notice.subject, "Provisioning n1 FAILED");
  assert.equal(notice.key, "n1#1#failed", "one notice per round, however often asked");
  assert.match(notice.message, /Step: bootstrap\nError: bootstrap: boom/);
  assert.equal(rec.status, "failed");
  assert.equal(rec.claimExpires, undefined);
  assert.ok(rec.finishedAt);
  assert.match(rec.log.at(-1)!, /failed: boom$/);
});

test("the notify step off: a failure releases the lock and is recorded, no notice; a notice that cannot be sent is logged on the record", () => {
  const off = drive(inProgress(), { step: (s) => (s === "production" ? "error" : "ok") });
  assert.deepEqual(types(off.actions).slice(-3), ["release-lock", "persist", "fail"]);
  assert.ok(!off.actions.some((a) => a.type === "notify"));
  const unsent = drive(inProgress(), { step: (s) => (s === "production" ? "error" : "ok"), notifyError: "no notifier found" }, { ...policy, notifyFailures: true });
  assert.equal(unsent.end.type, "fail", "the failure is recorded all the same");
  assert.ok(unsent.rec.log.some((l) => l.endsWith("could not notify the admins: no notifier found")));
});

test("preparation failing (no address fact, no master): the same ending, the error on the record", () => {
  const rec = inProgress();
  const run = newRun(rec, policy);
  assert.deepEqual(decide(run, { type: "prepare-failed", error: "no Puppet master found" }, policy, T0), { type: "release-lock" });
  assert.deepEqual(decide(run, { type: "lock-released" }, policy, T0), { type: "persist", leaseS: 0 });
  assert.equal(rec.status, "failed");
  assert.equal(rec.lastError, "no Puppet master found");
  assert.deepEqual(decide(run, { type: "persisted" }, policy, T0), { type: "fail", error: "no Puppet master found" });
  assert.throws(() => decide(run, { type: "begin" }, policy, T0), /after the run of n1 ended/);
});

test("an ending is best effort: a lost write or a stop meanwhile does not skip the unlock, the notice or the record", () => {
  const p = { ...policy, notifyFailures: true };
  const run = newRun(inProgress(), p);
  decide(run, { type: "prepare-failed", error: "boom" }, p, T0);
  assert.equal(decide(run, { type: "stopping" }, p, T0).type, "notify");
  assert.equal(decide(run, { type: "notified" }, p, T0).type, "persist");
  assert.equal(decide(run, { type: "lost" }, p, T0).type, "fail");
});

test("stopping: the record left in progress with its claim given up (lease 0), then the lock released", () => {
  const { actions, rec } = drive(inProgress(), { stopAtRun: 3 });
  assert.deepEqual(actions.slice(-3), [{ type: "persist", leaseS: 0 }, { type: "release-lock" }, { type: "abandon", reason: "provisioner stopping" }]);
  assert.equal(rec.status, "in_progress");
  assert.match(rec.log.at(-1)!, /abandoned at request_csr: provisioner stopping$/);
});

test("done: recorded once more, naming the master and the time, before the run ends; a lost last write leaves the node", () => {
  const { actions, rec } = drive(inProgress({ startedAt: T0 }));
  assert.deepEqual(actions.slice(-2), [{ type: "persist", leaseS: 600 }, { type: "done" }]);
  assert.match(rec.log.at(-1)!, /provisioned against m1 in \d+\.\ds$/);
  const persists = actions.filter((a) => a.type === "persist").length;
  assert.equal(drive(inProgress(), { lostAtPersist: persists - 1 }).end.type, "leave");
});

// ---- decisions outside one run ----

test("a node's startup event: repeat the step in flight, re-queue a failed node, leave a done one, else provision", () => {
  assert.equal(onNodeStarted(inProgress(), true), "repeat-step");
  assert.equal(onNodeStarted({ ...inProgress(), status: "failed" }, false), "requeue");
  assert.equal(onNodeStarted({ ...inProgress(), status: "done" }, false), "ignore");
  assert.equal(onNodeStarted(inProgress(), false), "provision");
  assert.equal(onNodeStarted(undefined, false), "provision");
  const failed: NodeRecord = { ...inProgress({ stage: "sign_csr", attempts: 3 }), status: "failed" };
  requeueRestarted(failed, T0);
  assert.deepEqual([failed.status, failed.attempts, failed.stage], ["pending", 0, undefined]);
  assert.match(failed.log.at(-1)!, /node restarted; provisioning will be retried$/);
});

test("questions are asked again only while their reply is lost, up to retries.attempts in all", () => {
  assert.equal(askAgain(1, "provision#has_cert: no reply from n1 within 60s", policy), true);
  assert.equal(askAgain(3, "provision#has_cert: no reply from n1 within 60s", policy), false);
  assert.equal(askAgain(1, "provision#has_cert on n1: refused", policy), false, "an answer, even a refusal, is not asked again");
});

test("no master found: looked for again with backoff, then given up", () => {
  assert.equal(lookAgainForMasters(1, policy, half), 2000);
  assert.equal(lookAgainForMasters(2, policy, half), 4000);
  assert.equal(lookAgainForMasters(3, policy, half), undefined);
});
