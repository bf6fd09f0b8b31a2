import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { ProvisionDDL } from "../ddl.js";
import { readDisabled, type ProvisionRuntime } from "../state.js";

export function isDisabled(rt: ProvisionRuntime): ActionHandler<ActionInput<ProvisionDDL, "is_disabled">> {
  return (_input, ctx) => {
    const d = readDisabled(rt.settings(ctx).disableFile);
    return { disabled: d !== undefined, since: d?.since ?? null, reason: d?.reason ?? null };
  };
}
