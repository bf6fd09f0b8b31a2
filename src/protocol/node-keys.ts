// The node-key directory (bucket DEFAULT_NODE_KEYS_BUCKET): one entry per node identity naming the
// ed25519 key that node signs its replies and events with. The provisioner writes an entry when it
// pins a waiting node's key and again, `certified`, once the node's certificate is signed for it;
// clients read the bucket to tell a reply really from `sender` apart from one merely signed.

/**
 * The CSR extension carrying the node key (base64 raw ed25519, a UTF8String), requested through
 * Puppet's csr_attributes.yaml `extension_requests` under ppPrivCertExt (1.3.6.1.4.1.34380.1.2,
 * site-private extensions Puppet copies into the certificate). The CA side refuses to sign a CSR
 * whose value is not the key the provisioner pinned for the node.
 */
export const NODE_KEY_CSR_OID = "1.3.6.1.4.1.34380.1.2.1301";

/** How the key came to be known: pinned from the node's first signed reply, or bound to its signed certificate. */
export const NodeKeySources = ["pinned", "certified"] as const;
export type NodeKeySource = (typeof NodeKeySources)[number];

export interface NodeKeyEntry {
  identity: string;
  /** base64 of the raw 32-byte ed25519 public key. */
  pubkey: string;
  source: NodeKeySource;
  /** When the provisioner wrote the entry (ms since the epoch). */
  time: number;
  /** The provisioner that vouches for it (its id). */
  by: string;
  /** The SHA-256 fingerprint of the certificate signed for the node, once `certified`. */
  fingerprint?: string;
}

// KV keys allow [-/_=.a-zA-Z0-9]; identities may also hold ':' and '@'. '=' escapes, as =XX hex.
export function nodeKeyName(identity: string): string {
  return identity.replace(/[=:@]/g, (c) => `=${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, "0")}`);
}

export function identityOfNodeKeyName(key: string): string {
  return key.replace(/=([0-9A-F]{2})/g, (_m, h: string) => String.fromCharCode(parseInt(h, 16)));
}

const B64_32 = /^[A-Za-z0-9+/]{43}=$/;

/** An entry as read from the bucket, or a reason it is unusable (a reader skips it). */
export function parseNodeKeyEntry(data: Uint8Array, key?: string): { ok: true; entry: NodeKeyEntry } | { ok: false; reason: string } {
  let v: unknown;
  try {
    v = JSON.parse(new TextDecoder().decode(data));
  } catch {
    return { ok: false, reason: "not JSON" };
  }
  if (!v || typeof v !== "object" || Array.isArray(v)) return { ok: false, reason: "not an object" };
  const e = v as Record<string, unknown>;
  if (typeof e.identity !== "string" || !e.identity) return { ok: false, reason: "no identity" };
  if (key !== undefined && identityOfNodeKeyName(key) !== e.identity) return { ok: false, reason: `stored under ${key}, names ${e.identity}` };
  if (typeof e.pubkey !== "string" || !B64_32.test(e.pubkey)) return { ok: false, reason: "pubkey is not a base64 ed25519 key" };
  if (!NodeKeySources.includes(e.source as NodeKeySource)) return { ok: false, reason: `unknown source ${JSON.stringify(e.source)}` };
  if (typeof e.time !== "number" || typeof e.by !== "string") return { ok: false, reason: "time or by missing" };
  if (e.fingerprint !== undefined && typeof e.fingerprint !== "string") return { ok: false, reason: "fingerprint is not a string" };
  return { ok: true, entry: { identity: e.identity, pubkey: e.pubkey, source: e.source as NodeKeySource, time: e.time, by: e.by, ...(e.fingerprint ? { fingerprint: e.fingerprint } : {}) } };
}

export function encodeNodeKeyEntry(e: NodeKeyEntry): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(e));
}
