import { checkOutputs } from "../ddl/outputs.js";
import type { AgentDDL, ActionName, ActionOutput, CallInput } from "../ddl/types.js";
import { Status } from "../protocol/status.js";
import type { Reply } from "../protocol/types.js";
import type { CallOptions, RpcResult } from "./types.js";

// The typed view of one agent (MusterClient.agent): inputs and action names checked at compile
// time and against the DDL, outputs checked as they arrive.

/**
 * A reply whose data was checked against the action's DDL outputs. A node answering OK with an
 * output of the wrong type gets statuscode 5 (Unknown error) and a statusmsg naming the output;
 * the offending outputs are left out of `data`.
 */
export type TypedReply<D extends AgentDDL, A extends ActionName<D>> = Omit<Reply, "data"> & { data: ActionOutput<D, A> };

export interface TypedRpcResult<D extends AgentDDL, A extends ActionName<D>> extends Omit<RpcResult, "replies"> {
  replies: TypedReply<D, A>[];
}

export interface TypedAgentClient<D extends AgentDDL> {
  call<A extends ActionName<D>>(action: A, input: CallInput<D, A>, opts?: Omit<CallOptions, "ddl" | "onReply"> & { onReply?: (r: TypedReply<D, A>) => void }): Promise<TypedRpcResult<D, A>>;
}

function typedReply(ddl: AgentDDL, r: Reply): Reply {
  const { data, problems } = checkOutputs(ddl, r.action, r.data);
  if (problems.length === 0) return { ...r, data };
  const what = `the reply does not match the ${ddl.metadata.name} DDL: ${problems.join("; ")}`;
  return { ...r, data, ...(r.statuscode === Status.OK ? { statuscode: Status.UnknownError, statusmsg: what } : { statusmsg: `${r.statusmsg} (and ${what})` }) };
}

/** What typedAgent needs of the client: its untyped call. */
interface Caller {
  call(agent: string, action: string, data: Record<string, unknown>, opts?: CallOptions): Promise<RpcResult>;
}

/** The typed view of agent `name` (its DDL `ddl`) over `client`'s calls. */
export function typedAgent<const D extends AgentDDL>(client: Caller, ddl: D, name: string): TypedAgentClient<D> {
  return {
    call: async (action, input, opts = {}) => {
      const typed = new WeakMap<Reply, Reply>();
      const check = (r: Reply) => {
        let t = typed.get(r);
        if (!t) typed.set(r, (t = typedReply(ddl, r)));
        return t;
      };
      const { onReply } = opts;
      const res = await client.call(name, action, input as Record<string, unknown>, { ...opts, ddl, onReply: onReply && ((r) => onReply(check(r) as TypedReply<D, typeof action>)) });
      const replies = res.replies.map(check);
      const ok = replies.filter((r) => r.statuscode === Status.OK).length;
      return { ...res, replies: replies as TypedReply<D, typeof action>[], stats: { ...res.stats, ok, failed: replies.length - ok } };
    },
  };
}
