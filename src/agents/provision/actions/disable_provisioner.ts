import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { ProvisionDDL } from "../ddl.js";
import { asRpcError, writeDisabled, type ProvisionRuntime } from "../state.js";

/** Mark the node provisioned. The agent stops offering itself (isActive() false). */
export function disableProvisioner(rt: ProvisionRuntime): ActionHandler<ActionInput<ProvisionDDL, "disable_provisioner">> {
  return (input, ctx) => {
    const s = rt.settings(ctx);
    try {
      writeDisabled(s.disableFile, { since: rt.now(), reason: input.reason ?? null, caller: ctx.caller });
    } catch (e) {
      throw asRpcError(e);
    }
    ctx.log.info({ file: s.disableFile }, "provisioning disabled");
    ctx.emit("disabled", { disable_file: s.disableFile });
    // Last: on the onProvisioned hook a node under provisioning isolation switches to its
    // production credential (the server lets this request finish first).
    rt.markDisabled();
    return { disabled: true, disable_file: s.disableFile };
  };
}
