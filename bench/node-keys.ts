import { createHash, createPrivateKey } from "node:crypto";
import { rawPublicKey, type SigningKey } from "../src/protocol/signing.js";

// Bench only: each emulated node's ed25519 key derived from its identity, so the bench client can
// fill the node-key directory with the very keys the node process signs with. Never for real nodes.

const PKCS8_ED25519_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");

export function benchNodeKey(identity: string): SigningKey {
  const seed = createHash("sha256").update(`muster-bench:${identity}`).digest();
  const privateKey = createPrivateKey({ key: Buffer.concat([PKCS8_ED25519_PREFIX, seed]), format: "der", type: "pkcs8" });
  return { name: identity, privateKey, publicKey: rawPublicKey(privateKey) };
}
