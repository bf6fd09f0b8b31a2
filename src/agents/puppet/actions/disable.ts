import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { PuppetDDL } from "../ddl.js";
import { puppetState, type PuppetRuntime } from "../runtime.js";
import { puppetAgentFor } from "../settings.js";

/** Write Puppet's disable lock; an agent already disabled keeps its lock and message. */
export function disable(rt: PuppetRuntime): ActionHandler<ActionInput<PuppetDDL, "disable">> {
  return async (input, ctx) => {
    const settings = rt.settings(ctx);
    const agent = puppetAgentFor(settings);
    const message = input.message?.trim() || `Disabled via muster by ${ctx.caller} at ${new Date(rt.now()).toISOString()}`;
    const { changed } = await rt.ops.puppetDisable({ agent: "puppet", settings: agent.settings }, message);
    const current = (await puppetState(rt, settings).disabled()).message;
    ctx.log.info({ caller: ctx.caller, changed, message: current }, "puppet disabled");
    return {
      enabled: false,
      changed,
      disable_message: current,
      status: changed ? `Puppet disabled: ${current ?? ""}` : `Puppet was already disabled${current ? `: ${current}` : ""}`,
    };
  };
}
