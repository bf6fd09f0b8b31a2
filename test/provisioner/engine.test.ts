import { test } from "node:test";
import assert from "node:assert/strict";
import { DeployLock, lockNeedsRenewal, type AskNode } from "../../src/provisioner/deploy-lock.js";
import { decide, isTerminal, newRun, type EngineAction, type EngineEvent, type EnginePolicy } from "../../src/provisioner/engine.js";
import { MASTER_WAIT_S, masterWaitReason } from "../../src/provisioner/waits.js";
import { askAgain, goneAfter, masterAwayAfter, onNodeStarted, recheckMs, requeueRestarted, whileGone, whileMasterAway } from "../../src/provisioner/liveness.js";
import { Stages, type Stage } from "../../src/protocol/provision-record.js";
import { CERT_STAGES, MASTER_STAGES, NOTIFY_ATTEMPTS, pastDisable, SLOW_STAGES } from "../../src/provisioner/stages.js";
import { newRecord, noticeKey, type NodeRecord } from "../../src/protocol/provision-record.js";
import { claimable, claimNeedsRenewal, claimRecord, resumeVerdict, writeWindowMs } from "../../src/provisioner/claim.js";
import { type Versioned } from "../../src/provisioner/state.js";

// The engine without a broker: the record and an event go in, the next action comes out. Each
// scenario is a table over the stages; `drive` plays the edge, answering every action through a
// script, and returns the transcript of actions.

const ALL: Stage[] = [...Stages];
const policy: EnginePolicy = { stages: ALL, attempts: 3, backoffS: 2, maxBackoffS: 60, puppetTimeoutS: 900, lockLeaseS: 600 };
const T0 = 1_700_000_000_000;
const half = () => 0.5; // no jitter

/** What the edge answers to a `run`: ok, or a failure of some kind. */
type StepAnswer = "ok" | "lost" | "busy" | "restart" | "error" | "gone" | "master-away" | "both-away";

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
  /** The clock at the start (default T0). */
  start?: number;
}

/** A fake provision agent for the deploy lock: answers every action with `f`'s data. */
const fakeAsk = (f: (action: string, input: Record<string, unknown>) => Record<string, unknown> | Promise<Record<string, unknown>>): AskNode => (async (_id: string, action: string, input: Record<string, unknown>) => f(action, input)) as unknown as AskNode;

