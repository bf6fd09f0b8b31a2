import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { ProvisionDDL } from "../ddl.js";
import { asRpcError, puppetTarget, type ProvisionRuntime } from "../state.js";

/** Start `puppet agent` as a daemon with the node's settings. */
export function daemonizePuppet(rt: ProvisionRuntime): ActionHandler<ActionInput<ProvisionDDL, "daemonize_puppet">> {
  return async (_input, ctx) => {
    const s = rt.settings(ctx);
    rt.ensureEnabled(s);
    try {
      const r = await rt.ops.puppetDaemonize(puppetTarget(s));
      ctx.log.info({ pid: r.pid, alreadyRunning: r.alreadyRunning }, "puppet agent daemon");
      return { pid: r.pid, already_running: r.alreadyRunning };
    } catch (e) {
      throw asRpcError(e);
    }
  };
}
