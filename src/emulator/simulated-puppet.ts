import type { AgentFactory } from "../agent/catalogue.js";
import { puppetDDL, RUN_COMPLETE_EVENT, type RunCompleteData } from "../agents/puppet/ddl.js";
import { RpcError } from "../errors.js";
import { DEFAULT_RUNINTERVAL_S } from "../protocol/puppet-run.js";
import { Status } from "../protocol/status.js";
import { defineAgent } from "../agent/agent.js";

// A simulated puppet agent for emulated fleets (the runall bench, fast tests): the real DDL, so
// requests are validated as on real nodes, and the real agent's behaviour (runonce answers at once,
// run_complete when the run ends, refusals when disabled or busy) with Puppet's run replaced by a
// timer of the node's own duration. One SimulatedPuppetFleet holds every node's state and records
// when runs start and end, so tests and the bench can see the concurrency the nodes experienced.

export interface SimulatedPuppetOptions {
  /** How long a run on this node takes, ms. */
  runMs: (identity: string) => number;
  /** How the node's n-th run (1-based) ends; default: changes on the first run, none later. */
  result?: (identity: string, n: number) => { changed?: boolean; failed?: boolean };
  /** Nodes disabled from the start, with their lock message. */
  disabled?: (identity: string) => string | undefined;
  /** Nodes start with a previous run (an hour ago, of their own duration), as a live fleet has. */
  history?: boolean;
  /** How long ago that previous run ended, seconds (default 3600). */
  lastRunAgoS?: number;
  /** The node's puppet.conf runinterval, seconds (default Puppet's 1800). */
  runintervalS?: (identity: string) => number;
}

export interface SimulatedRun {
  identity: string;
  requestId: string;
  /** performance.now() at the run's start and end */
  startedAt: number;
  finishedAt?: number;
}

interface SimNode {
  identity: string;
  disabledMessage: string | null;
  disabled: boolean;
  /** ms epoch it was disabled. */
  disabledAt: number;
  active?: { requestId: string; initiatedAt: number; timer: NodeJS.Timeout };
  lastrun: number;
  lastDurationS: number | null;
  lastRunonce: RunCompleteData | null;
  summary: { total: number; changed: number; failed: number } | null;
  runs: number;
}

export class SimulatedPuppetFleet {
  readonly runs: SimulatedRun[] = [];
  running = 0;
  maxRunning = 0;
  /** Called when a node's run starts (after runonce accepted it). */
  onRunStart?: (identity: string) => void;
  private readonly nodes = new Map<string, SimNode>();

  constructor(readonly opts: SimulatedPuppetOptions) {}

  /** The agent factory to pass to startEmulator (with the other agents), e.g. {...builtin, puppet: fleet.factory}. */
  readonly factory: AgentFactory = (d) => this.agentFor(d.identity);

  disable(identity: string, message: string): void {
    const n = this.node(identity);
    n.disabled = true;
    n.disabledAt = Date.now();
    n.disabledMessage = message;
  }

  enable(identity: string): void {
    const n = this.node(identity);
    n.disabled = false;
    n.disabledMessage = null;
  }

  /** Stop every pending run timer (no events are sent for them). */
  stop(): void {
    for (const n of this.nodes.values()) if (n.active) clearTimeout(n.active.timer);
  }

  private node(identity: string): SimNode {
    let n = this.nodes.get(identity);
    if (!n) {
      const msg = this.opts.disabled?.(identity);
      const history = this.opts.history === true;
      n = {
        identity,
        disabled: msg !== undefined,
        disabledAt: Date.now(),
        disabledMessage: msg ?? null,
        lastrun: history ? Math.floor(Date.now() / 1000) - (this.opts.lastRunAgoS ?? 3600) : 0,
        lastDurationS: history ? this.opts.runMs(identity) / 1000 : null,
        lastRunonce: null,
        summary: history ? { total: 20, changed: 0, failed: 0 } : null,
        runs: 0,
      };
      this.nodes.set(identity, n);
    }
    return n;
  }

  private status(n: SimNode) {
    const since = n.lastrun > 0 ? Math.max(0, Math.round(Date.now() / 1000 - n.lastrun)) : null;
    const applying = n.active !== undefined;
    const status = applying ? "applying a catalog" : n.disabled ? "disabled" : "stopped";
    return {
      applying,
      enabled: !n.disabled,
      daemon_present: false,
      idling: false,
      status,
      lastrun: n.lastrun,
      since_lastrun: since,
      disable_message: n.disabledMessage,
      message: `Currently ${status} (simulated)`,
      last_run_duration: n.lastDurationS,
      last_runonce: n.lastRunonce,
    };
  }

