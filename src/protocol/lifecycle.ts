import { isValidCollective, isValidIdentity, subjects } from "./subjects.js";

// Lifecycle events (`muster.lifecycle.<type>.<component>`): a node announces that it serves
// (`startup`, once subscribed) and that it stops (`shutdown`). One union type, one builder and one
// parser, so the publisher (server/host.ts) and every subscriber (the provisioner, scripts) agree.
// The parser is the gate for hostile input: anyone allowed to publish on muster.lifecycle.> can
// send anything, so every field is checked and a refusal says which one and why.

export const LifecycleTypes = ["startup", "shutdown"] as const;
export type LifecycleType = (typeof LifecycleTypes)[number];

/** Components publishing lifecycle events; any other well-formed name is accepted on the wire. */
export const LifecycleComponents = { server: "server", emulator: "emulator" } as const;

interface LifecycleFields {
  /** The node's identity. */
  identity: string;
  /** What hosts the node: `server` (muster server) or `emulator` (muster emulate). */
  component: string;
  /** muster version of the publisher. */
  version: string;
  /** Collectives the node serves in this phase (a waiting node: the provisioning collective only). */
  collectives: string[];
  /** When it was published, ms since the epoch. */
  time: number;
  /** The node's ed25519 public key and its signature over the rest (protocol/signing.ts signMessage). */
  pubkey?: string;
  signature?: string;
}

export interface StartupEvent extends LifecycleFields {
  type: "startup";
}
export interface ShutdownEvent extends LifecycleFields {
  type: "shutdown";
}
export type LifecycleEvent = StartupEvent | ShutdownEvent;

/** The largest lifecycle event accepted (a node in every collective there could be fits easily). */
export const MAX_LIFECYCLE_BYTES = 64 * 1024;
const MAX_COLLECTIVES = 1024;
const COMPONENT_RE = /^[a-z][a-z0-9_-]{0,63}$/;

export function isValidComponent(name: string): boolean {
  return COMPONENT_RE.test(name);
}

export function lifecycleEvent(type: LifecycleType, f: LifecycleFields): LifecycleEvent {
  const e: LifecycleEvent = { type, identity: f.identity, component: f.component, version: f.version, collectives: [...f.collectives], time: f.time };
  if (f.pubkey !== undefined) e.pubkey = f.pubkey;
  if (f.signature !== undefined) e.signature = f.signature;
  return e;
}

/** The subject an event is published on. */
export function lifecycleSubject(e: Pick<LifecycleEvent, "type" | "component">): string {
  return subjects.lifecycle(e.type, e.component);
}

const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: true });

export function encodeLifecycleEvent(e: LifecycleEvent): Uint8Array {
  return enc.encode(JSON.stringify(lifecycleEvent(e.type, e)));
}

export type LifecycleParse = { ok: true; event: LifecycleEvent } | { ok: false; reason: string };

const refuse = (reason: string): LifecycleParse => ({ ok: false, reason });
const show = (v: unknown) => {
  const s = JSON.stringify(v) ?? String(v);
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
};
const kind = (v: unknown) => (v === null ? "null" : Array.isArray(v) ? "an array" : typeof v);

/**
 * Decode and check one lifecycle event. With `subject`, the event must also be the one the subject
 * names (`muster.lifecycle.<type>.<component>`): a startup payload on a shutdown subject is refused.
 * Unknown extra fields are ignored (a newer publisher may add some).
 */
export function parseLifecycleEvent(payload: Uint8Array | string, subject?: string): LifecycleParse {
  const size = typeof payload === "string" ? enc.encode(payload).length : payload.length;
  if (size > MAX_LIFECYCLE_BYTES) return refuse(`too large: ${size} bytes, at most ${MAX_LIFECYCLE_BYTES}`);
  let text: string;
  try {
    text = typeof payload === "string" ? payload : dec.decode(payload);
  } catch {
    return refuse("not UTF-8");
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    return refuse(`not JSON: ${(e as Error).message}`);
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) return refuse(`not a JSON object but ${kind(v)}`);
  const o = v as Record<string, unknown>;

  if (typeof o.type !== "string") return refuse(`type must be a string, got ${kind(o.type)}`);
  if (!(LifecycleTypes as readonly string[]).includes(o.type)) return refuse(`unknown type ${show(o.type)}; expected ${LifecycleTypes.join(" or ")}`);
  if (typeof o.identity !== "string") return refuse(`identity must be a string, got ${kind(o.identity)}`);
  if (!isValidIdentity(o.identity)) return refuse(`identity ${show(o.identity)} is not a valid identity`);
  if (typeof o.component !== "string") return refuse(`component must be a string, got ${kind(o.component)}`);
  if (!isValidComponent(o.component)) return refuse(`component ${show(o.component)} is not a valid component name`);
  if (typeof o.version !== "string") return refuse(`version must be a string, got ${kind(o.version)}`);
  if (o.version.length > 64) return refuse(`version is longer than 64 characters`);
  if (!Array.isArray(o.collectives)) return refuse(`collectives must be an array, got ${kind(o.collectives)}`);
  if (o.collectives.length > MAX_COLLECTIVES) return refuse(`more than ${MAX_COLLECTIVES} collectives`);
  for (const [i, c] of o.collectives.entries()) {
    if (typeof c !== "string" || !isValidCollective(c)) return refuse(`collectives[${i}] ${show(c)} is not a valid collective name`);
  }
  if (typeof o.time !== "number" || !Number.isFinite(o.time) || o.time < 0) return refuse(`time must be a non-negative number of ms, got ${show(o.time)}`);

  if (o.pubkey !== undefined && (typeof o.pubkey !== "string" || o.pubkey.length > 64)) return refuse(`pubkey must be a base64 string of at most 64 characters`);
  if (o.signature !== undefined && (typeof o.signature !== "string" || o.signature.length > 128)) return refuse(`signature must be a base64 string of at most 128 characters`);
  const event = lifecycleEvent(o.type as LifecycleType, { identity: o.identity, component: o.component, version: o.version, collectives: o.collectives as string[], time: o.time, pubkey: o.pubkey as string | undefined, signature: o.signature as string | undefined });
  if (subject !== undefined && subject !== lifecycleSubject(event)) return refuse(`a ${event.type} event from component ${event.component} arrived on ${show(subject)}, not on ${lifecycleSubject(event)}`);
  return { ok: true, event };
}
