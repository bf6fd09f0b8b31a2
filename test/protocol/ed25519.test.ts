import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { fastest, libsodiumError, openssl } from "../../src/protocol/ed25519.js";
import { generateSigningKey, PublicKeyCache, signMessage, verifyMessage } from "../../src/protocol/signing.js";

// The two ed25519 backends must be interchangeable: a node on libsodium and a provisioner on OpenSSL
// (or the other way round) must accept each other's signatures and refuse the same forgeries.

test("libsodium loads here (a prebuilt addon for this platform ships in sodium-native)", () => {
  assert.equal(fastest().name, "libsodium", `libsodium did not load: ${libsodiumError}`);
});

test("both backends make the same signature, and each verifies the other's", () => {
  const sodium = fastest();
  for (let i = 0; i < 20; i++) {
    const { key } = generateSigningKey(`node${i}`);
    const raw = Buffer.from(key.publicKey, "base64");
    const msg = Buffer.from(`{"i":${i},"x":"${"é".repeat(i)}"}`);
    const a = sodium.sign(key.privateKey, msg);
    const b = openssl.sign(key.privateKey, msg);
    assert.deepEqual(a, b, "ed25519 is deterministic");
    assert.ok(openssl.verify(openssl.publicKey(raw), msg, a));
    assert.ok(sodium.verify(sodium.publicKey(raw), msg, b));
  }
});

test("both backends refuse a flipped signature, a changed message, another key and malformed input", () => {
  const { key } = generateSigningKey("a");
  const { key: other } = generateSigningKey("b");
  const msg = Buffer.from("hello");
  for (const ed of [fastest(), openssl]) {
    const sig = ed.sign(key.privateKey, msg);
    const pub = ed.publicKey(Buffer.from(key.publicKey, "base64"));
    assert.ok(ed.verify(pub, msg, sig), ed.name);
    for (let bit = 0; bit < 512; bit += 37) {
      const bad = Buffer.from(sig);
      bad[bit >> 3]! ^= 1 << (bit & 7);
      assert.equal(ed.verify(pub, msg, bad), false, `${ed.name}: bit ${bit} flipped`);
    }
    assert.equal(ed.verify(pub, Buffer.from("hellp"), sig), false, ed.name);
    assert.equal(ed.verify(ed.publicKey(Buffer.from(other.publicKey, "base64")), msg, sig), false, ed.name);
    assert.equal(ed.verify(pub, msg, sig.subarray(0, 63)), false, `${ed.name}: short signature`);
    assert.throws(() => ed.publicKey(Buffer.alloc(31)), /32 bytes/, ed.name);
  }
});

test("signed messages verify through caches on either backend; a bad pubkey is refused, not thrown", () => {
  const { key } = generateSigningKey("n1");
  const signed = signMessage({ sender: "n1", body: { a: 1 } }, key);
  for (const cache of [new PublicKeyCache(), new PublicKeyCache(10, () => openssl)]) {
    assert.ok(verifyMessage(signed, cache), cache.ed25519.name);
    assert.equal(verifyMessage({ ...signed, body: { a: 2 } } as typeof signed, cache), false);
    assert.equal(verifyMessage({ ...signed, pubkey: "AAAA" }, cache), false);
    assert.equal(verifyMessage({ ...signed, signature: 42 }, cache), false);
  }
});

test("MUSTER_ED25519=openssl forces OpenSSL, and messages still verify", () => {
  const src = fileURLToPath(new URL("../../src/protocol/ed25519.js", import.meta.url));
  const out = execFileSync(process.execPath, ["--input-type=module", "-e", `import { fastest, libsodiumError } from ${JSON.stringify(src)}; console.log(fastest().name, libsodiumError)`], {
    env: { ...process.env, MUSTER_ED25519: "openssl" },
  }).toString();
  assert.equal(out.trim(), "openssl MUSTER_ED25519=openssl");
});
