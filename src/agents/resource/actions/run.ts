import type { ActionContext } from "../../../agent/agent.js";
import { MusterError, RpcError } from "../../../errors.js";
import { Status } from "../../../protocol/status.js";
import { puppetResource, type PuppetResourceResult } from "../../../puppet/resource.js";
import type { ResourceSettings } from "../settings.js";

/** One puppet resource call with the node's settings; failures to run puppet become Aborted/UnknownError replies. */
export async function runPuppetResource(s: ResourceSettings, ctx: ActionContext, type: string, name: string, params: [string, string][]): Promise<PuppetResourceResult> {
  try {
    return await puppetResource({ puppetBin: s.puppetBin, confdir: s.confdir, vardir: s.vardir }, type, name, params, { signal: ctx.signal, timeoutMs: s.timeoutMs });
  } catch (e) {
    if (e instanceof RpcError) throw e;
    if (e instanceof MusterError) throw new RpcError(e.code === "MUSTER_INPUT_INVALID" ? Status.InvalidData : Status.Aborted, e.message, { type, name });
    throw new RpcError(Status.UnknownError, e instanceof Error ? e.message : String(e), { type, name });
  }
}
