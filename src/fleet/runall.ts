// The runall scheduler: Puppet runs across a set of nodes with exactly N going at once, the next
// started as soon as one ends. Pure: it holds no timers and does no I/O. The caller feeds it what
// happened (a runonce reply, a run_complete event, a status poll, the clock) and carries out the
// actions it returns (start a node, poll some nodes). src/fleet/runner.ts does that over NATS.
//
//   queued --start--> starting --reply OK--> running --run_complete / poll says done--> done
//                        |  no reply (start timeout): vanished       |  polls unanswered: vanished
//                        |  refused: skipped (disabled), busy, failed |  run timeout: timeout
//
// A node occupies a slot from the moment its start is sent until it is done, so a node that
// vanishes or never starts frees its slot after the start timeout and blocks nobody.

export const Outcomes = ["ok", "changed", "failed", "skipped", "busy", "vanished", "timeout", "cancelled"] as const;
export type RunOutcome = (typeof Outcomes)[number];

/** How a run ended, from the node's run_complete event or a status poll. */
export interface RunResult {
  /** puppet --detailed-exitcodes, or null when only a poll told us. */
  exitcode: number | null;
  changed: boolean;
  failed: boolean;
  message: string;
  resources?: Record<string, number>;
}

/** What a status poll says about a node whose run we are waiting for. */
export interface PollStatus {
  /** Applying a catalog or waiting out a splay. */
  busy: boolean;
  /** When the node's last run ended, epoch seconds (0: never). */
  lastrun: number;
  /** The result of the run the node's agent started last, if it remembers one. */
  lastRunonce?: { requestid: string; result: RunResult };
}

export interface SchedulerOptions {
  concurrency: number;
  /** A start nobody answers within this frees its slot (the node vanished). */
  startTimeoutMs: number;
  /** A running node not heard of for this long is asked for its status (events are the rule). */
  pollIntervalMs: number;
  /** Consecutive unanswered polls after which a running node counts as vanished. */
  maxMissedPolls: number;
  /** A run not finished this long after it started is given up (timeout). */
  runTimeoutMs: number;
  /**
   * name: by identity (mc-puppetd's order). duration: longest expected run first (nodes without an
   * estimate first of all, by name), which keeps the last slots from finishing far apart.
   */
  order: "name" | "duration";
}

export const defaultSchedulerOptions: Omit<SchedulerOptions, "concurrency"> = {
  startTimeoutMs: 10_000,
  pollIntervalMs: 30_000,
  maxMissedPolls: 3,
  runTimeoutMs: 1_800_000,
  order: "duration",
};

export type SchedulerAction = { type: "start"; identity: string } | { type: "poll"; identities: string[] };

export type ProgressEvent =
  | { type: "start"; identity: string; at: number; /** runs going before this one (mc-puppetd's "concurrency is N") */ running: number; queued: number }
  | { type: "finish"; identity: string; at: number; outcome: RunOutcome; detail: string; durationMs: number | undefined; running: number; done: number; total: number }
  | { type: "skip"; identity: string; at: number; outcome: RunOutcome; detail: string; done: number; total: number };

export interface NodeInput {
  identity: string;
  /** Expected run time (the last run's, say), for order "duration". */
  expectedMs?: number;
}

export interface NodeReport {
  identity: string;
  outcome: RunOutcome;
  detail: string;
  exitcode: number | null;
  /** When the start was sent / the end learnt (ms, the caller's clock); undefined if never started. */
  startedAt?: number;
  finishedAt?: number;
  durationMs?: number;
  resources?: Record<string, number>;
}

export interface RunallReport {
  nodes: NodeReport[];
  /** The order runs were to start in (nodes skipped or vanished before their turn included). */
  order: string[];
  counts: Record<RunOutcome, number>;
  /** First start sent to the last run's end, ms (0 when nothing ran). */
  makespanMs: number;
  firstStartAt?: number;
  lastFinishAt?: number;
  /** Most runs going at once. */
  maxConcurrency: number;
  concurrency: number;
}

type State = "queued" | "starting" | "running" | "done";

interface NodeState {
  identity: string;
  expectedMs: number | undefined;
  state: State;
  sentAt?: number;
  startedAt?: number;
  requestId?: string;
  lastHeardAt?: number;
  polling: boolean;
  missedPolls: number;
  /** A run_complete that arrived before the runonce reply. */
  early?: { requestId: string; result: RunResult; at: number };
  outcome?: RunOutcome;
  detail?: string;
  result?: RunResult;
  finishedAt?: number;
}

export class RunallScheduler {
  readonly opts: SchedulerOptions;
  private readonly nodes = new Map<string, NodeState>();
  private readonly queue: NodeState[];
  private readonly startOrder: string[];
  private inFlight = 0;
  private maxInFlight = 0;
  private finished = 0;
  private firstStartAt: number | undefined;
  private lastFinishAt: number | undefined;

