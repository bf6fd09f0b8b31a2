import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { PuppetcaDDL } from "../ddl.js";
import { caFor, caRpcError, type PuppetcaDeps } from "../settings.js";

/** Revoke without deleting: the CA keeps the certificate, listed as revoked, for the record. */
export function revoke(deps: PuppetcaDeps): ActionHandler<ActionInput<PuppetcaDDL, "revoke">> {
  return async (input, ctx) => {
    try {
      const r = await caFor({ ...deps.config, ...ctx.config }, ctx.identity).revoke(input.certname);
      if (r.revoked) ctx.log.info({ certname: input.certname, serial: r.serial }, "certificate revoked");
      return { certname: r.certname, revoked: r.revoked, previous_state: r.previousState ?? null, serial: r.serial ?? null };
    } catch (e) {
      throw caRpcError(e);
    }
  };
}
