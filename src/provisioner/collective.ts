import type { ActionName, ActionOutput, AgentDDL, CallInput } from "../ddl/types.js";
import type { NodeKeyEntry } from "../protocol/node-keys.js";
import { Status } from "../protocol/status.js";
import type { Filter } from "../protocol/types.js";
import { StepError } from "./steps.js";

// The engine's only window on the collective: everything the provisioner asks of nodes, masters
// and notifiers, and the startup events it listens to. Every call goes through an agent's DDL
// (the typed client): action names, inputs and outputs are checked at compile time and on the
// wire. src/provisioner/muster-collective.ts implements it with the client API.

/** Each role's nodes may live in their own collective (waiting nodes in `provisioning`). */
export type Role = "target" | "master" | "notify";

/** An agent as the provisioner calls it: its DDL, and the name it is installed under (the config's `target.agent`, `master.agent`, `notify.agent`). */
export interface AgentRef<D extends AgentDDL> {
  ddl: D;
  name: string;
}

/** One node's answer to an action (the fields of a reply the engine reads). */
export interface ActionReply<T = Record<string, unknown>> {
  sender: string;
  statuscode: number;
  statusmsg: string;
  data: T;
  /** The key that signed the reply, when it carries a valid signature by that key. */
  signedBy?: string;
}

export interface CallOptions {
  nodes: string[];
  timeoutMs: number;
  signal?: AbortSignal;
}

/** A node announcing it started (`muster.lifecycle.startup.*`). */
export interface StartupEvent {
  identity: string;
  /** The collectives the node joined, when it says. */
  collectives?: string[];
  /** When the node sent it (ms). */
  time?: number;
  /** The key that signed the event, when it carries a valid signature by that key. */
  signedBy?: string;
}

export interface Collective {
  /** The collective a role's nodes are in. */
  collectiveOf(role: Role): string;
  discover(role: Role, filter: Filter, timeoutMs: number): Promise<string[]>;
  /** An action on known nodes; resolves with the replies that came (a lost one is simply absent). */
  call<D extends AgentDDL, A extends ActionName<D>>(role: Role, agent: AgentRef<D>, action: A, input: CallInput<D, A>, opts: CallOptions): Promise<ActionReply<ActionOutput<D, A>>[]>;
  /** Startup events until the returned function is called. Garbled events never reach `handler`. */
  onStartup(handler: (ev: StartupEvent) => void): () => void;
  /** Vouch for a node's key in the node-key directory clients verify replies against (protocol/node-keys.ts). */
  publishNodeKey?(entry: NodeKeyEntry): Promise<void>;
}

export interface CallOneOptions {
  timeoutMs: number;
  signal?: AbortSignal;
  /** Checks the reply before its status (whose key signed it); throws to refuse it. */
  check?(reply: ActionReply): void;
  /** A failure the caller expects (a release while stopping): not logged. */
  onFailed?(reply: ActionReply): void;
}

/** One action on one node: its data, or a StepError saying what went wrong (no reply, refused, failed). */
export async function callOne<D extends AgentDDL, A extends ActionName<D>>(collective: Collective, role: Role, agent: AgentRef<D>, action: A, input: CallInput<D, A>, id: string, o: CallOneOptions): Promise<ActionOutput<D, A>> {
  const what = `${agent.name}#${action}`;
  let replies: ActionReply<ActionOutput<D, A>>[];
  try {
    replies = await collective.call(role, agent, action, input, { nodes: [id], timeoutMs: o.timeoutMs, signal: o.signal });
  } catch (e) {
    throw new StepError(`${what} on ${id}: ${(e as Error).message}`);
  }
  const r = replies[0];
  if (!r) throw new StepError(`${what}: no reply from ${id} within ${Math.round(o.timeoutMs / 1000)}s`);
  o.check?.(r as ActionReply);
  if (r.statuscode !== Status.OK) {
    const data = r.data as Record<string, unknown>;
    const failed = Array.isArray(data.failed_resources) && data.failed_resources.length ? ` (failed: ${(data.failed_resources as unknown[]).slice(0, 5).map(String).join(", ")})` : "";
    o.onFailed?.(r as ActionReply);
    throw new StepError(`${what} on ${id}: ${r.statusmsg}${failed}`, data);
  }
  return r.data;
}
