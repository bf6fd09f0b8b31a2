import { RpcError } from "../../../errors.js";
import { Status } from "../../../protocol/status.js";
import { puppetStatePaths } from "../../../puppet/state.js";
import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { PuppetDDL } from "../ddl.js";
import { puppetState, type PuppetRuntime } from "../runtime.js";
import { puppetAgentFor } from "../settings.js";

/** Puppet's own last_run_summary.yaml, with MCollective's field names. */
export function lastRunSummary(rt: PuppetRuntime): ActionHandler<ActionInput<PuppetDDL, "last_run_summary">> {
  return async (_input, ctx) => {
    const settings = rt.settings(ctx);
    const path = puppetStatePaths(puppetAgentFor(settings)).lastRunSummary;
    const s = await puppetState(rt, settings).summary();
    if (!s) throw new RpcError(Status.Aborted, `no last run summary on ${ctx.identity} (${path} is missing or unreadable): Puppet has not run here yet`);
    const r = s.resources;
    return {
      lastrun: s.lastrun,
      since_lastrun: s.lastrun > 0 ? Math.max(0, Math.round(rt.now() / 1000 - s.lastrun)) : null,
      config_version: s.version.config,
      puppet_version: s.version.puppet,
      environment: s.environment,
      total_resources: r.total ?? 0,
      changed_resources: r.changed ?? 0,
      failed_resources: r.failed ?? 0,
      out_of_sync_resources: r.out_of_sync ?? 0,
      corrected_resources: r.corrective_change ?? 0,
      skipped_resources: r.skipped ?? 0,
      total_time: s.time.total ?? null,
      config_retrieval_time: s.time.config_retrieval ?? null,
      events: s.events,
      resources: r,
      time: s.time,
    };
  };
}
