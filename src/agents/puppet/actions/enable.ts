import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { PuppetDDL } from "../ddl.js";
import type { PuppetRuntime } from "../runtime.js";
import { puppetAgentFor } from "../settings.js";

/** Remove Puppet's disable lock; idempotent. */
export function enable(rt: PuppetRuntime): ActionHandler<ActionInput<PuppetDDL, "enable">> {
  return async (_input, ctx) => {
    const { changed } = await rt.ops.puppetEnable({ agent: "puppet", settings: puppetAgentFor(rt.settings(ctx)).settings });
    ctx.log.info({ caller: ctx.caller, changed }, "puppet enabled");
    return { enabled: true, changed, status: changed ? "Puppet enabled" : "Puppet was already enabled" };
  };
}
