import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { PuppetcaDDL } from "../ddl.js";
import { caFor, caRpcError, certReply, type PuppetcaDeps } from "../settings.js";

/** Sign only the CSR the node itself made (fingerprint) and that asks for no extra privileges. */
export function sign(deps: PuppetcaDeps): ActionHandler<ActionInput<PuppetcaDDL, "sign">> {
  return async (input, ctx) => {
    try {
      const c = await caFor({ ...deps.config, ...ctx.config }, ctx.identity).sign(input.certname, input.fingerprint, input.node_key);
      ctx.log.info({ certname: input.certname, fingerprint: c.fingerprint }, "certificate signed");
      return certReply(input.certname, c);
    } catch (e) {
      const err = caRpcError(e);
      ctx.log.warn({ certname: input.certname, reason: err.data.reason }, `not signed: ${err.message}`);
      throw err;
    }
  };
}