function drive(rec: NodeRecord, script: Script = {}, p: EnginePolicy = policy): { actions: EngineAction[]; end: EngineAction; rec: NodeRecord } {
  const run = newRun(rec, p);
  const tries = new Map<Stage, number>();
  const actions: EngineAction[] = [];
  let now = script.start ?? T0;
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
        else if (answer === "gone") ev = { type: "step-failed", error: "aborted", busy: false, nodeRestarted: false, gone: "no answer for 15s (3 liveness checks)" };
        else if (answer === "master-away") ev = { type: "step-failed", error: "Connection refused - connect(2) for 127.3.0.1:8140", busy: false, nodeRestarted: false, masterAway: true };
        else if (answer === "both-away") ev = { type: "step-failed", error: "aborted", busy: false, nodeRestarted: false, gone: "no answer for 15s (3 liveness checks)", masterAway: true };
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

  // the notice of a provisioned node: after its attempts the node is still done (its notice lost is said), not failed
  test(`replies lost at ${stage} every time: ${stage === "notify" ? `${NOTIFY_ATTEMPTS} attempts (a notice lost is never sent), then done, the notice said lost` : `${policy.attempts} attempts with growing backoff, then fail`}`, () => {
    const { actions, end, rec } = drive(inProgress(), { step: (s) => (s === stage ? "lost" : "ok") });
    if (stage === "notify") {
      assert.equal(end.type, "done");
      assert.equal(rec.status, "done");
      assert.equal(ran(actions).filter((s) => s === stage).length, NOTIFY_ATTEMPTS);
      assert.ok(rec.log.some((l) => /provisioned, but the admins could not be told: .*no reply/.test(l)), rec.log.join("\n"));
      assert.ok(!actions.some((a) => a.type === "notify" || a.type === "release-lock"), "no failure notice, nothing released twice");
      return;
    }
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
  assert.match(notice.key, /^n1#1#failed(#\d+)?$/, "one notice per round (its start in the key when the record has one), however often asked");
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

test("a record the bucket did not take while the claim held: left for a resume from the last one written, not to someone else", () => {
  const run = newRun(inProgress(), policy);
  decide(run, { type: "begin" }, policy, T0);
  const unwritten = decide(run, { type: "lost", error: "TimeoutError: timeout" }, policy, T0);
  assert.equal(unwritten.type, "leave");
  assert.equal(unwritten.type === "leave" && unwritten.unwritten, true);
  assert.match(unwritten.type === "leave" ? unwritten.reason : "", /n1 could not be written \(TimeoutError: timeout\); it is resumed from the last one written/);
  const run2 = newRun(inProgress(), policy);
  decide(run2, { type: "begin" }, policy, T0);
  const lost = decide(run2, { type: "lost" }, policy, T0);
  assert.deepEqual(lost, { type: "leave", reason: "state of n1 was changed by someone else; leaving the node to them" }, "a write that lost to another's is no resume");
});

test("a record write is tried while the claim last written holds (less a margin), at least 20 s; stopping, 20 s", () => {
  const now = 1_000_000;
  assert.equal(writeWindowMs(now + 600_000, now, false), 570_000, "a lock_lease claim: until 30 s before it runs out");
  assert.equal(writeWindowMs(now + 40_000, now, false), 20_000, "never under 20 s");
  assert.equal(writeWindowMs(0, now, false), 20_000, "no claim yet (a new record)");
  assert.equal(writeWindowMs(now + 2_400_000, now, true), 20_000, "a stop is not held up by an outage");
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


// ---- machines that die: a node gone mid-step ----

const gonePolicy = { ...policy, goneTimeoutS: 600 };

for (const stage of ["request_csr", "bootstrap", "production", "disable"] as const) {
  test(`the node goes away during ${stage}: recorded gone, parked with the claim until the wait ends, no attempt spent`, () => {
    const { actions, end, rec } = drive(inProgress(), { step: (s) => (s === stage ? "gone" : "ok") }, gonePolicy);
    assert.equal(end.type, "park");
    const persist = actions.at(-2) as Extract<EngineAction, { type: "persist" }>;
    assert.equal(persist.type, "persist");
    assert.equal(persist.leaseS, 600, "the claim lasts as long as the wait: no other provisioner takes it meanwhile");
    assert.equal((end as { until: number }).until, rec.gone!.since + 600_000);
    assert.equal(rec.status, "in_progress");
    assert.equal(rec.current, stage, "the board shows where it stopped");
    assert.equal(rec.attempts, 0);
    assert.equal(rec.gone!.reason, "no answer for 15s (3 liveness checks)");
    assert.ok(!actions.some((a) => a.type === "release-lock" || a.type === "wait"), "nothing asked of a node that is not there");
    assert.ok(rec.log.some((l) => l.includes(`${stage}: the node is gone (no answer for 15s`)));

    // it comes back: its run begins again (it answered), gone is cleared, the step is repeated
    const first = structuredClone(rec);
    decide(newRun(first, gonePolicy), { type: "begin" }, gonePolicy, T0 + 60_000);
    assert.match(first.log.at(-1)!, new RegExp(`the node is back after \\d+s \\(it was gone: no answer for 15s .*\\); repeating ${stage}$`));
    const back = drive(rec, {}, gonePolicy);
    assert.equal(back.end.type, "done");
    assert.equal(back.rec.gone, undefined);
    assert.equal(ran(back.actions)[0], stage, `${stage} is asked again`);
  });
}

test("unreachable before its step (a resume, a parked node checked again): parked while within its wait, failed after it without asking it more", () => {
  const rec = inProgress({ stage: "request_csr", current: "sign_csr" });
  let run = newRun(rec, gonePolicy);
  assert.deepEqual(decide(run, { type: "prepare-failed", error: "rpcutil#inventory: no reply from n1 within 10s" }, gonePolicy, T0), { type: "persist", leaseS: 600 });
  assert.deepEqual(rec.gone, { since: T0, reason: "no answer before its next step" });
  assert.deepEqual(decide(run, { type: "persisted" }, gonePolicy, T0), { type: "park", until: T0 + 600_000, awaiting: "node" });

  run = newRun(rec, gonePolicy);
  const later = T0 + 300_000;
  assert.deepEqual(decide(run, { type: "prepare-failed", error: "rpcutil#inventory: no reply from n1 within 10s" }, gonePolicy, later), { type: "persist", leaseS: 300 }, "still within the wait: parked again, the same end");
  assert.equal(rec.gone!.since, T0, "since the first time it was seen gone");

  run = newRun(rec, { ...gonePolicy, notifyFailures: true });
  const end = T0 + 600_000;
  const a = decide(run, { type: "prepare-failed", error: "rpcutil#inventory: no reply from n1 within 10s" }, { ...gonePolicy, notifyFailures: true }, end);
  assert.equal(a.type, "notify", "no lock release: the node is not there to release it");
  assert.match((a as { message: string }).message, /gone for 600s and not back \(no answer before its next step\)/);
  assert.equal(decide(run, { type: "notified" }, gonePolicy, end).type, "persist");
  assert.equal(rec.status, "failed");
  assert.match(rec.lastError!, /^gone for 600s and not back/);
  assert.equal(decide(run, { type: "persisted" }, gonePolicy, end).type, "fail");
});

test("a failure that is an answer (a refusal, a bad fact) fails as before, gone or not", () => {
  const run = newRun(inProgress(), policy);
  assert.equal(decide(run, { type: "prepare-failed", error: "node has no 'ipaddress' fact (target.ipaddress_fact)" }, policy, T0).type, "release-lock");
});

test("losing the write that parks the node: someone else owns it, leave it", () => {
  const { end } = drive(inProgress(), { step: (s) => (s === "bootstrap" ? "gone" : "ok"), lostAtPersist: 5 }, gonePolicy);
  assert.equal(end.type, "leave");
});

test("liveness rules: gone after the configured unanswered checks in a row, never with checks off; parked nodes checked again until the wait ends", () => {
  const p = { checkS: 5, checks: 3 };
  assert.equal(goneAfter(2, p), undefined);
  assert.equal(goneAfter(3, p), "no answer for 15s (3 liveness checks)");
  assert.equal(goneAfter(99, { checkS: 0, checks: 3 }), undefined);
  assert.equal(whileGone(true, T0, T0 + 1), "back");
  assert.equal(whileGone(false, T0, T0 + 1), "keep-waiting");
  assert.equal(whileGone(false, T0 + 1, T0 + 1), "give-up");
  assert.equal(recheckMs(p), 15_000);
  assert.equal(recheckMs({ checkS: 60, checks: 5 }), 60_000, "at most a minute between checks");
  assert.equal(recheckMs({ checkS: 0, checks: 3 }), 15_000);
});

test("resume scans: a parked node's claim holds until its wait ends (ours: waited for; others': left alone); then anyone takes it up", () => {
  const parked = inProgress({ gone: { since: T0, reason: "x" }, claimExpires: T0 + 600_000 });
  assert.deepEqual(resumeVerdict(parked, "p1", T0 + 1), { waitUntil: T0 + 600_000 });
  assert.equal(resumeVerdict(parked, "p2", T0 + 1), undefined);
  assert.equal(resumeVerdict(parked, "p2", T0 + 600_001), "resume");
  assert.equal(resumeVerdict(inProgress({ claimExpires: T0 + 1 }), "p1", T0), "resume", "our own unfinished work");
  assert.equal(resumeVerdict(inProgress({ claimExpires: T0 + 1 }), "p2", T0), undefined);
  assert.equal(resumeVerdict({ ...inProgress(), status: "done" }, "p1", T0), undefined);
  assert.equal(claimable(parked, "p2", T0 + 1), false, "a startup event seen by another provisioner does not take it either");
  assert.equal(claimable(parked, "p1", T0 + 1), true);
});

test("a parked node whose check went unanswered: its run asks it nothing and parks it again, or fails it once its wait ended", () => {
  const rec = inProgress({ stage: "sign_csr", current: "bootstrap", gone: { since: T0, reason: "no answer for 15s (3 liveness checks)" } });
  const within = newRun(rec, gonePolicy);
  assert.deepEqual(decide(within, { type: "still-gone" }, gonePolicy, T0 + 1000), { type: "persist", leaseS: 599 });
  const past = newRun(rec, gonePolicy);
  assert.equal(decide(past, { type: "still-gone" }, gonePolicy, T0 + 600_000).type, "persist", "no unlock, no notice with the notify step off: recorded failed");
  assert.equal(rec.status, "failed");
  assert.equal(rec.lastError, "gone for 600s and not back (no answer for 15s (3 liveness checks))");
});

// ---- masters that do not answer: the node waits for its master, no attempt spent, no slot held ----

const masterPolicy: EnginePolicy = { ...policy, masterWaitS: 600 };

test("no master answers before the first step: the node waits with the reason (not failed), no attempt, a normal claim; a master answers: it goes on", () => {
  const rec = inProgress({ master: undefined, masterAddress: undefined });
  const run = newRun(rec, masterPolicy);
  const a = decide(run, { type: "master-away", looking: "agent puppetca" }, masterPolicy, T0);
  assert.deepEqual(a, { type: "persist", leaseS: 600 }, "a normal lease, renewed while it waits: a provisioner dying meanwhile leaves it to another");
  assert.deepEqual(rec.masterWait, { since: T0, reason: "waiting for a Puppet master: none answers (agent puppetca)" });
  assert.equal(rec.status, "in_progress");
  assert.equal(rec.attempts, 0);
  assert.equal(rec.lastError, undefined, "not a failure");
  assert.match(rec.log.at(-1)!, /waiting for a Puppet master: none answers \(agent puppetca\); waiting up to 600s, holding no slot$/);
  assert.deepEqual(decide(run, { type: "persisted" }, masterPolicy, T0), { type: "park", until: T0 + 600_000, awaiting: "master" });

  // a master answers: the driver chose it, the run begins
  rec.master = "m1";
  rec.masterAddress = "127.3.0.1";
  const back = drive(rec, { start: T0 + 30_000 }, masterPolicy);
  assert.equal(back.end.type, "done");
  assert.equal(back.rec.masterWait, undefined);
  assert.ok(back.rec.log.some((l) => /a Puppet master answers after \d+s of waiting \(m1\)$/.test(l)), back.rec.log.join("\n"));
  assert.deepEqual(firstRuns(back.actions), ALL);
});

for (const stage of [...MASTER_STAGES]) {
  test(`its master goes away during ${stage}: the node waits for that master at that step, no attempt spent, nothing released or retried; back: the step repeated`, () => {
    const { actions, end, rec } = drive(inProgress(), { step: (s, n) => (s === stage && n === 0 ? "master-away" : "ok") }, masterPolicy);
    assert.deepEqual(end, { type: "park", until: rec.masterWait!.since + 600_000, awaiting: "master", master: "m1" });
    assert.deepEqual(actions.at(-2), { type: "persist", leaseS: 600 });
    assert.equal(rec.status, "in_progress");
    assert.equal(rec.current, stage, "status shows where it waits");
    assert.equal(rec.attempts, 0);
    assert.equal(rec.masterWait!.master, "m1");
    assert.equal(rec.masterWait!.reason, "waiting for its master m1, which does not answer");
    assert.ok(!actions.some((a) => a.type === "release-lock" || a.type === "wait" || a.type === "notify"), "the master's failure costs the node nothing");
    assert.ok(rec.log.some((l) => l.includes(`${stage}: its master m1 does not answer (Connection refused`)), rec.log.join("\n"));

    const back = drive(rec, { start: T0 + 60_000 }, masterPolicy);
    assert.equal(back.end.type, "done");
    assert.equal(ran(back.actions)[0], stage, `${stage} is asked again`);
    assert.equal(back.rec.masterWait, undefined);
    assert.ok(back.rec.log.some((l) => new RegExp(`its master m1 answers after \\d+s of waiting; repeating ${stage}$`).test(l)), back.rec.log.join("\n"));
  });
}

test("a master step that fails while its master answers is the node's failure, as before: attempts, backoff, failed", () => {
  const { actions, end, rec } = drive(inProgress(), { step: (s) => (s === "bootstrap" ? "error" : "ok") }, masterPolicy);
  assert.equal(end.type, "fail");
  assert.equal(actions.filter((a) => a.type === "wait").length, 2);
  assert.equal(rec.masterWait, undefined);
  assert.equal(rec.lastError, "bootstrap: boom");
});

test("a node gone and its master away at once: the node's absence comes first", () => {
  const { end, rec } = drive(inProgress(), { step: (s) => (s === "bootstrap" ? "both-away" : "ok") }, masterPolicy);
  assert.equal((end as { awaiting: string }).awaiting, "node");
  assert.ok(rec.gone);
  assert.equal(rec.masterWait, undefined);
});

test("master_wait ends: failed like any failure, naming the master and how long it waited; lock released, admins told", () => {
  const p = { ...masterPolicy, notifyFailures: true };
  for (const [master, error] of [
    ["m1", "its master m1 did not answer for 600s (master_wait)"],
    [undefined, "no Puppet master answered for 600s (agent puppetca; master_wait)"],
  ] as const) {
    const rec = inProgress({ current: "bootstrap", masterWait: { since: T0, reason: masterWaitReason(master, "agent puppetca"), ...(master ? { master } : {}) } });
    const run = newRun(rec, p);
    assert.equal(decide(run, { type: "master-away", ...(master ? { master } : {}), looking: "agent puppetca" }, p, T0 + 600_000).type, "release-lock", "the node answers: its lock is released");
    const notice = decide(run, { type: "lock-released" }, p, T0 + 600_000) as Extract<EngineAction, { type: "notify" }>;
    assert.equal(notice.type, "notify");
    assert.ok(notice.message.includes(`Error: ${error}`), notice.message);
    assert.equal(decide(run, { type: "notified" }, p, T0 + 600_000).type, "persist");
    assert.equal(rec.status, "failed");
    assert.equal(rec.lastError, error);
    assert.equal(rec.masterWait, undefined, "a failed node waits for nothing");
    assert.equal(decide(run, { type: "persisted" }, p, T0 + 600_000).type, "fail");
  }
});

test("a wait keeps its start across re-parks; master_wait 0 waits for ever; the default is generous", () => {
  const rec = inProgress({ masterWait: { since: T0, reason: masterWaitReason("m1"), master: "m1" } });
  const run = newRun(rec, masterPolicy);
  assert.deepEqual(decide(run, { type: "master-away", master: "m1", looking: "agent puppetca" }, masterPolicy, T0 + 300_000), { type: "persist", leaseS: 600 });
  assert.equal(rec.masterWait!.since, T0, "since the first time");
  assert.deepEqual(decide(run, { type: "persisted" }, masterPolicy, T0 + 300_000), { type: "park", until: T0 + 600_000, awaiting: "master", master: "m1" });
  const forever = { ...policy, masterWaitS: 0 };
  const old = newRun(inProgress({ masterWait: { since: T0 - 10 * 365 * 86_400_000, reason: masterWaitReason("m1"), master: "m1" } }), forever);
  decide(old, { type: "master-away", master: "m1", looking: "agent puppetca" }, forever, T0);
  assert.deepEqual(decide(old, { type: "persisted" }, forever, T0), { type: "park", until: Number.POSITIVE_INFINITY, awaiting: "master", master: "m1" });
  assert.match(old.rec.log.at(-1)!, /waiting for it \(master_wait 0: no limit\)/);
  assert.equal(MASTER_WAIT_S, 3600);
  const byDefault = (now: number) => decide(newRun(inProgress({ masterWait: { since: T0, reason: "x", master: "m1" } }), policy), { type: "master-away", master: "m1", looking: "x" }, policy, now).type;
  assert.equal(byDefault(T0 + 3_599_000), "persist", "no masterWaitS: the default applies");
  assert.equal(byDefault(T0 + 3_600_000), "release-lock");
});

test("master rules: taken up when its master (or, with none, any) answers, given up past the wait; away after the configured misses; claims renewed at half", () => {
  assert.equal(whileMasterAway("m1", ["m2", "m1"], T0, T0 + 1), "back");
  assert.equal(whileMasterAway("m1", ["m2"], T0, T0 + 1), "keep-waiting", "another master answering does not help a node whose certificate is on m1");
  assert.equal(whileMasterAway(undefined, ["m2"], T0, T0 + 1), "back", "no master yet: any will do");
  assert.equal(whileMasterAway(undefined, [], T0, T0 + 1), "keep-waiting");
  assert.equal(whileMasterAway("m1", [], T0 + 1, T0 + 1), "give-up");
  assert.equal(whileMasterAway("m1", [], T0, Number.POSITIVE_INFINITY), "keep-waiting");
  const p = { checkS: 5, checks: 3 };
  assert.equal(masterAwayAfter("m1", 2, p), undefined);
  assert.equal(masterAwayAfter("m1", 3, p), "m1 missing from 3 master discoveries in a row");
  assert.equal(masterAwayAfter("m1", 9, { checkS: 0, checks: 3 }), undefined);
  assert.equal(claimNeedsRenewal(T0 + 400_000, T0, 600), false);
  assert.equal(claimNeedsRenewal(T0 + 299_000, T0, 600), true);
});

test("resume scans and claims: a node waiting for a master is ours to wait for while our claim lives, anyone's once it expired; a new round forgets the wait", () => {
  const waiting = inProgress({ masterWait: { since: T0, reason: masterWaitReason("m1"), master: "m1" }, claimExpires: T0 + 600_000 });
  assert.equal(resumeVerdict(waiting, "p1", T0 + 1), "wait-for-master");
  assert.equal(resumeVerdict(waiting, "p2", T0 + 1), undefined);
  assert.equal(resumeVerdict(waiting, "p2", T0 + 600_001), "resume", "its owner died: another takes it up within one lease");
  assert.equal(claimable(waiting, "p2", T0 + 1), false);
  const requeued: Versioned = { record: { ...waiting, status: "pending", masterWait: { since: T0, reason: "x", master: "m1" } }, revision: 3 };
  const c = claimRecord(requeued, "n1", "p1", T0 + 5, 600);
  assert.equal(c?.v.record.masterWait, undefined);
  assert.equal(c?.v.record.rounds, 2);
});

test("a node provisioned again under its old name (its record decommissioned, rounds from 1 again) gets a notice key of its own; the same round keeps its key", () => {
  const first = { ...inProgress(), rounds: 1, startedAt: T0 };
  const again = { ...inProgress(), rounds: 1, startedAt: T0 + 3_600_000 };
  assert.notEqual(noticeKey(first, "provisioned"), noticeKey(again, "provisioned"));
  assert.equal(noticeKey(first, "provisioned"), noticeKey({ ...first, updatedAt: T0 + 5000 }, "provisioned"), "a resumed round: the same key, told once");
});
