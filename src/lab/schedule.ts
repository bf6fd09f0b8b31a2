// The order of a plan's steps, decided in pure code: which steps may start now (everything they
// come after is done), which may stop now (everything that came after them has stopped), and
// whether a plan can run at all (ids unique, every dependency a step of the plan, no cycle, each
// step after the steps whose results it needs). runner.ts acts on these answers; plan.ts writes
// the lab's plans.

/** One step of a plan: what it is (`kind`, which an implementation table runs), after which steps, with what. */
export interface PlanStep<K extends string = string, A = unknown> {
  id: string;
  kind: K;
  /** The ids of the steps that must be done before this one starts. */
  after: readonly string[];
  args: A;
}

/** The steps that may start now, in plan order: not started, and everything they come after done. */
export function readySteps<S extends PlanStep>(plan: readonly S[], done: ReadonlySet<string>, started: ReadonlySet<string>): S[] {
  return plan.filter((s) => !started.has(s.id) && s.after.every((a) => done.has(a)));
}

/** For each step, the steps that come directly after it (what must stop before it stops). */
export function dependents(plan: readonly PlanStep[]): Map<string, string[]> {
  const out = new Map<string, string[]>(plan.map((s) => [s.id, []]));
  for (const s of plan) for (const a of s.after) out.get(a)?.push(s.id);
  return out;
}

/** Every step a step comes after, directly or not. */
export function ancestors(plan: readonly PlanStep[], id: string): Set<string> {
  const byId = new Map(plan.map((s) => [s.id, s]));
  const seen = new Set<string>();
  const visit = (x: string) => {
    for (const a of byId.get(x)?.after ?? []) if (!seen.has(a)) (seen.add(a), visit(a));
  };
  visit(id);
  return seen;
}

/**
 * What is wrong with a plan, empty when it can run: a duplicate id, a dependency that names no step,
 * a cycle, and (with `needs`: kind -> kinds whose results it uses) a step that may start before a
 * step it needs is done. A need is on every step of that kind in the plan; a kind the plan lacks
 * needs nothing.
 */
export function checkPlan(plan: readonly PlanStep[], needs: Readonly<Record<string, readonly string[]>> = {}): string[] {
  const problems: string[] = [];
  const ids = new Set<string>();
  for (const s of plan) {
    if (ids.has(s.id)) problems.push(`step ${s.id} appears twice`);
    ids.add(s.id);
  }
  for (const s of plan) for (const a of s.after) if (!ids.has(a)) problems.push(`step ${s.id} comes after ${a}, which is not a step of the plan`);
  // Kahn: whatever never becomes ready sits on a cycle (or behind one)
  const done = new Set<string>();
  for (let ready = readySteps(plan, done, done); ready.length; ready = readySteps(plan, done, done)) for (const s of ready) done.add(s.id);
  const stuck = plan.filter((s) => !done.has(s.id) && s.after.every((a) => ids.has(a)));
  if (stuck.length) problems.push(`steps that can never start (a cycle): ${stuck.map((s) => s.id).join(", ")}`);
  if (problems.length) return problems;
  for (const s of plan) {
    const before = ancestors(plan, s.id);
    for (const kind of needs[s.kind] ?? []) {
      const missing = plan.filter((x) => x.kind === kind && !before.has(x.id));
      if (missing.length) problems.push(`step ${s.id} (${s.kind}) may start before ${missing.map((x) => x.id).join(", ")} (${kind}), whose results it needs`);
    }
  }
  return problems;
}
