import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { idealMakespan, orderNodes, RunallScheduler, type ProgressEvent, type SchedulerAction } from "../../src/fleet/runall.js";
import { parseLastRunSummary } from "../../src/puppet/state.js";
import { progressLine, renderRunallSummary, runallExitCode } from "../../src/cli/puppet-render.js";

// The runall scheduler as a pure state machine: inputs in, actions out, a fake clock.

const ok = { exitcode: 2, changed: true, failed: false, message: "changed 1 resource(s)" };
const starts = (as: SchedulerAction[]) => as.filter((a) => a.type === "start").map((a) => (a as { identity: string }).identity);

describe("RunallScheduler", () => {
  it("starts exactly N, and the next one as soon as one completes, in name order", () => {
    const events: ProgressEvent[] = [];
    const s = new RunallScheduler(["c", "a", "e", "b", "d"].map((identity) => ({ identity })), { concurrency: 2, order: "name" }, (e) => events.push(e));
    assert.deepEqual(starts(s.next(0)), ["a", "b"]);
    assert.equal(s.running, 2);
    assert.deepEqual(s.next(1), [], "no free slot, nothing due");
    s.started("a", "req-a", 5);
    s.started("b", "req-b", 6);
    assert.deepEqual(s.next(7), []);
    assert.equal(s.completed("a", "req-a", 100, ok), true);
    assert.deepEqual(starts(s.next(100)), ["c"]);
    s.started("c", "req-c", 101);
    s.completed("b", "req-b", 150, { ...ok, changed: false, exitcode: 0, message: "no changes" });
    assert.deepEqual(starts(s.next(150)), ["d"]);
    s.started("d", "req-d", 151);
    s.completed("c", "req-c", 200, { exitcode: 4, changed: false, failed: true, message: "1 resource(s) failed" });
    assert.deepEqual(starts(s.next(200)), ["e"]);
    s.started("e", "req-e", 201);
    s.completed("d", "req-d", 260, ok);
    s.completed("e", "req-e", 300, ok);
    assert.deepEqual(s.next(300), []);
    assert.equal(s.done, true);
    const r = s.report();
    assert.deepEqual(
      r.nodes.map((n) => [n.identity, n.outcome]),
      [
        ["a", "changed"],
        ["b", "ok"],
        ["c", "failed"],
        ["d", "changed"],
        ["e", "changed"],
      ],
    );
    assert.equal(r.makespanMs, 300);
    assert.equal(r.maxConcurrency, 2);
    assert.deepEqual(r.counts, { ok: 1, changed: 3, failed: 1, skipped: 0, busy: 0, vanished: 0, timeout: 0, cancelled: 0 });
    // mc-puppetd's "concurrency is N": the runs going before each start
    assert.deepEqual(
      events.filter((e) => e.type === "start").map((e) => (e as { running: number }).running),
      [0, 1, 1, 1, 1],
    );
    assert.equal(runallExitCode(r), 2);
  });

  it("orders longest expected run first, nodes without an estimate before all", () => {
    const nodes = [
      { identity: "a", expectedMs: 100 },
      { identity: "b", expectedMs: 900 },
      { identity: "c" },
      { identity: "d", expectedMs: 500 },
      { identity: "e", expectedMs: 900 },
    ];
    assert.deepEqual(
      orderNodes(nodes, "duration").map((n) => n.identity),
      ["c", "b", "e", "d", "a"],
    );
    assert.deepEqual(new RunallScheduler(nodes, { concurrency: 1 }).order, ["c", "b", "e", "d", "a"]);
    assert.deepEqual(new RunallScheduler(nodes, { concurrency: 1, order: "name" }).order, ["a", "b", "c", "d", "e"]);
  });

  it("skipped nodes never take a slot; refusals free theirs at once", () => {
    const s = new RunallScheduler(["a", "b", "c", "d"].map((identity) => ({ identity })), { concurrency: 2, order: "name" });
    s.skip("a", 0, "skipped", "Puppet is disabled: maintenance");
    assert.deepEqual(starts(s.next(0)), ["b", "c"]);
    s.refused("b", 3, "disabled", "Puppet is disabled on b");
    assert.deepEqual(starts(s.next(3)), ["d"]);
    s.refused("c", 4, "busy", "a Puppet run is already in progress on c");
    s.started("d", "rd", 5);
    s.completed("d", "rd", 10, ok);
    s.next(10);
    const r = s.report();
    assert.deepEqual(
      r.nodes.map((n) => n.outcome),
      ["skipped", "skipped", "busy", "changed"],
    );
    assert.equal(runallExitCode(r), 2, "a busy node is not a success");
    const text = renderRunallSummary(r);
    assert.match(text, /Skipped, Puppet disabled \(2\):\n {3}a {2}Puppet is disabled: maintenance\n {3}b {2}Puppet is disabled on b/);
  });

  it("a node that never answers runonce frees its slot at the start timeout", () => {
    const s = new RunallScheduler(["a", "b", "c"].map((identity) => ({ identity })), { concurrency: 2, order: "name", startTimeoutMs: 1000 });
    assert.deepEqual(starts(s.next(0)), ["a", "b"]);
    s.started("a", "ra", 10);
    s.completed("a", "ra", 400, ok);
    assert.deepEqual(starts(s.next(400)), ["c"]);
    assert.equal(s.nextDeadline(), 1000, "b's start deadline");
    s.started("c", "rc", 410);
    assert.deepEqual(s.next(999), []);
    s.next(1000);
    assert.equal(s.running, 1, "b gave its slot up");
    s.completed("c", "rc", 1500, ok);
    s.next(1500);
    assert.equal(s.done, true);
    const b = s.report().nodes.find((n) => n.identity === "b");
    assert.equal(b?.outcome, "vanished");
    assert.match(b?.detail ?? "", /no answer to runonce within 1 s/);
    // a late reply changes nothing
    s.started("b", "rb", 1600);
    assert.equal(s.report().nodes.find((n) => n.identity === "b")?.outcome, "vanished");
  });

  it("a run_complete that beats the runonce reply is kept until the reply names its request", () => {
    const s = new RunallScheduler([{ identity: "a" }, { identity: "b" }], { concurrency: 1 });
    s.next(0);
    const first = s.order[0]!;
    assert.equal(s.completed(first, "r1", 5, ok), true);
    assert.equal(s.running, 1);
    s.started(first, "r1", 6);
    assert.equal(s.running, 0, "completed on the reply");
    assert.equal(starts(s.next(6)).length, 1);
  });

  it("ignores run_complete events of runs it did not start", () => {
    const s = new RunallScheduler([{ identity: "a" }], { concurrency: 1 });
    s.next(0);
    s.started("a", "mine", 1);
    assert.equal(s.completed("a", "someone-elses", 2, ok), false);
    assert.equal(s.completed("zz", "mine", 2, ok), false);
    assert.equal(s.running, 1);
  });

  it("polls only runs not heard of for an interval; a poll can complete, keep waiting, or give up", () => {
    const t0 = 10_000_000;
    const s = new RunallScheduler(["a", "b", "c", "d"].map((identity) => ({ identity })), { concurrency: 4, order: "name", pollIntervalMs: 1000, maxMissedPolls: 2 });
    s.next(t0);
    for (const id of ["a", "b", "c", "d"]) s.started(id, `r${id}`, t0);
    assert.equal(s.nextDeadline(), t0 + 1000);
    assert.deepEqual(s.next(t0 + 999), []);
    assert.deepEqual(s.next(t0 + 1000), [{ type: "poll", identities: ["a", "b", "c", "d"] }]);
    assert.deepEqual(s.next(t0 + 1500), [], "no second poll while one is outstanding");
    s.polled("a", t0 + 1010, { busy: false, lastrun: 0, lastRunonce: { requestid: "ra", result: ok } }); // finished, event lost
    s.polled("b", t0 + 1010, { busy: true, lastrun: 0 }); // still running
    s.polled("c", t0 + 1010, undefined); // silent once
    s.polled("d", t0 + 1010, { busy: false, lastrun: t0 / 1000 - 3600 }); // idle, its last run older than ours, no result of ours
    let r = s.report();
    assert.equal(r.nodes.find((n) => n.identity === "a")?.outcome, "changed");
    assert.equal(r.nodes.find((n) => n.identity === "d")?.outcome, "failed");
    assert.deepEqual(s.next(t0 + 2010), [{ type: "poll", identities: ["b", "c"] }]);
    s.polled("b", t0 + 2020, { busy: false, lastrun: t0 / 1000 + 2 }); // ended after its start though the agent forgot the result
    s.polled("c", t0 + 2020, undefined); // silent twice: vanished
    r = s.report();
    assert.equal(r.nodes.find((n) => n.identity === "b")?.outcome, "ok");
    assert.equal(r.nodes.find((n) => n.identity === "c")?.outcome, "vanished");
    assert.equal(s.done, true);
  });

  it("gives a run up at the run timeout, and cancel() ends everything", () => {
    const s = new RunallScheduler(["a", "b", "c"].map((identity) => ({ identity })), { concurrency: 1, order: "name", runTimeoutMs: 5000, pollIntervalMs: 60_000 });
    s.next(0);
    s.started("a", "ra", 1);
    assert.equal(s.nextDeadline(), 5000);
    assert.deepEqual(starts(s.next(5000)), ["b"]);
    assert.equal(s.report().nodes[0]?.outcome, "timeout");
    s.cancel(6000, "interrupted");
    assert.equal(s.done, true);
    assert.deepEqual(
      s.report().nodes.map((n) => n.outcome),
      ["timeout", "cancelled", "cancelled"],
    );
  });

  it("refuses a concurrency below 1", () => {
    assert.throws(() => new RunallScheduler([], { concurrency: 0 }), RangeError);
    const empty = new RunallScheduler([], { concurrency: 3 });
    assert.equal(empty.done, true);
    assert.equal(runallExitCode(empty.report()), 1);
  });
});

