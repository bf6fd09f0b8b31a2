import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { ProvisionDDL } from "../ddl.js";
import { asRpcError, puppetAgentFor, puppetTarget, type ProvisionRuntime } from "../state.js";

/** Whether the node holds its certificate; fetches it when our CSR may have been signed. */
export function hasCert(rt: ProvisionRuntime): ActionHandler<ActionInput<ProvisionDDL, "has_cert">> {
  return async (_input, ctx) => {
    const s = rt.settings(ctx);
    try {
      const r = await rt.ops.certStatus(puppetTarget(s), { download: true, signal: ctx.signal });
      return { has_cert: r.hasCert, certname: puppetAgentFor(s).certname, fingerprint: r.hasCert ? (r.certFingerprint ?? null) : null };
    } catch (e) {
      throw asRpcError(e);
    }
  };
}
