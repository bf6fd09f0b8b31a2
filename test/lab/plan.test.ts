import { test } from "node:test";
import assert from "node:assert/strict";
import { MACHINE_ROLES, planLab, STEP_KINDS, STEP_NEEDS, type LabPlan, type LabShape, type StepKind } from "../../src/lab/plan.js";
import { ancestors, checkPlan, readySteps, type PlanStep } from "../../src/lab/schedule.js";
import { LAB_STEPS } from "../../src/lab/steps.js";

// The lab's bring-up as data (plan.ts), checked without starting anything: every shape of lab has
// the steps it needs, each after what it uses, with the overlap `lab up` relies on (the JVMs warm up
// while everything else starts; the nodes wait while the masters start).

const SHAPES: Record<string, LabShape> = {
  "process nodes": { nodes: 4, provisioner: true },
  "process nodes, tests' own provisioner": { nodes: 3, provisioner: false },
  "nspawn machines": { nodes: 2, provisioner: true, machines: { kind: "nspawn" } },
  "nspawn machines with a package and an image cache": { nodes: 3, provisioner: false, machines: { kind: "nspawn", deb: "/tmp/m.deb", imageCache: "/tmp/images" } },
  "QEMU machines": { nodes: 1, provisioner: true, machines: { kind: "vm" } },
};

const ids = (plan: LabPlan, kind: StepKind) => plan.filter((s) => s.kind === kind).map((s) => s.id);
const step = (plan: LabPlan, id: string) => plan.find((s) => s.id === id) ?? assert.fail(`no step ${id}`);
const before = (plan: LabPlan, a: string, b: string) => ancestors(plan, b).has(a);
const independent = (plan: LabPlan, a: string, b: string) => !before(plan, a, b) && !before(plan, b, a);

/** The plan as the runner would start it when every step takes as long: wave after wave. */
function waves(plan: readonly PlanStep[]): string[][] {
  const done = new Set<string>();
  const out: string[][] = [];
  for (let ready = readySteps(plan, done, done); ready.length; ready = readySteps(plan, done, done)) {
    out.push(ready.map((s) => s.id));
    for (const s of ready) done.add(s.id);
  }
  return out;
}

for (const [name, shape] of Object.entries(SHAPES)) {
  test(`${name}: the plan can run, every step after what it needs, every kind implemented`, () => {
    const plan = planLab(shape);
    assert.deepEqual(checkPlan(plan, STEP_NEEDS), []);
    for (const s of plan) assert.equal(typeof LAB_STEPS[s.kind], "function", `no implementation for ${s.kind}`);
    assert.equal(waves(plan).flat().length, plan.length, "every step starts");
  });

  test(`${name}: nats-server first, the JVMs at once after it, the masters' servers once they answer`, () => {
    const plan = planLab(shape);
    const setup = new Set(["check-host", "credentials", "ports"]);
    for (const s of plan) if (!setup.has(s.kind) && s.kind !== "nats") assert.ok(before(plan, "nats", s.id), `${s.id} after nats`);
    const jvms = ids(plan, "puppetserver");
    assert.equal(jvms.length, 2);
    for (const j of jvms) assert.deepEqual([...ancestors(plan, j)].sort(), [...(shape.machines ? ["check-host"] : []), "credentials", "nats", "ports"].sort(), `${j} waits for nothing but the broker`);
    // what warms up alongside the JVMs: never after them, never before them
    for (const j of jvms) {
      for (const other of [...ids(plan, "machine-image"), ...ids(plan, "machine-network"), ...ids(plan, "machine-packages"), ...ids(plan, "machine-relays"), "receiver", "registry", "web", "notifier", ...ids(plan, "start-node"), ...ids(plan, "boot-machine"), "wait-provisioning"]) {
        assert.ok(independent(plan, j, other), `${other} overlaps ${j}`);
      }
    }
    assert.deepEqual(step(plan, "trust-masters").after, [...jvms, "registry"]);
    for (const m of ids(plan, "master-server")) assert.deepEqual(step(plan, m).after, ["trust-masters"]);
  });

  test(`${name}: the waits after lab.json, the provisioner last`, () => {
    const plan = planLab(shape);
    for (const w of ["wait-fleet", "wait-registry", "wait-web"]) assert.deepEqual(step(plan, w).after, ["state"]);
    const fleet = step(plan, "wait-fleet");
    assert.deepEqual(fleet.kind === "wait-fleet" && fleet.args.identities, ["puppet-eu.lab", "puppet-us.lab", "notifier.lab"]);
    const nodes = plan.filter((s) => s.kind === "start-node" || s.kind === "boot-machine").map((s) => s.id);
    assert.equal(nodes.length, shape.nodes);
    assert.deepEqual(step(plan, "wait-provisioning").after, nodes, "each node waits from its own start, not the masters'");
    assert.ok(before(plan, "wait-provisioning", "state-waited"));
    const last = plan.at(-1)!;
    if (shape.provisioner) assert.deepEqual([last.id, last.after], ["provisioner", ["state-waited"]]);
    else assert.deepEqual([last.id, ids(plan, "provisioner")], ["state-waited", []]);
  });
}

