import type { RunallEvent } from "../protocol/events.js";

// Runall runs as the console shows them, folded from the runall events (protocol/events.ts) of
// every run, started from the CLI or from the console. Pure.

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
}

/** Outcomes that count as failed on the console (the CLI's summary counts them as problems). */
const FAILED = new Set(["failed", "timeout", "vanished", "busy"]);

/** Runs kept after they finish, newest first. */
export const KEEP_FINISHED = 20;

export class RunTable {
  private readonly runs = new Map<string, RunView & { slotMap: Map<string, number> }>();

  /** Applies one event; returns the run it changed (undefined for an event of a run never seen start). */
  apply(e: RunallEvent): RunView | undefined {
    if (e.event === "started") {
      const d = e.data;
      const existing = this.runs.get(d.id);
      if (existing) return view(existing);
      const r = { id: d.id, started_by: d.started_by, started: new Date(d.started).toISOString(), filter: d.filter, concurrency: d.concurrency, total: d.total, done: 0, failed: 0, slots: [], state: "running" as const, slotMap: new Map<string, number>() };
      this.runs.set(d.id, r);
      this.prune();
      return view(r);
    }
    const r = this.runs.get(e.data.id);
    if (!r) return undefined;
    if (e.event === "progress") {
      const d = e.data;
      if (d.type === "start") r.slotMap.set(d.identity, d.at);
      else {
        r.slotMap.delete(d.identity);
        if (d.done !== undefined) r.done = Math.max(r.done, d.done);
        else r.done++;
        if (d.outcome && FAILED.has(d.outcome)) r.failed++;
      }
      return view(r);
    }
    r.state = "finished";
    r.finished = new Date(e.data.at).toISOString();
    r.slotMap.clear();
    r.done = Math.max(r.done, Object.values(e.data.counts).reduce((a, b) => a + b, 0));
    return view(r);
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
  }
}

function view(r: RunView & { slotMap: Map<string, number> }): RunView {
  const { slotMap, ...rest } = r;
  return { ...rest, slots: [...slotMap.entries()].map(([identity, at]) => ({ identity, started: new Date(at).toISOString() })) };
}
