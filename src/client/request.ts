import { randomUUID } from "node:crypto";
import { headers, type MsgHdrs } from "@nats-io/transport-node";
import { hostname } from "node:os";
import { signRequest, type SigningKey } from "../protocol/signing.js";
import { BROADCAST_TARGET, PROOF_HEADER, TARGET_HEADER } from "../protocol/targets.js";
import { REQUEST_PROTOCOL, type Filter, type Request } from "../protocol/types.js";

/**
 * Builds and signs a request. `target` is what it is addressed to: "broadcast" (the default) or a
 * directed call's targetTree(...).target; one directed request goes to each of its targets'
 * subjects with that target's proof (protocol/targets.ts).
 */
export function buildRequest(p: { key: SigningKey; collective: string; agent: string; action: string; data: Record<string, unknown>; filter: Filter; ttl: number; target?: string; sender?: string; id?: string }): Request {
  return signRequest(
    {
      protocol: REQUEST_PROTOCOL,
      id: p.id ?? randomUUID().replace(/-/g, ""),
      sender: p.sender ?? `${hostname()}:${process.pid}`,
      caller: p.key.name,
      pubkey: p.key.publicKey,
      collective: p.collective,
      agent: p.agent,
      action: p.action,
      data: p.data,
      filter: p.filter,
      ttl: p.ttl,
      time: Date.now(),
      target: p.target ?? BROADCAST_TARGET,
    },
    p.key,
  );
}

/** The headers of one copy of a directed request: the identity it is for and its proof. */
export function targetHeaders(identity: string, proof: string): MsgHdrs {
  const h = headers();
  h.set(TARGET_HEADER, identity);
  if (proof) h.set(PROOF_HEADER, proof);
  return h;
}
