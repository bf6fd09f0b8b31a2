// Wire types shared by server, client and the pure modules. See docs/protocol.md.

/** What a node is: the data filters run against and registration publishes. */
export interface NodeMetadata {
  identity: string;
  facts: Record<string, unknown>;
  classes: string[];
  agents: string[];
  collectives: string[];
}

export const FactOperators = ["==", "!=", "<", ">", "<=", ">=", "=~"] as const;
export type FactOperator = (typeof FactOperators)[number];

export interface FactFilter {
  fact: string; // dotted path for structured facts: os.family
  operator: FactOperator;
  value: string; // "/regex/" with =~ or ==
}

/**
 * A request's filter. Every list is ANDed across kinds; within `identity` entries are ORed,
 * within `fact`, `class`, `agent` and `compound` they are ANDed (MCollective semantics).
 * Strings of the form /re/ are regular expressions. An empty filter matches every node.
 */
export interface Filter {
  fact: FactFilter[];
  class: string[];
  identity: string[];
  agent: string[];
  compound: string[]; // source text of -S expressions, parsed on the node
}

export function emptyFilter(): Filter {
  return { fact: [], class: [], identity: [], agent: [], compound: [] };
}

export const REQUEST_PROTOCOL = "muster/request/1";
export const REPLY_PROTOCOL = "muster/reply/1";

export interface Request {
  protocol: typeof REQUEST_PROTOCOL;
  id: string;
  sender: string; // client host/process identity
  caller: string; // the signing key's name, e.g. "user=alice"
  pubkey: string; // base64 raw ed25519 public key of caller
  collective: string;
  agent: string;
  action: string;
  data: Record<string, unknown>;
  filter: Filter;
  ttl: number; // seconds
  time: number; // ms since epoch at signing
  /** What the request is addressed to: "broadcast", or "direct:<Merkle root of the identities>" (protocol/targets.ts). */
  target: string;
  signature: string; // base64 ed25519 over canonical(request without signature)
}

export interface Reply {
  protocol: typeof REPLY_PROTOCOL;
  requestid: string;
  sender: string; // node identity
  agent: string;
  action: string;
  time: number;
  statuscode: number;
  statusmsg: string;
  data: Record<string, unknown>;
  /** The answering node's ed25519 public key (base64 raw); absent from nodes older than signed replies. */
  pubkey?: string;
  /** base64 ed25519 by `pubkey` over canonical(reply without signature) (protocol/signing.ts signMessage). */
  signature?: string;
}
