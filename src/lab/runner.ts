import { checkPlan, dependents, readySteps, type PlanStep } from "./schedule.js";

// The thin runner of a plan (STYLE.md 15): it starts each step as soon as every step it comes after
// is done, so independent steps overlap, and looks each step's kind up in a table of
// implementations. Each implementation notes what it started and how to stop it; when any step
// fails, the others are told to give up (their signal aborts), the runner waits for them to settle,
// and then stops exactly what was started, the reverse of the order it came up in: a step's
// things stop only once everything that came after it has stopped. The same ledger stops a lab
// that came up, when it is done with.

/** What a step is handed besides its args: a signal that says the run was abandoned, and where to note what it started. */
export interface StepRun {
  readonly signal: AbortSignal;
  /** Note something this step started and how to stop it (note it as soon as it exists, before waiting on it). */
  started(name: string, stop: () => Promise<unknown> | unknown): void;
}

/** One implementation per kind of step. */
export type StepTable<S extends PlanStep, C> = { [K in S["kind"]]: (args: Extract<S, { kind: K }>["args"], run: StepRun, ctx: C) => Promise<void> | void };

interface Started {
  name: string;
  stop: () => Promise<unknown> | unknown;
}

/** Everything a run started, by step, and the one way to stop it all. */
export class Ledger {
  private readonly byStep = new Map<string, Started[]>();
  private readonly later: Started[] = [];
  private readonly after: Map<string, string[]>;
  private stopping?: Promise<string[]>;

  constructor(private readonly plan: readonly PlanStep[]) {
    this.after = dependents(plan);
  }

  note(step: string, name: string, stop: Started["stop"]): void {
    if (!this.byStep.has(step)) this.byStep.set(step, []);
    this.byStep.get(step)!.push({ name, stop });
  }

  /** Something started once the plan has run (a node added, a server started again): it stops first. */
  add(name: string, stop: Started["stop"]): void {
    this.later.push({ name, stop });
  }

  /** What was started, by name, in the order it was noted (steps in plan order, then the later ones). */
  names(): string[] {
    return [...this.plan.flatMap((s) => this.byStep.get(s.id) ?? []), ...this.later].map((x) => x.name);
  }

  /**
   * Stop everything, once (a second call waits for the first): the later additions together, then
   * each step's things in reverse, once every step after it has stopped. A stop that fails does not
   * keep the rest from stopping. Resolves with the names stopped, in the order they were stopped.
   */
  stop(): Promise<string[]> {
    this.stopping ??= this.stopAll();
    return this.stopping;
  }

  private async stopAll(): Promise<string[]> {
    const stopped: string[] = [];
    const stopEach = async (things: Started[]) => {
      for (const t of [...things].reverse()) {
        await Promise.resolve()
          .then(t.stop)
          .catch(() => undefined);
        stopped.push(t.name);
      }
    };
    await Promise.all(this.later.map((t) => stopEach([t])));
    const down = new Map<string, Promise<void>>();
    const stepDown = (id: string): Promise<void> => {
      if (!down.has(id)) down.set(id, Promise.all((this.after.get(id) ?? []).map(stepDown)).then(() => stopEach(this.byStep.get(id) ?? [])));
      return down.get(id)!;
    };
    await Promise.all(this.plan.map((s) => stepDown(s.id)));
    return stopped;
  }
}

/**
 * Run a plan: resolves with the ledger of what it started once every step is done; rejects with the
 * first step's error after stopping everything that was started.
 */
export async function runPlan<S extends PlanStep, C>(plan: readonly S[], table: StepTable<S, C>, ctx: C, needs?: Readonly<Record<string, readonly string[]>>): Promise<Ledger> {
  const problems = checkPlan(plan, needs);
  if (problems.length) throw new Error(`the plan cannot run:\n${problems.join("\n")}`);
  const ledger = new Ledger(plan);
  const abandon = new AbortController();
  const done = new Set<string>();
  const started = new Set<string>();
  const running = new Map<string, Promise<void>>();
  let failure: { error: unknown } | undefined;

  const launch = () => {
    if (failure) return;
    for (const s of readySteps(plan, done, started)) {
      started.add(s.id);
      const run: StepRun = { signal: abandon.signal, started: (name, stop) => ledger.note(s.id, name, stop) };
      const impl = table[s.kind as S["kind"]] as (args: unknown, run: StepRun, ctx: C) => Promise<void> | void;
      const p = Promise.resolve()
        .then(() => impl(s.args, run, ctx))
        .then(
          () => {
            done.add(s.id);
            running.delete(s.id);
            launch();
          },
          (error: unknown) => {
            running.delete(s.id);
            if (failure) return; // a step giving up because another failed
            failure = { error };
            abandon.abort(error);
          },
        );
      running.set(s.id, p);
    }
  };
  launch();
  while (running.size) await Promise.race(running.values());
  if (failure) {
    await ledger.stop();
    throw failure.error;
  }
  return ledger;
}
