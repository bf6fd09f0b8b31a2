import type { ActionInput } from "../../ddl/types.js";
import { RpcError } from "../../errors.js";
import { Status } from "../../protocol/status.js";
import { exportedFacts, type PuppetAgent, type PuppetRunResult } from "../../puppet/index.js";
import type { ActionContext, ReplyData } from "../../agent/agent.js";
import { RUN_COMPLETE_EVENT, type PuppetDDL, type RunCompleteData } from "./ddl.js";
import { puppetState, type ActiveRun, type PuppetRuntime } from "./runtime.js";
import { puppetAgentFor, type PuppetSettings } from "./settings.js";

// runonce: checks, then a run in the background. The reply goes out as soon as the run is on its
// way; when it ends (or cannot start) the agent publishes run_complete with the result, so callers
// such as `muster puppet runall` learn of it without polling.

type RunonceInput = ActionInput<PuppetDDL, "runonce">;

export async function startRun(rt: PuppetRuntime, ctx: ActionContext, input: RunonceInput): Promise<ReplyData> {
  const s = rt.settings(ctx);
  if (input.server !== undefined && !s.allowServerOverride) {
    throw new RpcError(Status.Aborted, `${ctx.identity} does not let runonce choose the master (asked for ${input.server}); set plugins.puppet.allow_server_override: true in its server config to allow it`, {
      started: false,
    });
  }
  const agent = puppetAgentFor(s);
  const state = puppetState(rt, s);
  const disabled = await state.disabled();
  if (disabled.disabled) {
    throw new RpcError(Status.Aborted, `Puppet is disabled on ${ctx.identity}${disabled.message ? `: ${disabled.message}` : ""}`, { started: false, enabled: false, disable_message: disabled.message });
  }
  if (rt.active) {
    const what = rt.active.phase === "splay" ? "waiting out its splay" : "in progress";
    throw new RpcError(Status.Aborted, `a Puppet run is already ${what} on ${ctx.identity} (started ${new Date(rt.active.initiatedAt).toISOString()})`, { started: false, applying: true });
  }
  const pid = await state.runPid();
  // the awaits above let another runonce in: the check on rt.active must be the last before the claim
  if (rt.active) throw new RpcError(Status.Aborted, `a Puppet run is already in progress on ${ctx.identity}`, { started: false, applying: true });
  if (pid !== undefined) throw new RpcError(Status.Aborted, `Puppet is already applying a catalog on ${ctx.identity} (pid ${pid})`, { started: false, applying: true });

  const splaySeconds = !input.force && (input.splay ?? s.splay) ? Math.round(rt.random() * (input.splaylimit ?? s.splaylimitSeconds) * 1000) / 1000 : 0;
  const initiatedAt = rt.now();
  const run: ActiveRun = { requestId: ctx.requestId, initiatedAt, phase: splaySeconds > 0 ? "splay" : "running", abort: new AbortController(), done: Promise.resolve() };
  rt.active = run;
  run.done = execute(rt, ctx, agent, s, input, run, splaySeconds).catch((e: unknown) => ctx.log.error({ err: e }, "puppet run bookkeeping failed"));
  ctx.log.info({ caller: ctx.caller, splay: splaySeconds, noop: input.noop, environment: input.environment, tags: input.tags }, "puppet run started");
  return {
    started: true,
    summary: splaySeconds > 0 ? `Puppet run starts in ${splaySeconds.toFixed(1)} s (splay)` : "Puppet run started",
    initiated_at: initiatedAt,
    splay_seconds: splaySeconds,
  };
}

async function execute(rt: PuppetRuntime, ctx: ActionContext, agent: PuppetAgent, s: PuppetSettings, input: RunonceInput, run: ActiveRun, splaySeconds: number): Promise<void> {
  const target = { agent: "puppet" as const, settings: agent.settings };
  let startedAt = rt.now();
  let data: RunCompleteData;
  const environment = input.environment ?? s.environment;
  try {
    if (splaySeconds > 0) await sleep(splaySeconds * 1000, run.abort.signal);
    run.phase = "running";
    startedAt = rt.now();
    const r = await rt.ops.puppetRun(target, {
      ...(input.server !== undefined ? { server: input.server } : {}),
      ...(environment !== undefined ? { environment } : {}),
      ...(input.noop !== undefined ? { noop: input.noop } : {}),
      ...(input.tags ? { tags: input.tags.split(",") } : {}),
      facts: { ...exportedFacts(s.exportFacts, ctx.metadata().facts), ...s.extraFacts },
      signal: run.abort.signal,
      timeoutMs: s.runTimeoutSeconds * 1000,
    });
    data = completeData(run, startedAt, rt.now(), input.noop ?? null, r);
  } catch (e) {
    const finishedAt = rt.now();
    data = {
      requestid: run.requestId,
      initiated_at: run.initiatedAt,
      started_at: startedAt,
      finished_at: finishedAt,
      exitcode: -1,
      success: false,
      changed: false,
      failed: true,
      noop: input.noop ?? null,
      environment: environment ?? null,
      resources: {},
      failed_resources: [],
      errors: [(e as Error).message],
      duration: (finishedAt - startedAt) / 1000,
      message: `the run did not complete: ${(e as Error).message}`.slice(0, 1000),
    };
  }
  // The run rewrote Puppet's classes file: whoever reacts to the event may discover by class.
  await ctx.refreshMetadata?.().catch((e: unknown) => ctx.log.warn({ err: (e as Error).message }, "cannot refresh metadata after the run"));
  // Forget the run before telling anyone: whoever reacts to the event may start the next one.
  if (rt.active === run) rt.active = undefined;
  rt.lastRunonce = data;
  ctx.log.info({ exitcode: data.exitcode, changed: data.changed, failed: data.failed, duration: data.duration }, "puppet run finished");
  try {
    ctx.emit(RUN_COMPLETE_EVENT, data as unknown as Record<string, unknown>);
  } catch (e) {
    ctx.log.warn({ err: (e as Error).message }, "could not publish run_complete");
  }
}

function completeData(run: ActiveRun, startedAt: number, finishedAt: number, noop: boolean | null, r: PuppetRunResult): RunCompleteData {
  const failedNames = r.failedResources.map((f) => f.resource);
  const message = r.success
    ? r.changed
      ? `changed ${r.resources.changed ?? "some"} resource(s)`
      : "no changes"
    : r.retryable
      ? "another Puppet run held the lock"
      : r.disabled
        ? "Puppet is administratively disabled"
        : failedNames.length
          ? `${failedNames.length} resource(s) failed: ${failedNames.slice(0, 5).join(", ")}`
          : `run failed (exit ${r.exitcode})${r.errors[0] ? `: ${r.errors[0]}` : ""}`;
  return {
    requestid: run.requestId,
    initiated_at: run.initiatedAt,
    started_at: startedAt,
    finished_at: finishedAt,
    exitcode: r.exitcode,
    success: r.success,
    changed: r.changed,
    failed: !r.success,
    noop,
    environment: r.environment ?? null,
    resources: r.resources,
    failed_resources: failedNames.slice(0, 50),
    errors: r.errors.slice(0, 10).map((e) => e.slice(0, 500)),
    duration: Math.round(r.durationMs) / 1000,
    message: message.slice(0, 1000),
  };
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms); // splay: a requested wait
    signal.addEventListener("abort", () => (clearTimeout(t), reject(new Error("cancelled during splay"))), { once: true });
  });
}
