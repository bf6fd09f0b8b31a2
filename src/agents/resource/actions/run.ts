import type { ActionContext } from "../../../agent/agent.js";
import { MusterError, RpcError } from "../../../errors.js";
import { Status } from "../../../protocol/status.js";
import type { PuppetResourceResult } from "../../../puppet/resource.js";
import type { NodeOps } from "../../../agent/node-ops.js";
import { directOps } from "../../../puppet/node-ops.js";
import type { ResourceSettings } from "../settings.js";

/** What createResourceAgent is given (agent.ts), and its actions with it. */
export interface ResourceDeps {
  /** `plugins.resource` settings; ctx.config overlays them per request. */
  config?: Record<string, unknown>;
  /** Runs `puppet resource`: in process, or through the privileged helper (which checks again). */
  ops?: NodeOps;
}

/** One puppet resource call with the node's settings; failures to run puppet become Aborted/UnknownError replies. */
export async function runPuppetResource(ops: NodeOps | undefined, s: ResourceSettings, ctx: ActionContext, type: string, name: string, params: [string, string][]): Promise<PuppetResourceResult> {
  try {
    return await (ops ?? directOps()).puppetResource({ puppetBin: s.puppetBin, confdir: s.confdir, vardir: s.vardir, type, name, properties: params, signal: ctx.signal, timeoutMs: s.timeoutMs });
  } catch (e) {
    if (e instanceof RpcError) throw e;
    if (e instanceof MusterError) throw new RpcError(e.code === "MUSTER_INPUT_INVALID" ? Status.InvalidData : Status.Aborted, e.message, { type, name, ...(e.code === "MUSTER_PRIVILEGED_REFUSED" ? { reason: "refused_by_helper" } : {}) });
    throw new RpcError(Status.UnknownError, e instanceof Error ? e.message : String(e), { type, name });
  }
}
