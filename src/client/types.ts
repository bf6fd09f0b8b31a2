import type { AgentDDL } from "../ddl/types.js";
import type { Filter, Reply } from "../protocol/types.js";
import type { NodeSource } from "./discovery/source.js";
import type { LimitSpec } from "./limit.js";

// What a call is asked with and answers: the client API's option and result types (client.ts
// re-exports them), apart from the client so that typed.ts and others need not import it.

/** A reply dropped by verification, and why. */
export interface RejectedReply {
  sender: string;
  reason: string;
}

export interface DiscoverOptions {
  filter?: Filter;
  /** --dt: upper bound, ms (default 2000). */
  timeoutMs?: number;
  /** Broadcast completes this long after the last reply (default 250 ms). */
  idleMs?: number;
  /**
   * Broadcast: the nodes expected to answer (the last discovery's answer with the same filter, or
   * the registry's). Discovery then ends as soon as every one of them answered (20 ms later, if
   * nothing else did) instead of after the idle window, and waits for a missing one up to
   * `timeoutMs` rather than giving up at the idle window; once they all answered, a node outside
   * them that answered makes the idle window end it, as without them (docs/protocol.md).
   */
  anticipate?: Iterable<string>;
  source?: NodeSource;
  onFound?: (identity: string) => void;
}

export interface CallOptions {
  /** Nodes to address directly. Without them the client discovers with `filter` first. */
  nodes?: string[];
  filter?: Filter;
  discovery?: DiscoverOptions;
  /** Seconds to wait for replies after the last publish of a batch (default: the DDL timeout + 5). */
  timeoutMs?: number;
  batch?: number;
  batchSleepMs?: number;
  limit?: LimitSpec;
  onReply?: (r: Reply) => void;
  /** A reply dropped by verification (ClientOptions.verify), as it is dropped. */
  onRejected?: (r: Reply, reason: string) => void;
  onDiscovered?: (nodes: string[]) => void;
  /** Stop waiting for replies when aborted (the call resolves with what arrived). */
  signal?: AbortSignal;
  /** Skip client-side DDL validation (the server validates anyway). */
  ddl?: AgentDDL;
}

export interface RpcStats {
  discovered: number;
  responded: number;
  ok: number;
  failed: number;
  noResponse: string[];
  /** Replies signed by the key the node-key directory names for their sender. */
  verified: number;
  /** Replies kept without that proof: the directory does not know the sender (or verification is off). */
  unverified: number;
  /** Replies dropped: a bad signature, or another key than the directory's. */
  rejected: number;
  discoveryMs: number;
  callMs: number;
  totalMs: number;
}

export interface RpcResult {
  agent: string;
  action: string;
  discovered: string[];
  replies: Reply[];
  /** Senders of the replies kept without proof of who sent them (stats.unverified). */
  unverified: string[];
  /** The replies dropped by verification. */
  rejected: RejectedReply[];
  stats: RpcStats;
}
