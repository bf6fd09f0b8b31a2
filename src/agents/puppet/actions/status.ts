import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { PuppetDDL } from "../ddl.js";
import { readStatus, type PuppetRuntime } from "../runtime.js";

export function status(rt: PuppetRuntime): ActionHandler<ActionInput<PuppetDDL, "status">> {
  return async (_input, ctx) => {
    const { applying_pid: _pid, summary: _summary, ...st } = await readStatus(rt, rt.settings(ctx));
    return { ...st };
  };
}
