import { createPrivateKey, createPublicKey, generateKeyPairSync, verify, type KeyObject } from "node:crypto";
import { canonicalJson } from "./canonical.js";
import { fastest, openssl, SPKI_ED25519_PREFIX, type Ed25519 } from "./ed25519.js";
import type { Request } from "./types.js";

// ed25519 over the canonical bytes of the request without its signature. Raw 32-byte public keys
// travel base64-encoded; servers map trusted keys to caller names.

export interface SigningKey {
  name: string;
  privateKey: KeyObject;
  publicKey: string; // base64 raw
}

export function generateSigningKey(name: string): { key: SigningKey; pem: string } {
  const { privateKey } = generateKeyPairSync("ed25519");
  return { key: { name, privateKey, publicKey: rawPublicKey(privateKey) }, pem: privateKey.export({ type: "pkcs8", format: "pem" }).toString() };
}

export function signingKeyFromPem(name: string, pem: string): SigningKey {
  const privateKey = createPrivateKey(pem);
  if (privateKey.asymmetricKeyType !== "ed25519") throw new Error("signing key is not ed25519");
  return { name, privateKey, publicKey: rawPublicKey(privateKey) };
}

export function rawPublicKey(privateKey: KeyObject): string {
  const spki = createPublicKey(privateKey).export({ type: "spki", format: "der" });
  return spki.subarray(SPKI_ED25519_PREFIX.length).toString("base64");
}

export function publicKeyObject(rawBase64: string): KeyObject {
  return openssl.publicKey(Buffer.from(rawBase64, "base64")) as KeyObject;
}

export function signableBytes(req: Omit<Request, "signature"> | Request): Buffer {
  const { signature: _ignored, ...rest } = req as Request;
  return Buffer.from(canonicalJson(rest));
}

export function signRequest(req: Omit<Request, "signature">, key: SigningKey): Request {
  // libsodium where it loads: OpenSSL's one-shot sign was a provisioner's largest cost per request
  const signature = fastest().sign(key.privateKey, signableBytes(req)).toString("base64");
  return { ...req, signature };
}

export function verifyRequestSignature(req: Request, publicKey: KeyObject): boolean {
  try {
    return verify(null, signableBytes(req), publicKey, Buffer.from(req.signature, "base64"));
  } catch {
    return false;
  }
}

// ---- what nodes sign: replies and events ----------------------------------------------------
//
// A node signs every reply and every event with its own ed25519 key (its `node key`), over the
// canonical bytes of the message without `signature`; `pubkey` is inside those bytes. A signature
// proves the holder of `pubkey` sent exactly this; whether `pubkey` belongs to the identity in
// `sender` / `identity` is the verifier's question (a key it pinned, or a key directory).

/** Signs any JSON object that carries its signer's `pubkey` (a reply, a lifecycle or node event). */
export function signMessage<T extends object>(msg: T, key: SigningKey): T & { pubkey: string; signature: string } {
  const body = { ...msg, pubkey: key.publicKey } as T & { pubkey: string; signature?: string };
  delete body.signature;
  return { ...body, signature: fastest().sign(key.privateKey, Buffer.from(canonicalJson(body))).toString("base64") };
}

/**
 * Public keys parsed once each, in the form an ed25519 backend verifies with (protocol/ed25519.ts):
 * OpenSSL's KeyObject costs about as much to parse as the verification itself. Bounded, oldest
 * dropped first. The backend is chosen on first use (libsodium unless given one).
 */
export class PublicKeyCache {
  private readonly keys = new Map<string, unknown>();
  private ed?: Ed25519;
  constructor(
    private readonly max = 100_000,
    private readonly backend: () => Ed25519 = fastest,
  ) {}
  get ed25519(): Ed25519 {
    return (this.ed ??= this.backend());
  }
  get(rawBase64: string): unknown {
    let k = this.keys.get(rawBase64);
    if (k === undefined) {
      try {
        k = this.ed25519.publicKey(Buffer.from(rawBase64, "base64"));
      } catch {
        k = null;
      }
      if (this.keys.size >= this.max) this.keys.delete(this.keys.keys().next().value!);
      this.keys.set(rawBase64, k);
    }
    return k ?? undefined;
  }
}

let sharedKeys: PublicKeyCache | undefined;

/** Whether `msg.signature` is a valid signature by `msg.pubkey` over the rest of `msg`. False when either is missing. */
export function verifyMessage(msg: { pubkey?: unknown; signature?: unknown }, keys: PublicKeyCache = (sharedKeys ??= new PublicKeyCache())): boolean {
  if (typeof msg.pubkey !== "string" || typeof msg.signature !== "string") return false;
  const key = keys.get(msg.pubkey);
  if (!key) return false;
  const { signature, ...body } = msg;
  try {
    return keys.ed25519.verify(key, Buffer.from(canonicalJson(body)), Buffer.from(signature, "base64"));
  } catch {
    return false;
  }
}
