import { createPublicKey, sign, verify, type KeyObject } from "node:crypto";
import { createRequire } from "node:module";

// ed25519 for the messages nodes sign (replies, events): libsodium through sodium-native when its
// prebuilt addon loads, else Node's OpenSSL. ed25519 is deterministic, so both make the same
// signature and each verifies the other's. On this project's machines libsodium signs in 13 µs and
// verifies in 36 µs, OpenSSL in 28 and 80, and OpenSSL also needs a KeyObject per public key (66
// µs to parse), which a client meeting 10,000 nodes' keys for the first time pays 10,000 times
// (docs/bench.md, issue 13). Loading the addon costs about 10 ms, so it loads on first use and
// callers that check only a few signatures may keep to OpenSSL.

export const SPKI_ED25519_PREFIX = Buffer.from("302a300506032b6570032100", "hex");
/** An ed25519 private key's PKCS#8 DER is this prefix and the 32-byte seed (RFC 8410). */
const PKCS8_ED25519_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");

export interface Ed25519 {
  readonly name: "libsodium" | "openssl";
  /** The form `verify` takes of a raw 32-byte public key; parse once, keep it (PublicKeyCache). Throws on a bad key. */
  publicKey(raw: Buffer): unknown;
  verify(publicKey: unknown, message: Buffer, signature: Buffer): boolean;
  sign(privateKey: KeyObject, message: Buffer): Buffer;
}

export const openssl: Ed25519 = {
  name: "openssl",
  publicKey(raw) {
    if (raw.length !== 32) throw new Error("ed25519 public key must be 32 bytes");
    return createPublicKey({ key: Buffer.concat([SPKI_ED25519_PREFIX, raw]), format: "der", type: "spki" });
  },
  verify(publicKey, message, signature) {
    return verify(null, message, publicKey as KeyObject, signature);
  },
  sign(privateKey, message) {
    return sign(null, message, privateKey);
  },
};

interface Sodium {
  crypto_sign_BYTES: number;
  crypto_sign_detached(sig: Buffer, message: Buffer, secretKey: Buffer): void;
  crypto_sign_verify_detached(sig: Buffer, message: Buffer, publicKey: Buffer): boolean;
  crypto_sign_seed_keypair(publicKey: Buffer, secretKey: Buffer, seed: Buffer): void;
}

function sodiumBackend(na: Sodium): Ed25519 {
  // libsodium signs with seed||public (64 bytes); derived once per KeyObject.
  const secrets = new WeakMap<KeyObject, Buffer>();
  const secretOf = (privateKey: KeyObject): Buffer => {
    let sk = secrets.get(privateKey);
    if (!sk) {
      // The seed from the key's PKCS#8 DER, not its JWK: Node 20 exports a JWK holding the key's
      // lock while it allocates, and a garbage collection then freeing the job that generated the
      // key (generateKeyPairSync) takes the same lock: the process hung for good (CI run 21).
      const der = privateKey.type === "private" && privateKey.asymmetricKeyType === "ed25519" ? privateKey.export({ format: "der", type: "pkcs8" }) : undefined;
      if (!der || der.length !== 48 || !der.subarray(0, 16).equals(PKCS8_ED25519_PREFIX)) throw new Error("signing key is not an ed25519 private key");
      sk = Buffer.alloc(64);
      na.crypto_sign_seed_keypair(Buffer.alloc(32), sk, der.subarray(16));
      secrets.set(privateKey, sk);
    }
    return sk;
  };
  return {
    name: "libsodium",
    publicKey(raw) {
      if (raw.length !== 32) throw new Error("ed25519 public key must be 32 bytes");
      return raw;
    },
    verify(publicKey, message, signature) {
      return signature.length === 64 && na.crypto_sign_verify_detached(signature, message, publicKey as Buffer);
    },
    sign(privateKey, message) {
      const sig = Buffer.alloc(64);
      na.crypto_sign_detached(sig, message, secretOf(privateKey));
      return sig;
    },
  };
}

let fast: Ed25519 | undefined;
/** Why libsodium did not load, when it did not (`muster doctor` and the bench say which backend runs). */
export let libsodiumError: string | undefined;

/** libsodium when its addon loads here, else OpenSSL. `MUSTER_ED25519=openssl` forces OpenSSL (tests, comparisons). */
export function fastest(): Ed25519 {
  if (fast) return fast;
  if (process.env.MUSTER_ED25519 === "openssl") {
    libsodiumError = "MUSTER_ED25519=openssl";
    return (fast = openssl);
  }
  try {
    fast = sodiumBackend(createRequire(import.meta.url)("sodium-native") as Sodium);
  } catch (e) {
    libsodiumError = (e as Error).message.split("\n")[0];
    fast = openssl;
  }
  return fast;
}
