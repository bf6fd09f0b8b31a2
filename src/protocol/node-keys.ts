// The node-key directory (bucket DEFAULT_NODE_KEYS_BUCKET): one entry per node identity naming the
// ed25519 key that node signs its replies and events with. The provisioner writes an entry when it
// pins a waiting node's key and again, `certified`, once the node's certificate is signed for it; an
// admin enrolls the machines the provisioner does not provision (masters, the notifier);
// clients read the bucket to tell a reply really from `sender` apart from one merely signed.

/**
 * The CSR extension carrying the node key (base64 raw ed25519, a UTF8String), requested through
 * Puppet's csr_attributes.yaml `extension_requests` under ppPrivCertExt (1.3.6.1.4.1.34380.1.2,
 * site-private extensions Puppet copies into the certificate). The CA side refuses to sign a CSR
 * whose value is not the key the provisioner pinned for the node.
 */
export const NODE_KEY_CSR_OID = "1.3.6.1.4.1.34380.1.2.1301";

/**
 * How the key came to be known: pinned from the node's first signed reply, bound to its signed
 * certificate, or enrolled by an admin for a machine muster does not provision (a master, the
 * notifier), whose key was made before it was installed (`muster key enroll`).
 */
export const NodeKeySources = ["pinned", "certified", "enrolled"] as const;
export type NodeKeySource = (typeof NodeKeySources)[number];

export interface NodeKeyEntry {
  identity: string;
  /** base64 of the raw 32-byte ed25519 public key. */
  pubkey: string;
  source: NodeKeySource;
  /** When the provisioner wrote the entry (ms since the epoch). */
  time: number;
  /** Who vouches for it: the provisioner's id, or the admin's caller name that enrolled it. */
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

/**
 * What enrolling `pubkey` for `identity` does, given the directory's current entry (pure): write
 * it, nothing (the directory says so already), or refuse to replace another key without `replace`
 * (every reply signed by the old one would be dropped from then on).
 */
export function enrollment(current: NodeKeyEntry | undefined, identity: string, pubkey: string, replace: boolean): { act: "write" | "same" | "refuse"; why: string } {
  if (!B64_32.test(pubkey)) return { act: "refuse", why: `not an ed25519 public key (base64 of 32 bytes, as in a .pub file): ${JSON.stringify(pubkey.slice(0, 60))}` };
  if (!current) return { act: "write", why: `${identity} enrolled` };
  if (current.pubkey === pubkey) return { act: "same", why: `${identity} is enrolled with this key already (${current.source}, by ${current.by})` };
  if (!replace) return { act: "refuse", why: `the directory names another key for ${identity} (${current.source} by ${current.by}): --replace to put this one in its place (replies signed by the old key are dropped from then on)` };
  return { act: "write", why: `${identity}'s key replaced (it was ${current.source} by ${current.by})` };
}