test("process nodes: one step per node, regions in turn, no machine step", () => {
  const plan = planLab({ nodes: 3, provisioner: true });
  const nodes = plan.flatMap((s) => (s.kind === "start-node" ? [[s.args.identity, s.args.serial, s.after]] : []));
  assert.deepEqual(nodes, [
    ["node01.eu.lab", 1, ["registry"]],
    ["node02.us.lab", 2, ["registry"]],
    ["node03.eu.lab", 3, ["registry"]],
  ]);
  const machineKinds: StepKind[] = ["check-host", "machine-image", "machine-network", "machine-packages", "machine-relays", "machines-ready", "boot-machine", "ssh-config"];
  assert.deepEqual(plan.filter((s) => machineKinds.includes(s.kind)), []);
  const wait = step(plan, "wait-provisioning");
  assert.deepEqual(wait.kind === "wait-provisioning" && [wait.args.timeoutMs, wait.args.machines], [120_000, false]);
  const master = step(plan, "master-server puppet-eu.lab");
  assert.equal(master.kind === "master-server" && master.args.ipaddress, "127.0.0.11", "nodes reach the master on loopback");
});

test("machines: the host checked before anything, the machines' side in today's order, boots one after the other", () => {
  const plan = planLab({ nodes: 3, provisioner: true, machines: { kind: "nspawn", deb: "/tmp/m.deb", imageCache: "/tmp/images" } });
  assert.deepEqual(plan[0], { id: "check-host", kind: "check-host", after: [], args: { kind: "nspawn" } });
  for (const s of plan.slice(1)) assert.ok(before(plan, "check-host", s.id), `${s.id} after the host check`);
  assert.deepEqual(
    ["machine-image", "machine-network", "machine-packages", "machine-relays", "machines-ready"].map((id) => step(plan, id).after),
    [["nats"], ["machine-image"], ["machine-network"], ["machine-packages"], ["machine-relays", "registry"]],
  );
  assert.deepEqual(step(plan, "machine-image").args, { kind: "nspawn", cache: "/tmp/images" });
  assert.deepEqual(step(plan, "machine-packages").args, { deb: "/tmp/m.deb" });
  const boots = plan.filter((s) => s.kind === "boot-machine");
  assert.deepEqual(
    boots.map((s) => [s.id, s.after]),
    [
      ["boot node01.eu.lab", ["machines-ready"]],
      ["boot node02.us.lab", ["boot node01.eu.lab"]],
      ["boot node03.eu.lab", ["boot node02.us.lab"]],
    ],
  );
  assert.deepEqual(step(plan, "ssh-config").after, boots.map((s) => s.id));
  const credentials = step(plan, "credentials");
  assert.deepEqual(credentials.kind === "credentials" && credentials.args.brokerIps, ["10.77.0.1"], "the broker's certificate names its relay");
  const jvm = step(plan, "puppetserver puppet-us.lab");
  assert.deepEqual(jvm.kind === "puppetserver" && jvm.args.altIps, ["10.77.0.12"]);
  const master = step(plan, "master-server puppet-us.lab");
  assert.equal(master.kind === "master-server" && master.args.ipaddress, "10.77.0.12", "nodes reach the master through its relay");
});

