import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { PuppetcaDDL } from "../ddl.js";
import { caFor, caRpcError, type PuppetcaDeps } from "../settings.js";

export function clean(deps: PuppetcaDeps): ActionHandler<ActionInput<PuppetcaDDL, "clean">> {
  return async (input, ctx) => {
    try {
      const r = await caFor({ ...deps.config, ...ctx.config }, ctx.identity).clean(input.certname);
      ctx.log.info({ certname: input.certname, cleaned: r.cleaned, revoked: r.revoked }, "certificate cleaned");
      return { certname: r.certname, cleaned: r.cleaned, revoked: r.revoked, previous_state: r.previousState ?? null };
    } catch (e) {
      throw caRpcError(e);
    }
  };
}
