import type { Filter } from "../protocol/types.js";

// The engine's only window on the collective: everything the provisioner asks of nodes, masters
// and notifiers, and the startup events it listens to. src/provisioner/muster-collective.ts
// implements it with the client API; tests and benches can implement it in memory.

/** Each role's nodes may live in their own collective (waiting nodes in `provisioning`). */
export type Role = "target" | "master" | "notify";

/** One node's answer to an action (the fields of a reply the engine reads). */
import type { NodeKeyEntry } from "../protocol/node-keys.js";

export interface ActionReply {
  sender: string;
  statuscode: number;
  statusmsg: string;
  data: Record<string, unknown>;
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
  call(role: Role, agent: string, action: string, data: Record<string, unknown>, opts: CallOptions): Promise<ActionReply[]>;
  /** Startup events until the returned function is called. Garbled events never reach `handler`. */
  onStartup(handler: (ev: StartupEvent) => void): () => void;
  /** Vouch for a node's key in the node-key directory clients verify replies against (protocol/node-keys.ts). */
  publishNodeKey?(entry: NodeKeyEntry): Promise<void>;
}
