import type { RunallEvent } from "../protocol/events.js";

// Runall runs as the console shows them, folded from the runall events (protocol/events.ts) of
// every run, started from the CLI or from the console: read back from the runall history stream
// when the console starts (fleet/stores.ts RUNALL_STREAM), then followed. Pure.

export interface RunView {
  id: string;
  started_by: string;
  /** ISO time */
  started: string;
  filter: string;
  concurrency: number;
  total: number;
  done: number;
  failed: number;
  /** Runs going now: which node, since when (ISO). */
  slots: { identity: string; started: string }[];
  state: "running" | "finished";
  finished?: string;
  /** Nodes by outcome so far: ok (no changes), changed, failed, skipped, busy, vanished, timeout, cancelled. */
  outcomes: Record<string, number>;
  /** False once the run's per-node results were dropped to bound memory (old runs keep their counts). */
  has_results: boolean;
}

/** One node's part in a run, as `GET /api/runall/:id` lists it. */
export interface RunResult {
  identity: string;
  /** running while it goes; then the scheduler's outcome. */
  outcome: string;
  /** ISO: when it was started (or skipped). */
  started: string;
  /** ISO, once it ended. */
  finished?: string;
  duration_s?: number;
  detail?: string;
}

/** Outcomes that count as failed on the console (the CLI's summary counts them as problems). */
const FAILED = new Set(["failed", "timeout", "vanished", "busy"]);

/** Runs listed after they finish, newest first (the history stream keeps more: 30 days). */
export const KEEP_FINISHED = 500;
/** Finished runs whose per-node results stay in memory (older ones are read back from the stream). */
export const KEEP_RESULTS = 10;

type Run = RunView & { slotMap: Map<string, number>; results: Map<string, RunResult>; seq?: number };

export class RunTable {
  private readonly runs = new Map<string, Run>();

  /**
   * Applies one event; returns the run it changed (undefined for an event of a run never seen
   * start). `seq`: the event's sequence in the history stream (a started event's is remembered).
   */
  apply(e: RunallEvent, seq?: number): RunView | undefined {
    if (e.event === "started") {
      const d = e.data;
      const existing = this.runs.get(d.id);
      if (existing) return view(existing);
      const r: Run = { id: d.id, started_by: d.started_by, started: new Date(d.started).toISOString(), filter: d.filter, concurrency: d.concurrency, total: d.total, done: 0, failed: 0, slots: [], state: "running", outcomes: {}, has_results: true, slotMap: new Map(), results: new Map(), ...(seq !== undefined ? { seq } : {}) };
      this.runs.set(d.id, r);
      this.prune();
      return view(r);
    }
    const r = this.runs.get(e.data.id);
    if (!r) return undefined;
    if (e.event === "progress") {
      const d = e.data;
      if (d.type === "start") {
        r.slotMap.set(d.identity, d.at);
        if (r.has_results) r.results.set(d.identity, { identity: d.identity, outcome: "running", started: new Date(d.at).toISOString() });
      } else {
        r.slotMap.delete(d.identity);
        if (d.done !== undefined) r.done = Math.max(r.done, d.done);
        else r.done++;
        if (d.outcome && FAILED.has(d.outcome)) r.failed++;
        const outcome = d.outcome ?? "unknown";
        r.outcomes[outcome] = (r.outcomes[outcome] ?? 0) + 1;
        if (r.has_results) {
          const was = r.results.get(d.identity);
          const startedAt = d.duration_ms !== undefined ? d.at - d.duration_ms : was ? Date.parse(was.started) : d.at;
          r.results.set(d.identity, {
            identity: d.identity,
            outcome,
            started: new Date(startedAt).toISOString(),
            finished: new Date(d.at).toISOString(),
            ...(d.type === "finish" ? { duration_s: Math.round((d.at - startedAt) / 100) / 10 } : {}),
            ...(d.detail ? { detail: d.detail } : {}),
          });
        }
      }
      return view(r);
    }
    r.state = "finished";
    r.finished = new Date(e.data.at).toISOString();
    r.slotMap.clear();
    r.done = Math.max(r.done, Object.values(e.data.counts).reduce((a, b) => a + b, 0));
    // the scheduler's own tally wins (a watcher that joined late missed some progress events)
    const counts = Object.fromEntries(Object.entries(e.data.counts).filter(([, n]) => n > 0));
    if (Object.keys(counts).length) r.outcomes = counts;
    this.prune();
    return view(r);
  }

  /** A run's per-node results, in the order the nodes were started; undefined for an unknown run. */
  results(id: string): RunResult[] | undefined {
    return this.runs.get(id) && [...this.runs.get(id)!.results.values()];
  }

  /** Where a run's events begin in the history stream, when it was read from there. */
  startSeq(id: string): number | undefined {
    return this.runs.get(id)?.seq;
  }

  list(): RunView[] {
    return [...this.runs.values()].map(view).sort((a, b) => (a.state === b.state ? b.started.localeCompare(a.started) : a.state === "running" ? -1 : 1));
  }

  get(id: string): RunView | undefined {
    const r = this.runs.get(id);
    return r && view(r);
  }

  private prune(): void {
    const finished = [...this.runs.values()].filter((r) => r.state === "finished").sort((a, b) => b.started.localeCompare(a.started));
    for (const r of finished.slice(KEEP_FINISHED)) this.runs.delete(r.id);
    for (const r of finished.slice(KEEP_RESULTS)) {
      r.results.clear();
      r.has_results = false;
    }
  }
}

function view(r: Run): RunView {
  const { slotMap, results: _results, seq: _seq, ...rest } = r;
  return { ...rest, outcomes: { ...r.outcomes }, slots: [...slotMap.entries()].map(([identity, at]) => ({ identity, started: new Date(at).toISOString() })) };
}