  constructor(nodes: readonly NodeInput[], opts: Partial<SchedulerOptions> & { concurrency: number }, private readonly onProgress: (e: ProgressEvent) => void = () => {}) {
    this.opts = { ...defaultSchedulerOptions, ...opts };
    if (!Number.isInteger(this.opts.concurrency) || this.opts.concurrency < 1) throw new RangeError(`concurrency must be a whole number >= 1, got ${this.opts.concurrency}`);
    for (const n of nodes) {
      if (this.nodes.has(n.identity)) continue;
      this.nodes.set(n.identity, { identity: n.identity, expectedMs: n.expectedMs, state: "queued", polling: false, missedPolls: 0 });
    }
    this.queue = orderNodes([...this.nodes.values()], this.opts.order);
    this.startOrder = this.queue.map((n) => n.identity);
  }

  /** The order runs start in. */
  get order(): string[] {
    return [...this.startOrder];
  }

  get running(): number {
    return this.inFlight;
  }

  get done(): boolean {
    return this.finished === this.nodes.size;
  }

  /** Take a node out before it starts (disabled, did not answer the status check). */
  skip(identity: string, now: number, outcome: "skipped" | "vanished" | "busy", detail: string): void {
    const n = this.nodes.get(identity);
    if (!n || n.state !== "queued") return;
    this.finish(n, now, outcome, detail);
  }

  /** Apply timeouts, fill free slots and collect due polls. Call after every input. */
  next(now: number): SchedulerAction[] {
    const actions: SchedulerAction[] = [];
    for (const n of this.nodes.values()) {
      if (n.state === "starting" && now - n.sentAt! >= this.opts.startTimeoutMs) this.finish(n, now, "vanished", `no answer to runonce within ${fmtS(this.opts.startTimeoutMs)}`);
      else if (n.state === "running" && now - n.startedAt! >= this.opts.runTimeoutMs) this.finish(n, now, "timeout", `no end of run within ${fmtS(this.opts.runTimeoutMs)}`);
    }
    while (this.inFlight < this.opts.concurrency) {
      const n = this.queue.shift();
      if (!n) break;
      if (n.state !== "queued") continue;
      this.onProgress({ type: "start", identity: n.identity, at: now, running: this.inFlight, queued: this.queue.filter((q) => q.state === "queued").length });
      n.state = "starting";
      n.sentAt = now;
      this.firstStartAt ??= now;
      this.inFlight++;
      this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
      actions.push({ type: "start", identity: n.identity });
    }
    const due: string[] = [];
    for (const n of this.nodes.values()) {
      if (n.state === "running" && !n.polling && now - n.lastHeardAt! >= this.opts.pollIntervalMs) {
        n.polling = true;
        due.push(n.identity);
      }
    }
    if (due.length) actions.push({ type: "poll", identities: due.sort() });
    return actions;
  }

  /** When next() has work to do without any input (a timeout, a poll), or undefined. */
  nextDeadline(): number | undefined {
    let t: number | undefined;
    const at = (x: number) => (t = t === undefined ? x : Math.min(t, x));
    for (const n of this.nodes.values()) {
      if (n.state === "starting") at(n.sentAt! + this.opts.startTimeoutMs);
      else if (n.state === "running") {
        at(n.startedAt! + this.opts.runTimeoutMs);
        if (!n.polling) at(n.lastHeardAt! + this.opts.pollIntervalMs);
      }
    }
    return t;
  }

  /** runonce answered OK: the run is on its way. `requestId` identifies its run_complete. */
  started(identity: string, requestId: string, now: number): void {
    const n = this.nodes.get(identity);
    if (!n || n.state !== "starting") return;
    n.state = "running";
    n.requestId = requestId;
    n.startedAt = n.sentAt;
    n.lastHeardAt = now;
    if (n.early && n.early.requestId === requestId) this.complete(n, n.early.at, n.early.result);
    n.early = undefined;
  }

  /** runonce was refused: Puppet disabled (skipped), already running (busy), or otherwise (failed). */
  refused(identity: string, now: number, kind: "disabled" | "busy" | "failed", detail: string): void {
    const n = this.nodes.get(identity);
    if (!n || n.state !== "starting") return;
    this.finish(n, now, kind === "disabled" ? "skipped" : kind === "busy" ? "busy" : "failed", detail);
  }

  /** runonce got no reply in time. */
  noReply(identity: string, now: number): void {
    const n = this.nodes.get(identity);
    if (!n || n.state !== "starting") return;
    this.finish(n, now, "vanished", `no answer to runonce within ${fmtS(this.opts.startTimeoutMs)}`);
  }

  /** A run_complete event. Runs started by anyone else (another request id) are ignored. Returns whether it was ours. */
  completed(identity: string, requestId: string, now: number, result: RunResult): boolean {
    const n = this.nodes.get(identity);
    if (!n) return false;
    if (n.state === "starting") {
      n.early = { requestId, result, at: now };
      return true;
    }
    if (n.state !== "running" || n.requestId !== requestId) return false;
    this.complete(n, now, result);
    return true;
  }

