import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { ProvisionDDL } from "../ddl.js";
import { asRpcError, puppetTarget, type ProvisionRuntime } from "../state.js";

/** Submit a CSR made by the real agent; the reply's fingerprint is what the CA must see. */
export function requestCertificate(rt: ProvisionRuntime): ActionHandler<ActionInput<ProvisionDDL, "request_certificate">> {
  return async (_input, ctx) => {
    const s = rt.settings(ctx);
    rt.ensureEnabled(s);
    try {
      const r = await rt.ops.requestCertificate(puppetTarget(s), { signal: ctx.signal, ...(ctx.nodeKey ? { nodeKey: ctx.nodeKey } : {}) }); // the CSR names the node key (docs/security.md)
      ctx.log.info({ certname: r.certname, fingerprint: r.fingerprint, submitted: r.submitted }, "certificate requested");
      return { certname: r.certname, fingerprint: r.fingerprint, submitted: r.submitted };
    } catch (e) {
      throw asRpcError(e);
    }
  };
}
