import type { ActionContext } from "../../agent/agent.js";
import { lastRunSummaryOf, parseDisabled, runLockPid, type DisabledState, type LastRunSummary } from "../../puppet/state.js";
import type { RunCompleteData } from "./ddl.js";
import { puppetAgentFor, resolveSettings, type PuppetSettings } from "./settings.js";
import type { NodeOps } from "../../agent/node-ops.js";
import { directOps } from "../../puppet/node-ops.js";

// State one puppet agent instance owns: the latest settings, the run it started (if any) and that
// run's result. Nothing here is module-level: createPuppetAgent() makes one PuppetRuntime.

export interface ActiveRun {
  requestId: string;
  initiatedAt: number;
  phase: "splay" | "running";
  abort: AbortController;
  done: Promise<void>;
}

export interface PuppetRuntime {
  now(): number;
  /** What needs root, in process or through the privileged helper. */
  readonly ops: NodeOps;
  random(): number;
  /** Settings for this request (ctx.config over the agent's own), remembered for the data plugin. */
  settings(ctx: ActionContext): PuppetSettings;
  /** The latest settings seen, undefined when they do not resolve. */
  known(): PuppetSettings | undefined;
  active: ActiveRun | undefined;
  lastRunonce: RunCompleteData | undefined;
}

export function createRuntime(deps: { config?: Record<string, unknown>; identity?: string; now?: () => number; random?: () => number; ops?: NodeOps }): PuppetRuntime {
  let config: Record<string, unknown> = { ...(deps.config ?? {}) };
  let identity = deps.identity ?? "localhost";
  return {
    now: deps.now ?? Date.now,
    ops: deps.ops ?? directOps(),
    random: deps.random ?? Math.random,
    settings(ctx) {
      config = { ...(deps.config ?? {}), ...ctx.config };
      identity = ctx.identity;
      return resolveSettings(config, identity);
    },
    known() {
      try {
        return resolveSettings(config, identity);
      } catch {
        return undefined;
      }
    },
    active: undefined,
    lastRunonce: undefined,
  };
}

export interface AgentStatus {
  applying: boolean;
  enabled: boolean;
  daemon_present: boolean;
  idling: boolean;
  status: "disabled" | "applying a catalog" | "splaying" | "idling" | "stopped";
  lastrun: number;
  since_lastrun: number | null;
  disable_message: string | null;
  message: string;
  last_run_duration: number | null;
  last_runonce: RunCompleteData | null;
  /** pid applying the catalog, when Puppet's run lock names one */
  applying_pid: number | null;
}

/** Puppet's state files, read as the daemon may, or by root through the privileged helper. */
export function puppetState(rt: PuppetRuntime, s: PuppetSettings) {
  const t = { agent: "puppet" as const, settings: puppetAgentFor(s).settings };
  return {
    disabled: async (): Promise<DisabledState> => parseDisabled(await rt.ops.readPuppetState(t, "disabled_lock")),
    runPid: async (): Promise<number | undefined> => runLockPid(await rt.ops.readPuppetState(t, "run_lock")),
    summary: async (): Promise<LastRunSummary | undefined> => lastRunSummaryOf(await rt.ops.readPuppetState(t, "last_run_summary")),
  };
}

/** The agent's state from Puppet's files and this instance's own run. */
export async function readStatus(rt: PuppetRuntime, s: PuppetSettings): Promise<AgentStatus & { summary: LastRunSummary | undefined }> {
  const agent = puppetAgentFor(s);
  const state = puppetState(rt, s);
  const [disabled, pid, summary] = await Promise.all([state.disabled(), state.runPid(), state.summary()]);
  const splaying = rt.active?.phase === "splay";
  const applying = pid !== undefined || rt.active?.phase === "running";
  const daemon = agent.daemonPid() !== undefined;
  const lastrun = summary?.lastrun ?? 0;
  const since = lastrun > 0 ? Math.max(0, Math.round(rt.now() / 1000 - lastrun)) : null;
  const status = !disabled.disabled ? (applying ? "applying a catalog" : splaying ? "splaying" : daemon ? "idling" : "stopped") : applying ? "applying a catalog" : "disabled";
  return {
    applying,
    enabled: !disabled.disabled,
    daemon_present: daemon,
    idling: daemon && !applying,
    status,
    lastrun,
    since_lastrun: since,
    disable_message: disabled.message,
    message: `Currently ${status}; ${since === null ? "no run recorded" : `last completed run ${ago(since)} ago`}`,
    last_run_duration: summary?.time.total !== undefined ? Math.round(summary.time.total * 1000) / 1000 : null,
    last_runonce: rt.lastRunonce ?? null,
    applying_pid: pid ?? null,
    summary,
  };
}

export function ago(seconds: number): string {
  if (seconds < 60) return `${seconds} seconds`;
  const m = Math.floor(seconds / 60);
  if (m < 60) return `${m} minutes ${seconds % 60} seconds`;
  const h = Math.floor(m / 60);
  return h < 48 ? `${h} hours ${m % 60} minutes` : `${Math.floor(h / 24)} days ${h % 24} hours`;
}