  /** The answer to a status poll; undefined when the node did not answer. */
  polled(identity: string, now: number, status: PollStatus | undefined): void {
    const n = this.nodes.get(identity);
    if (!n || n.state !== "running") return;
    n.polling = false;
    if (!status) {
      n.missedPolls++;
      n.lastHeardAt = now; // next poll one interval later
      if (n.missedPolls >= this.opts.maxMissedPolls) this.finish(n, now, "vanished", `stopped answering during its run (${n.missedPolls} status polls unanswered)`);
      return;
    }
    n.missedPolls = 0;
    n.lastHeardAt = now;
    if (status.lastRunonce && status.lastRunonce.requestid === n.requestId) return this.complete(n, now, status.lastRunonce.result);
    if (status.busy) return;
    // Not busy and no result of ours: the node (its server) may have restarted mid-run.
    if (status.lastrun * 1000 >= n.startedAt! - 1000) {
      return this.complete(n, now, { exitcode: null, changed: false, failed: false, message: "finished (learnt from a status poll; no details)" });
    }
    this.finish(n, now, "failed", "the run ended without a result (was the node restarted?)");
  }

  /** Stop: every node not done is cancelled (a run already going on a node carries on there). */
  cancel(now: number, why = "cancelled"): void {
    for (const n of this.nodes.values()) if (n.state !== "done") this.finish(n, now, "cancelled", why);
  }

  report(): RunallReport {
    const counts = Object.fromEntries(Outcomes.map((o) => [o, 0])) as Record<RunOutcome, number>;
    const nodes: NodeReport[] = [];
    for (const n of [...this.nodes.values()].sort((a, b) => cmp(a.identity, b.identity))) {
      const outcome = n.outcome ?? "cancelled";
      counts[outcome]++;
      const r: NodeReport = { identity: n.identity, outcome, detail: n.detail ?? "", exitcode: n.result?.exitcode ?? null };
      if (n.sentAt !== undefined) r.startedAt = n.sentAt;
      if (n.finishedAt !== undefined) r.finishedAt = n.finishedAt;
      if (n.sentAt !== undefined && n.finishedAt !== undefined) r.durationMs = n.finishedAt - n.sentAt;
      if (n.result?.resources) r.resources = n.result.resources;
      nodes.push(r);
    }
    const out: RunallReport = {
      nodes,
      order: [...this.startOrder],
      counts,
      makespanMs: this.firstStartAt !== undefined && this.lastFinishAt !== undefined ? this.lastFinishAt - this.firstStartAt : 0,
      maxConcurrency: this.maxInFlight,
      concurrency: this.opts.concurrency,
    };
    if (this.firstStartAt !== undefined) out.firstStartAt = this.firstStartAt;
    if (this.lastFinishAt !== undefined) out.lastFinishAt = this.lastFinishAt;
    return out;
  }

  private complete(n: NodeState, now: number, result: RunResult): void {
    n.result = result;
    this.finish(n, now, result.failed ? "failed" : result.changed ? "changed" : "ok", result.message);
  }

  private finish(n: NodeState, now: number, outcome: RunOutcome, detail: string): void {
    if (n.state === "done") return;
    const wasGoing = n.state === "starting" || n.state === "running";
    n.state = "done";
    n.outcome = outcome;
    n.detail = detail;
    n.finishedAt = now;
    n.polling = false;
    this.finished++;
    if (wasGoing) {
      this.inFlight--;
      if (outcome !== "cancelled") this.lastFinishAt = Math.max(this.lastFinishAt ?? now, now);
      this.onProgress({ type: "finish", identity: n.identity, at: now, outcome, detail, durationMs: now - n.sentAt!, running: this.inFlight, done: this.finished, total: this.nodes.size });
    } else {
      this.onProgress({ type: "skip", identity: n.identity, at: now, outcome, detail, done: this.finished, total: this.nodes.size });
    }
  }
}

/** The start order: by name, or longest expected run first (no estimate counts as longest). */
export function orderNodes<T extends { identity: string; expectedMs?: number | undefined }>(nodes: T[], order: "name" | "duration"): T[] {
  const byName = (a: T, b: T) => cmp(a.identity, b.identity);
  if (order === "name") return [...nodes].sort(byName);
  return [...nodes].sort((a, b) => {
    const ea = a.expectedMs ?? Infinity;
    const eb = b.expectedMs ?? Infinity;
    return ea === eb ? byName(a, b) : eb - ea;
  });
}

/** The best any scheduler could do with these run times on `concurrency` slots (a lower bound). */
export function idealMakespan(runMs: readonly number[], concurrency: number): number {
  if (runMs.length === 0) return 0;
  const total = runMs.reduce((a, b) => a + b, 0);
  return Math.max(total / concurrency, Math.max(...runMs));
}

/** The makespan of list scheduling: runs started in this order, each on the first free slot, no overhead. */
export function listMakespan(runMsInOrder: readonly number[], concurrency: number): number {
  const slots = new Array<number>(Math.max(1, concurrency)).fill(0);
  for (const ms of runMsInOrder) {
    let i = 0;
    for (let j = 1; j < slots.length; j++) if (slots[j]! < slots[i]!) i = j;
    slots[i]! += ms;
  }
  return Math.max(...slots);
}

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
const fmtS = (ms: number) => `${ms % 1000 === 0 ? ms / 1000 : (ms / 1000).toFixed(1)} s`;
