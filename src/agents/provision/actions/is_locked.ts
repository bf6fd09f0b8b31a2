import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { ProvisionDDL } from "../ddl.js";
import { readLock, type ProvisionRuntime } from "../state.js";

/** The deploy lock's holder; an expired lock reads as free. */
export function isLocked(rt: ProvisionRuntime): ActionHandler<ActionInput<ProvisionDDL, "is_locked">> {
  return (_input, ctx) => {
    const held = readLock(rt.settings(ctx).lockFile);
    if (!held || held.expires <= rt.now()) return { locked: false, owner: null, expires: null };
    return { locked: true, owner: held.owner, expires: held.expires };
  };
}
