import type { MusterClient, TypedReply } from "../client/client.js";
import { puppetDDL, RUN_COMPLETE_EVENT, type PuppetDDL } from "../agents/puppet/ddl.js";
import { RUNALL_AGENT } from "../protocol/events.js";
import { Status } from "../protocol/status.js";
import { RunallScheduler, type PollStatus, type ProgressEvent, type RunallReport, type RunResult, type SchedulerAction, type SchedulerOptions } from "./runall.js";

// runall over the collective: the scheduler of ./runall.ts driven by the puppet agent's runonce
// replies, its run_complete events (subscribed before the first start) and, only for runs not heard
// of for a while, status polls.

export interface RunonceInput {
  noop?: boolean;
  tags?: string;
  environment?: string;
  force?: boolean;
}

export interface RunallOptions extends Partial<Omit<SchedulerOptions, "concurrency">> {
  concurrency: number;
  /** The nodes to run (discovered by the caller). */
  nodes: readonly string[];
  runonce?: RunonceInput;
  /** Expected run times (ms), e.g. measured in the previous cycle; else the nodes' last run. */
  expectedMs?: ReadonlyMap<string, number>;
  /** Ask every node's status first: disabled nodes are skipped, silent ones not started. Default true. */
  checkStatus?: boolean;
  onProgress?: (e: ProgressEvent) => void;
  /** Aborting stops starting runs and ends the call (runs already going carry on on their nodes). */
  signal?: AbortSignal;
  now?: () => number;
  /**
   * Publish this run's progress as runall events (protocol/events.ts), so the web console shows
   * it: `id` names the run, `identity` the publishing process (its host), `startedBy` who asked.
   */
  announce?: { id: string; identity: string; startedBy: string; filter: string };
}

export interface RunallResult {
  report: RunallReport;
  /** The order runs were started in. */
  order: string[];
  /** Start-to-end time of every run that ended (for the next cycle's order). */
  measuredMs: Map<string, number>;
  /** Nodes whose replies or run_complete events came unproven: the node-key directory does not know them (docs/security.md). */
  unverified: string[];
}