describe("idealMakespan", () => {
  it("is the larger of total / N and the longest run", () => {
    assert.equal(idealMakespan([1, 1, 1, 1], 2), 2);
    assert.equal(idealMakespan([10, 1, 1], 4), 10);
    assert.equal(idealMakespan([], 4), 0);
  });
});

describe("progress lines", () => {
  it("read like mc-puppetd's", () => {
    assert.match(progressLine({ type: "start", identity: "dev1.one.net", at: Date.now(), running: 0, queued: 3 })!, /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}> Running dev1\.one\.net, concurrency is 0$/);
    assert.match(progressLine({ type: "finish", identity: "dev1.one.net", at: Date.now(), outcome: "changed", detail: "changed 1 resource(s)", durationMs: 3200, running: 1, done: 1, total: 4 })!, /> dev1\.one\.net changed after 3\.20 s: changed 1 resource\(s\) \(1\/4 done\)$/);
  });
});

describe("last_run_summary.yaml parsing", () => {
  it("takes Puppet's sections and tolerates missing ones", () => {
    const s = parseLastRunSummary({
      version: { config: 1795245144, puppet: "7.23.0" },
      application: { converged_environment: "production" },
      resources: { changed: 1, failed: 0, total: 8 },
      time: { total: 0.5, last_run: 1795245144 },
      events: { failure: 0, success: 1, total: 1 },
    });
    assert.deepEqual(s, {
      version: { config: "1795245144", puppet: "7.23.0" },
      environment: "production",
      resources: { changed: 1, failed: 0, total: 8 },
      time: { total: 0.5, last_run: 1795245144 },
      changes: {},
      events: { failure: 0, success: 1, total: 1 },
      lastrun: 1795245144,
    });
    assert.equal(parseLastRunSummary("garbage"), undefined);
    assert.equal(parseLastRunSummary({})?.lastrun, 0);
  });
});
