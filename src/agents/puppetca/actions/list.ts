import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { PuppetcaDDL } from "../ddl.js";
import { caFor, caRpcError, certReply, type PuppetcaDeps } from "../settings.js";

export function list(deps: PuppetcaDeps): ActionHandler<ActionInput<PuppetcaDDL, "list">> {
  return async (_input, ctx) => {
    try {
      const l = await caFor({ ...deps.config, ...ctx.config }, ctx.identity).list();
      const shape = (c: (typeof l.requests)[number]) => {
        const { certname, ...rest } = certReply(c.name, c);
        return { name: certname, ...rest };
      };
      return { requests: l.requests.map(shape), signed: l.signed.map(shape), revoked: l.revoked.map(shape) };
    } catch (e) {
      throw caRpcError(e);
    }
  };
}
