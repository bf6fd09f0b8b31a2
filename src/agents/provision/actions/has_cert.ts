import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import type { ProvisionDDL } from "../ddl.js";
import { asRpcError, puppetAgentFor, type ProvisionRuntime } from "../state.js";

/** Whether the node holds its certificate; fetches it when our CSR may have been signed. */
export function hasCert(rt: ProvisionRuntime): ActionHandler<ActionInput<ProvisionDDL, "has_cert">> {
  return async (_input, ctx) => {
    const s = rt.settings(ctx);
    const agent = puppetAgentFor(s);
    try {
      let has = agent.hasCert();
      if (!has && agent.csrFingerprint() !== undefined) has = await agent.downloadCert({ signal: ctx.signal, timeoutMs: 120_000 });
      return { has_cert: has, certname: agent.certname, fingerprint: has ? (agent.certFingerprint() ?? null) : null };
    } catch (e) {
      throw asRpcError(e);
    }
  };
}
