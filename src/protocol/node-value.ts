import { bucketKey } from "./buckets.js";
import { isValidIdentity } from "./subjects.js";

// What a node writes to its own key of a bucket (its heartbeat, its Puppet runs), read back: the
// checks every such value passes before its own fields are (size, UTF-8 JSON, an object naming a
// valid identity, stored under that identity's key).

const dec = new TextDecoder("utf-8", { fatal: true });

export type NodeValue = { ok: true; value: Record<string, unknown> & { identity: string } } | { ok: false; reason: string };

export function parseNodeValue(data: Uint8Array, maxBytes: number, key?: string): NodeValue {
  if (data.length > maxBytes) return { ok: false, reason: `too large: ${data.length} bytes, at most ${maxBytes}` };
  let v: unknown;
  try {
    v = JSON.parse(dec.decode(data));
  } catch (e) {
    return { ok: false, reason: `not UTF-8 JSON: ${(e as Error).message.slice(0, 120)}` };
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) return { ok: false, reason: "not a JSON object" };
  const o = v as Record<string, unknown>;
  if (typeof o.identity !== "string" || !isValidIdentity(o.identity)) return { ok: false, reason: "identity must be a valid identity" };
  if (key !== undefined && bucketKey(o.identity) !== key) return { ok: false, reason: `stored under ${key}, names ${o.identity}` };
  return { ok: true, value: o as Record<string, unknown> & { identity: string } };
}