export async function runAll(client: MusterClient, opts: RunallOptions): Promise<RunallResult> {
  const now = opts.now ?? Date.now;
  const puppet = client.agent(puppetDDL);
  const internal = new AbortController(); // ends outstanding calls when we are done
  const onAbort = () => internal.abort();
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  let dirty = false;
  let wake: (() => void) | undefined;
  const kick = () => {
    dirty = true;
    wake?.();
  };
  const wanted = new Set(opts.nodes);
  let scheduler: RunallScheduler | undefined;
  const pendingEvents: { identity: string; requestid: string; result: RunResult; at: number }[] = [];
  const unverified = new Set<string>();
  const noteUnverified = (ids: readonly string[]) => {
    for (const id of ids) unverified.add(id);
  };

  // Subscribe before anything starts, so no run's end can be missed.
  // The client drops forged events (a bad signature, another key than the directory's) before here.
  const sub = client.onEvent("puppet", RUN_COMPLETE_EVENT, (e, trust) => {
    if (!wanted.has(e.identity) || typeof e.data.requestid !== "string") return;
    if (!trust.verified) unverified.add(e.identity);
    const ev = { identity: e.identity, requestid: e.data.requestid, result: runResult(e.data), at: now() };
    if (scheduler) scheduler.completed(ev.identity, ev.requestid, ev.at, ev.result);
    else pendingEvents.push(ev);
    kick();
  });
  const announce = opts.announce;
  const publish = (event: "started" | "progress" | "finished", data: Record<string, unknown>) => {
    if (!announce) return;
    try {
      client.publishEvent({ identity: announce.identity, agent: RUNALL_AGENT, event, time: Date.now(), data: { id: announce.id, ...data } });
    } catch {
      // progress reporting never stops the run
    }
  };
  const onProgress = (e: ProgressEvent) => {
    publish("progress", { type: e.type, identity: e.identity, at: e.at, ...(e.type === "start" ? {} : { outcome: e.outcome, detail: e.detail.slice(0, 1000), done: e.done, total: e.total, ...(e.type === "finish" && e.durationMs !== undefined ? { duration_ms: e.durationMs } : {}) }) });
    opts.onProgress?.(e);
  };
  let counts: Record<string, number> = {};
  try {
    await sub.ready; // the broker has the subscription before any runonce goes out
    publish("started", { started_by: announce?.startedBy ?? "", started: now(), filter: announce?.filter ?? "", concurrency: opts.concurrency, total: opts.nodes.length });

    const startTimeoutMs = opts.startTimeoutMs ?? 10_000;
    const estimates = new Map<string, number>();
    const preskip: { identity: string; outcome: "skipped" | "vanished" | "busy"; detail: string }[] = [];
    if (opts.checkStatus !== false && opts.nodes.length) {
      const st = await puppet.call("status", {}, { nodes: [...opts.nodes], timeoutMs: startTimeoutMs, signal: internal.signal });
      noteUnverified(st.unverified);
      const answered = new Map(st.replies.map((r) => [r.sender, r]));
      for (const id of opts.nodes) {
        const r = answered.get(id);
        if (!r) preskip.push({ identity: id, outcome: "vanished", detail: `no answer to status within ${startTimeoutMs / 1000} s` });
        else if (r.statuscode !== Status.OK) preskip.push({ identity: id, outcome: "vanished", detail: `status failed: ${r.statusmsg}` });
        else if (r.data.enabled === false) preskip.push({ identity: id, outcome: "skipped", detail: `Puppet is disabled${r.data.disable_message ? `: ${r.data.disable_message}` : ""}` });
        else if (r.data.last_run_duration != null) estimates.set(id, r.data.last_run_duration * 1000);
      }
    }
    for (const [id, ms] of opts.expectedMs ?? []) estimates.set(id, ms);

    const sched = new RunallScheduler(
      opts.nodes.map((identity) => ({ identity, expectedMs: estimates.get(identity) })),
      { ...stripUndefined(opts), concurrency: opts.concurrency, startTimeoutMs },
      announce ? onProgress : opts.onProgress,
    );
    scheduler = sched;
    for (const p of preskip) sched.skip(p.identity, now(), p.outcome, p.detail);
    for (const ev of pendingEvents) sched.completed(ev.identity, ev.requestid, ev.at, ev.result);

    const dispatch = (a: SchedulerAction) => {
      if (a.type === "start") {
        void puppet
          .call("runonce", opts.runonce ?? {}, { nodes: [a.identity], timeoutMs: startTimeoutMs, signal: internal.signal })
          .then(
            (res) => {
              noteUnverified(res.unverified);
              onStartReply(sched, a.identity, res.replies[0], now());
            },
            (e: unknown) => sched.refused(a.identity, now(), "failed", `runonce could not be sent: ${(e as Error).message}`),
          )
          .finally(kick);
      } else {
        void puppet
          .call("status", {}, { nodes: a.identities, timeoutMs: Math.min(startTimeoutMs, sched.opts.pollIntervalMs), signal: internal.signal })
          .then(
            (res) => {
              noteUnverified(res.unverified);
              const byNode = new Map(res.replies.map((r) => [r.sender, r]));
              for (const id of a.identities) sched.polled(id, now(), pollStatus(byNode.get(id)));
            },
            () => {
              for (const id of a.identities) sched.polled(id, now(), undefined);
            },
          )
          .finally(kick);
      }
    };

    for (;;) {
      if (opts.signal?.aborted) {
        sched.cancel(now(), "interrupted before it finished");
        break;
      }
      dirty = false;
      for (const a of sched.next(now())) dispatch(a);
      if (sched.done) break;
      if (dirty) continue;
      const deadline = sched.nextDeadline();
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, deadline === undefined ? 60_000 : Math.max(0, deadline - now()) + 1);
        const abort = () => resolve();
        opts.signal?.addEventListener("abort", abort, { once: true });
        wake = () => {
          clearTimeout(t);
          opts.signal?.removeEventListener("abort", abort);
          resolve();
        };
      });
      wake = undefined;
    }
    const report = sched.report();
    counts = report.counts;
    const measuredMs = new Map<string, number>();
    for (const n of report.nodes) if (n.durationMs !== undefined && (n.outcome === "ok" || n.outcome === "changed" || n.outcome === "failed")) measuredMs.set(n.identity, n.durationMs);
    return { report, order: sched.order, measuredMs, unverified: [...unverified].sort() };
  } finally {
    publish("finished", { at: now(), counts });
    internal.abort();
    opts.signal?.removeEventListener("abort", onAbort);
    sub.unsubscribe();
  }
}

function onStartReply(sched: RunallScheduler, identity: string, reply: TypedReply<PuppetDDL, "runonce"> | undefined, at: number): void {
  if (!reply) return sched.noReply(identity, at);
  if (reply.statuscode === Status.OK) return sched.started(identity, reply.requestid, at);
  // a refusal carries the state that caused it besides runonce's own outputs
  const why = reply.data as Record<string, unknown>;
  const kind = why.enabled === false ? "disabled" : why.applying === true ? "busy" : "failed";
  sched.refused(identity, at, kind, reply.statusmsg);
}

/** A run_complete event's data (or a status reply's last_runonce) as the scheduler's RunResult. */
export function runResult(d: Record<string, unknown>): RunResult {
  const r: RunResult = {
    exitcode: typeof d.exitcode === "number" ? d.exitcode : null,
    changed: d.changed === true,
    failed: d.failed === true || d.success === false,
    message: typeof d.message === "string" ? d.message : "",
  };
  if (typeof d.resources === "object" && d.resources !== null && !Array.isArray(d.resources)) r.resources = d.resources as Record<string, number>;
  return r;
}

function pollStatus(reply: TypedReply<PuppetDDL, "status"> | undefined): PollStatus | undefined {
  if (!reply || reply.statuscode !== Status.OK) return undefined;
  const d = reply.data;
  const st: PollStatus = { busy: d.applying === true || d.status === "splaying", lastrun: d.lastrun ?? 0 };
  const last = d.last_runonce;
  if (last && typeof last.requestid === "string") st.lastRunonce = { requestid: last.requestid, result: runResult(last) };
  return st;
}

function stripUndefined<T extends object>(o: T): Partial<SchedulerOptions> {
  const out: Record<string, unknown> = {};
  for (const k of ["startTimeoutMs", "pollIntervalMs", "maxMissedPolls", "runTimeoutMs", "order"] as const) {
    const v = (o as Record<string, unknown>)[k];
    if (v !== undefined) out[k] = v;
  }
  return out as Partial<SchedulerOptions>;
}
