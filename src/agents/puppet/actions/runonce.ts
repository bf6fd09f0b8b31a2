import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { PuppetDDL } from "../ddl.js";
import { startRun } from "../run.js";
import type { PuppetRuntime } from "../runtime.js";

/** Start a run in the background; the reply says it started, run_complete says how it ended. */
export function runonce(rt: PuppetRuntime): ActionHandler<ActionInput<PuppetDDL, "runonce">> {
  return (input, ctx) => startRun(rt, ctx, input);
}
