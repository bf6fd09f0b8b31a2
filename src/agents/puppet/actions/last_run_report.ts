import { RpcError } from "../../../errors.js";
import { Status } from "../../../protocol/status.js";
import { puppetStatePaths } from "../../../puppet/state.js";
import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { PuppetDDL } from "../ddl.js";
import type { PuppetRuntime } from "../runtime.js";
import { puppetAgentFor } from "../settings.js";

/** Puppet's own last_run_report.yaml: the changed and failed resources with their messages (the web console's node page). */
export function lastRunReport(rt: PuppetRuntime): ActionHandler<ActionInput<PuppetDDL, "last_run_report">> {
  return async (_input, ctx) => {
    const agent = puppetAgentFor(rt.settings(ctx));
    const path = puppetStatePaths(agent).lastRunReport;
    const r = await rt.ops.lastRunReport({ agent: "puppet", settings: agent.settings });
    if (!r) throw new RpcError(Status.Aborted, `no last run report on ${ctx.identity} (${path} is missing, unreadable or too large): Puppet has not run here yet`);
    return { status: r.status ?? null, time: r.time ?? null, environment: r.environment ?? null, config_version: r.config_version ?? null, resources: r.resources, resources_left_out: r.resources_left_out, logs: r.logs };
  };
}
