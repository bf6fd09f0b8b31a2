import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import { signRequest, type SigningKey } from "../protocol/signing.js";
import { REQUEST_PROTOCOL, type Filter, type Request } from "../protocol/types.js";

/** Builds and signs a request. One signed request may be published to many node subjects. */
export function buildRequest(p: { key: SigningKey; collective: string; agent: string; action: string; data: Record<string, unknown>; filter: Filter; ttl: number; sender?: string; id?: string }): Request {
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
    },
    p.key,
  );
}
