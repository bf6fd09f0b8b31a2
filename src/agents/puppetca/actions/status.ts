import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { PuppetcaDDL } from "../ddl.js";
import { caFor, caRpcError, certReply, type PuppetcaDeps } from "../settings.js";

export function status(deps: PuppetcaDeps): ActionHandler<ActionInput<PuppetcaDDL, "status">> {
  return async (input, ctx) => {
    try {
      return certReply(input.certname, await caFor({ ...deps.config, ...ctx.config }, ctx.identity).status(input.certname));
    } catch (e) {
      throw caRpcError(e);
    }
  };
}
