import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { ProvisionDDL } from "../ddl.js";
import { puppetRun } from "../run.js";
import type { ProvisionRuntime } from "../state.js";

/** One run in the bootstrap environment, the stage fact set to "bootstrap". */
export function bootstrapPuppet(rt: ProvisionRuntime): ActionHandler<ActionInput<ProvisionDDL, "bootstrap_puppet">> {
  return (input, ctx) => puppetRun(rt, ctx, "bootstrap", input.noop);
}
