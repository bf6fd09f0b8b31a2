import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { ProvisionDDL } from "../ddl.js";
import { puppetRun } from "../run.js";
import type { ProvisionRuntime } from "../state.js";

/** One run in the production environment, the stage fact set to "production". */
export function runPuppet(rt: ProvisionRuntime): ActionHandler<ActionInput<ProvisionDDL, "run_puppet">> {
  return (input, ctx) => puppetRun(rt, ctx, "production", input.noop);
}