test("machines by role: every machine's role is a row, and the row's readiness step waits for it", () => {
  for (const kind of ["nspawn", "vm"] as const) {
    const plan = planLab({ nodes: 4, provisioner: true, machines: { kind } });
    for (const s of plan) {
      if (s.kind !== "boot-machine") continue;
      const role = MACHINE_ROLES[s.args.role];
      const wait = plan.find((w) => w.kind === role.ready);
      assert.ok(wait && "identities" in wait.args && wait.args.identities.includes(s.args.identity), `${s.args.identity} waited for by ${role.ready}`);
      assert.equal(wait && "timeoutMs" in wait.args && wait.args.timeoutMs, role.withinMs[kind]);
    }
  }
});

test("the order a lab of machines comes up in, wave by wave (were every step as quick)", () => {
  assert.deepEqual(waves(planLab({ nodes: 2, provisioner: true, machines: { kind: "nspawn" } })), [
    ["check-host"],
    ["credentials", "ports"],
    ["nats"],
    ["puppetserver puppet-eu.lab", "puppetserver puppet-us.lab", "machine-image", "receiver", "registry"],
    ["web", "machine-network", "notifier", "trust-masters"],
    ["machine-packages", "master-server puppet-eu.lab", "master-server puppet-us.lab"],
    ["machine-relays"],
    ["machines-ready"],
    ["boot node01.eu.lab"],
    ["boot node02.us.lab"],
    ["ssh-config", "wait-provisioning"],
    ["state"],
    ["wait-fleet", "wait-registry", "wait-web"],
    ["state-waited"],
    ["provisioner"],
  ]);
});

test("every kind of step has its needs written down, and an implementation", () => {
  assert.deepEqual(Object.keys(STEP_NEEDS).sort(), [...STEP_KINDS].sort());
  assert.deepEqual(Object.keys(LAB_STEPS).sort(), [...STEP_KINDS].sort());
  for (const [kind, needs] of Object.entries(STEP_NEEDS)) for (const n of needs) assert.ok((STEP_KINDS as readonly string[]).includes(n), `${kind} needs unknown kind ${n}`);
});

test("checkPlan says what is wrong: a twice-used id, an unknown step, a cycle, a step before what it needs", () => {
  const s = (id: string, after: string[], kind = "x"): PlanStep => ({ id, kind, after, args: {} });
  assert.deepEqual(checkPlan([s("a", []), s("a", [])]), ["step a appears twice"]);
  assert.deepEqual(checkPlan([s("a", ["ghost"])]), ["step a comes after ghost, which is not a step of the plan"]);
  assert.deepEqual(checkPlan([s("a", []), s("b", ["a", "c"]), s("c", ["b"])]), ["steps that can never start (a cycle): b, c"]);
  assert.deepEqual(checkPlan([s("self", ["self"])]), ["steps that can never start (a cycle): self"]);
  const plan = planLab({ nodes: 1, provisioner: false });
  const web = plan.find((x) => x.id === "web")!;
  const broken = plan.map((x) => (x === web ? { ...x, after: ["nats"] } : x));
  assert.deepEqual(checkPlan(broken, STEP_NEEDS), ["step web (web) may start before registry (registry), whose results it needs"]);
  assert.deepEqual(checkPlan(broken), [], "without needs, only the order is checked");
});