  private agentFor(identity: string) {
    const n = this.node(identity);
    return defineAgent({
      ddl: puppetDDL,
      dataPlugins: [
        {
          name: "puppet",
          description: "simulated Puppet agent state",
          query: () => {
            const s = this.status(n);
            const sum = n.summary;
            return {
              enabled: s.enabled,
              disabled: !s.enabled,
              applying: s.applying,
              idling: s.idling,
              daemon_present: false,
              status: s.status,
              lastrun: s.lastrun,
              since_lastrun: s.since_lastrun ?? -1,
              disable_message: s.disable_message ?? "",
              disabled_message: s.disable_message ?? "",
              disabled_since: n.disabled ? n.disabledAt : 0,
              total_resources: sum?.total ?? 0,
              changed_resources: sum?.changed ?? 0,
              failed_resources: sum?.failed ?? 0,
              total_time: n.lastDurationS ?? 0,
              last_run_status: !sum || n.lastrun <= 0 ? "" : sum.failed > 0 ? "failed" : sum.changed > 0 ? "changed" : "unchanged",
              runinterval: this.opts.runintervalS?.(n.identity) ?? DEFAULT_RUNINTERVAL_S,
            };
          },
        },
      ],
      actions: {
        runonce: (input, ctx) => {
          if (n.disabled) throw new RpcError(Status.Aborted, `Puppet is disabled on ${identity}${n.disabledMessage ? `: ${n.disabledMessage}` : ""}`, { started: false, enabled: false, disable_message: n.disabledMessage });
          if (n.active) throw new RpcError(Status.Aborted, `a Puppet run is already in progress on ${identity}`, { started: false, applying: true });
          const initiatedAt = Date.now();
          const ms = this.opts.runMs(identity);
          const run: SimulatedRun = { identity, requestId: ctx.requestId, startedAt: performance.now() };
          this.runs.push(run);
          this.running++;
          this.maxRunning = Math.max(this.maxRunning, this.running);
          const timer = setTimeout(() => {
            run.finishedAt = performance.now();
            this.running--;
            n.active = undefined;
            n.runs++;
            const r = this.opts.result?.(identity, n.runs) ?? { changed: n.runs === 1 };
            const failed = r.failed === true;
            const changed = r.changed === true;
            n.lastrun = Math.floor(Date.now() / 1000);
            n.lastDurationS = ms / 1000;
            n.summary = { total: 20, changed: changed ? 1 : 0, failed: failed ? 1 : 0 };
            const data: RunCompleteData = {
              requestid: ctx.requestId,
              initiated_at: initiatedAt,
              started_at: initiatedAt,
              finished_at: Date.now(),
              exitcode: failed ? (changed ? 6 : 4) : changed ? 2 : 0,
              success: !failed,
              changed,
              failed,
              noop: input.noop ?? null,
              environment: "production",
              resources: { ...n.summary },
              failed_resources: failed ? ["File[/simulated]"] : [],
              errors: [],
              duration: ms / 1000,
              message: failed ? "1 resource(s) failed: File[/simulated]" : changed ? "changed 1 resource(s)" : "no changes",
            };
            n.lastRunonce = data;
            ctx.emit(RUN_COMPLETE_EVENT, data as unknown as Record<string, unknown>);
          }, ms);
          n.active = { requestId: ctx.requestId, initiatedAt, timer };
          this.onRunStart?.(identity);
          return { started: true, summary: "Puppet run started (simulated)", initiated_at: initiatedAt, splay_seconds: 0 };
        },
        status: () => this.status(n),
        last_run_summary: () => {
          if (!n.summary) throw new RpcError(Status.Aborted, `no last run summary on ${identity}: Puppet has not run here yet`);
          return {
            lastrun: n.lastrun,
            since_lastrun: Math.max(0, Math.round(Date.now() / 1000 - n.lastrun)),
            config_version: String(n.lastrun),
            puppet_version: "simulated",
            environment: "production",
            total_resources: n.summary.total,
            changed_resources: n.summary.changed,
            failed_resources: n.summary.failed,
            out_of_sync_resources: n.summary.changed + n.summary.failed,
            corrected_resources: 0,
            skipped_resources: 0,
            total_time: n.lastDurationS,
            config_retrieval_time: n.lastDurationS === null ? null : n.lastDurationS / 4,
            events: { success: n.summary.changed, failure: n.summary.failed, total: n.summary.changed + n.summary.failed },
            resources: { ...n.summary },
            time: { total: n.lastDurationS ?? 0, last_run: n.lastrun },
          };
        },
        last_run_report: () => {
          if (!n.summary) throw new RpcError(Status.Aborted, `no last run report on ${identity}: Puppet has not run here yet`);
          const failed = n.summary.failed > 0;
          return {
            status: failed ? "failed" : n.summary.changed ? "changed" : "unchanged",
            time: new Date(n.lastrun * 1000).toISOString(),
            environment: "production",
            config_version: String(n.lastrun),
            resources: [
              ...(failed ? [{ resource: "File[/simulated]", status: "failed", messages: ["change from 'absent' to 'file' failed: simulated failure"] }] : []),
              ...(n.summary.changed ? [{ resource: "File[/etc/motd]", status: "changed", messages: ["content changed '{md5}0f0e' to '{md5}a1b2'"] }] : []),
            ],
            resources_left_out: 0,
            logs: failed ? [{ level: "err", source: "/Stage[main]/Main/File[/simulated]/ensure", message: "change from 'absent' to 'file' failed: simulated failure" }] : [],
          };
        },
        enable: () => {
          const changed = n.disabled;
          this.enable(identity);
          return { enabled: true, changed, status: changed ? "Puppet enabled" : "Puppet was already enabled" };
        },
        disable: (input, ctx) => {
          const changed = !n.disabled;
          if (changed) this.disable(identity, input.message?.trim() || `Disabled via muster by ${ctx.caller} at ${new Date().toISOString()}`);
          return { enabled: false, changed, disable_message: n.disabledMessage, status: changed ? `Puppet disabled: ${n.disabledMessage}` : `Puppet was already disabled: ${n.disabledMessage}` };
        },
      },
    });
  }
}

/** Evenly spread run times over [minMs, maxMs] for `count` nodes, shuffled by a seed (deterministic). */
export function spreadRunTimes(count: number, minMs: number, maxMs: number, seed = 1): number[] {
  const times = Array.from({ length: count }, (_, i) => (count === 1 ? minMs : minMs + ((maxMs - minMs) * i) / (count - 1)));
  let s = seed >>> 0 || 1;
  const rand = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0), s / 2 ** 32);
  for (let i = times.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [times[i], times[j]] = [times[j]!, times[i]!];
  }
  return times;
}
