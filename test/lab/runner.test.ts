import { test } from "node:test";
import assert from "node:assert/strict";
import { planLab, STEP_KINDS, STEP_NEEDS, type LabStep } from "../../src/lab/plan.js";
import { runPlan, type StepRun, type StepTable } from "../../src/lab/runner.js";
import { ancestors, type PlanStep } from "../../src/lab/schedule.js";

// The runner with fake steps (nothing starts): each step notes a thing it "started"; the tests read
// when steps started and ended, and what was stopped, in which order.

interface Log {
  events: string[];
  stopped: string[];
}

const tick = () => new Promise((r) => setImmediate(r));

/** A table in which every kind notes one thing named after its step, takes a few ticks, and `fail` throws. */
function fakeTable(log: Log, o: { fail?: string; slow?: Set<string> } = {}): StepTable<LabStep, undefined> {
  const impl = async (id: string, run: StepRun) => {
    log.events.push(`start ${id}`);
    run.started(id, () => void log.stopped.push(id));
    if (id === o.fail) throw new Error(`${id} failed`);
    // a slow step (a JVM warming up) only ends when the run is abandoned
    if (o.slow?.has(id)) await new Promise<void>((_, reject) => run.signal.addEventListener("abort", () => reject(new Error("abandoned")), { once: true }));
    for (let i = 0; i < 3; i++) await tick();
    log.events.push(`end ${id}`);
  };
  // the step's id reaches the implementation through its args (a fake plan puts it there)
  return Object.fromEntries(STEP_KINDS.map((k) => [k, (args: { id: string }, run: StepRun) => impl(args.id, run)])) as unknown as StepTable<LabStep, undefined>;
}

/** The lab's real plan, each step's args replaced by its id (the fake table reads it). */
const fakePlan = (shape: Parameters<typeof planLab>[0]) => planLab(shape).map((s) => ({ ...s, args: { id: s.id } }) as unknown as LabStep);

const SHAPES = [
  { nodes: 2, provisioner: true, machines: { kind: "nspawn" as const } },
  { nodes: 3, provisioner: true },
];

test("a step starts only once every step it comes after has ended", async () => {
  for (const shape of SHAPES) {
    const plan = fakePlan(shape);
    const log: Log = { events: [], stopped: [] };
    const ledger = await runPlan(plan, fakeTable(log), undefined, STEP_NEEDS);
    for (const s of plan) {
      const start = log.events.indexOf(`start ${s.id}`);
      assert.ok(start >= 0, `${s.id} ran`);
      for (const a of s.after) assert.ok(log.events.indexOf(`end ${a}`) < start, `${s.id} started after ${a} ended`);
    }
    assert.deepEqual(log.stopped, [], "nothing stops while the lab is up");
    assert.deepEqual(ledger.names().sort(), plan.map((s) => s.id).sort());
  }
});

test("independent steps run at the same time", async () => {
  // a and b each wait until the other has started: run one after the other, this never ends
  const started = new Set<string>();
  const both = () => new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error("a and b did not overlap")), 2000);
    const check = () => (started.has("a") && started.has("b") ? (clearTimeout(t), resolve()) : setImmediate(check));
    check();
  });
  const plan: PlanStep<"wait", { id?: string }>[] = [
    { id: "first", kind: "wait", after: [], args: {} },
    { id: "a", kind: "wait", after: ["first"], args: {} },
    { id: "b", kind: "wait", after: ["first"], args: {} },
    { id: "last", kind: "wait", after: ["a", "b"], args: {} },
  ];
  const order: string[] = [];
  await runPlan(
    plan.map((s) => ({ ...s, args: { id: s.id } })),
    {
      wait: async ({ id }: { id: string }) => {
        started.add(id);
        order.push(id);
        if (id === "a" || id === "b") await both();
      },
    },
    undefined,
  );
  assert.deepEqual(order, ["first", "a", "b", "last"]);
});

test("a failure at any step stops exactly what was started, each thing after whatever came after it", async () => {
  for (const shape of SHAPES) {
    const plan = fakePlan(shape);
    for (const failing of plan) {
      const log: Log = { events: [], stopped: [] };
      await assert.rejects(runPlan(plan, fakeTable(log, { fail: failing.id }), undefined, STEP_NEEDS), new RegExp(`${failing.id} failed`));
      const started = log.events.filter((e) => e.startsWith("start ")).map((e) => e.slice(6));
      assert.deepEqual([...log.stopped].sort(), [...started].sort(), `failing at ${failing.id}: everything started is stopped, nothing else`);
      for (const s of started) for (const a of ancestors(plan, s)) if (log.stopped.includes(a)) assert.ok(log.stopped.indexOf(s) < log.stopped.indexOf(a), `${s} stopped before ${a}, which it came after`);
      for (const s of plan) if (ancestors(plan, s.id).has(failing.id)) assert.ok(!started.includes(s.id), `${s.id} never starts after ${failing.id} failed`);
    }
  }
});

test("on a failure, steps still going are told to give up, and what they started is stopped too", async () => {
  const plan = fakePlan({ nodes: 2, provisioner: true, machines: { kind: "nspawn" } });
  const log: Log = { events: [], stopped: [] };
  // both JVMs still warming up when the image fails
  const slow = new Set(["puppetserver puppet-eu.lab", "puppetserver puppet-us.lab"]);
  await assert.rejects(runPlan(plan, fakeTable(log, { fail: "machine-image", slow }), undefined, STEP_NEEDS), /machine-image failed/);
  for (const j of slow) assert.ok(log.stopped.includes(j), `${j} stopped`);
  assert.deepEqual(log.stopped.at(-1), "check-host", "the first thing started is the last stopped");
  assert.ok(log.stopped.indexOf("nats") > Math.max(...[...slow].map((j) => log.stopped.indexOf(j))), "the broker outlives the masters");
});

test("the ledger stops a lab that came up in reverse, things started later first, once", async () => {
  const plan = fakePlan({ nodes: 2, provisioner: true });
  const log: Log = { events: [], stopped: [] };
  const ledger = await runPlan(plan, fakeTable(log), undefined, STEP_NEEDS);
  ledger.add("node03 added later", () => void log.stopped.push("node03 added later"));
  ledger.add("a stop that fails", () => {
    throw new Error("already gone");
  });
  const [first, second] = await Promise.all([ledger.stop(), ledger.stop()]);
  assert.equal(first, second);
  assert.deepEqual(log.stopped.slice(0, 1), ["node03 added later"]);
  assert.deepEqual(log.stopped.slice(-2).sort(), ["credentials", "ports"], "what came up first stops last");
  for (const s of plan) for (const a of ancestors(plan, s.id)) assert.ok(log.stopped.indexOf(s.id) < log.stopped.indexOf(a), `${s.id} stopped before ${a}`);
  assert.equal(first.length, plan.length + 2, "a failing stop does not keep the rest from stopping");
});

test("a plan that cannot run starts nothing", async () => {
  let ran = 0;
  const plan: PlanStep<"x">[] = [
    { id: "a", kind: "x", after: ["b"], args: {} },
    { id: "b", kind: "x", after: ["a"], args: {} },
  ];
  await assert.rejects(runPlan(plan, { x: () => void ran++ }, undefined), /cycle/);
  assert.equal(ran, 0);
});
