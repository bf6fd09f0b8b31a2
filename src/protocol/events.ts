import { isValidAgentName, isValidIdentity, subjects } from "./subjects.js";

// Node events (ActionContext.emit): `muster.event.<agent>.<event>`, JSON
// `{identity, agent, event, time, data}`, e.g. the puppet agent's run_complete. Built by the
// server's runtime, parsed here for every subscriber.

export interface NodeEvent<D = Record<string, unknown>> {
  identity: string;
  agent: string;
  event: string;
  time: number;
  data: D;
  /** The node's ed25519 public key and its signature over the rest (protocol/signing.ts signMessage). */
  pubkey?: string;
  signature?: string;
}

export const MAX_NODE_EVENT_BYTES = 1024 * 1024;
const EVENT_RE = /^[a-z][a-z0-9_]*$/;

export function isValidEventName(name: string): boolean {
  return EVENT_RE.test(name) && name.length <= 64;
}

export type NodeEventParse = { ok: true; event: NodeEvent } | { ok: false; reason: string };

const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: true });

export function encodeNodeEvent(e: NodeEvent): Uint8Array {
  return enc.encode(JSON.stringify({ identity: e.identity, agent: e.agent, event: e.event, time: e.time, data: e.data, pubkey: e.pubkey, signature: e.signature }));
}

/** Decode and check one node event; with `subject`, it must be the event the subject names. */
export function parseNodeEvent(payload: Uint8Array | string, subject?: string): NodeEventParse {
  const refuse = (reason: string): NodeEventParse => ({ ok: false, reason });
  const size = typeof payload === "string" ? enc.encode(payload).length : payload.length;
  if (size > MAX_NODE_EVENT_BYTES) return refuse(`too large: ${size} bytes, at most ${MAX_NODE_EVENT_BYTES}`);
  let v: unknown;
  try {
    v = JSON.parse(typeof payload === "string" ? payload : dec.decode(payload));
  } catch (e) {
    return refuse(`not UTF-8 JSON: ${(e as Error).message}`);
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) return refuse("not a JSON object");
  const o = v as Record<string, unknown>;
  if (typeof o.identity !== "string" || !isValidIdentity(o.identity)) return refuse("identity must be a valid identity");
  if (typeof o.agent !== "string" || !isValidAgentName(o.agent)) return refuse("agent must be a valid agent name");
  if (typeof o.event !== "string" || !isValidEventName(o.event)) return refuse("event must be a valid event name");
  if (typeof o.data !== "object" || o.data === null || Array.isArray(o.data)) return refuse("data must be a JSON object");
  if (o.time !== undefined && (typeof o.time !== "number" || !Number.isFinite(o.time))) return refuse("time must be a number of ms");
  if (o.pubkey !== undefined && (typeof o.pubkey !== "string" || o.pubkey.length > 64)) return refuse("pubkey must be a base64 string of at most 64 characters");
  if (o.signature !== undefined && (typeof o.signature !== "string" || o.signature.length > 128)) return refuse("signature must be a base64 string of at most 128 characters");
  const event: NodeEvent = { identity: o.identity, agent: o.agent, event: o.event, time: typeof o.time === "number" ? o.time : 0, data: o.data as Record<string, unknown> };
  if (typeof o.pubkey === "string") event.pubkey = o.pubkey;
  if (typeof o.signature === "string") event.signature = o.signature;
  if (subject !== undefined && subject !== subjects.event(event.agent, event.event)) return refuse(`event ${event.agent}.${event.event} arrived on ${subject}`);
  return { ok: true, event };
}
