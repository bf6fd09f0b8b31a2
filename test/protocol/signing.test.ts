import { test } from "node:test";
import assert from "node:assert/strict";
import { canonicalJson } from "../../src/protocol/canonical.js";
import { generateSigningKey, publicKeyObject, signableBytes, signRequest, signingKeyFromPem, verifyRequestSignature } from "../../src/protocol/signing.js";
import { REQUEST_PROTOCOL, emptyFilter, type Request } from "../../src/protocol/types.js";

function unsigned(): Omit<Request, "signature"> {
  const { key } = generateSigningKey("user=alice");
  return {
    protocol: REQUEST_PROTOCOL,
    id: "0123456789abcdef",
    sender: "host:1",
    caller: key.name,
    pubkey: key.publicKey,
    collective: "muster",
    agent: "rpcutil",
    action: "get_fact",
    data: { fact: "os.family", nested: { b: 1, a: [3, { y: 2, x: 1 }] } },
    filter: { ...emptyFilter(), fact: [{ fact: "country", operator: "==", value: "de" }] },
    ttl: 60,
    time: 1_700_000_000_000,
    target: "broadcast",
  };
}

test("canonical JSON does not depend on key order, at any depth", () => {
  const a = { b: 1, a: { d: [1, { z: 1, y: 2 }], c: "x" } };
  const b = { a: { c: "x", d: [1, { y: 2, z: 1 }] }, b: 1 };
  assert.equal(canonicalJson(a), canonicalJson(b));
  assert.equal(canonicalJson(a), '{"a":{"c":"x","d":[1,{"y":2,"z":1}]},"b":1}');
});

test("canonical JSON keeps array order, drops undefined members and refuses non-finite numbers", () => {
  assert.notEqual(canonicalJson([1, 2]), canonicalJson([2, 1]));
  assert.equal(canonicalJson({ a: undefined, b: null }), '{"b":null}');
  assert.equal(canonicalJson("é\n"), JSON.stringify("é\n"));
  assert.throws(() => canonicalJson({ n: Number.NaN }), TypeError);
  assert.throws(() => canonicalJson([Infinity]), TypeError);
});

test("signable bytes are the canonical request without its signature", () => {
  const req = unsigned();
  const reordered = Object.fromEntries(Object.entries(req).reverse()) as Omit<Request, "signature">;
  assert.deepEqual(signableBytes(req), signableBytes(reordered));
  assert.deepEqual(signableBytes({ ...req, signature: "anything" } as Request), signableBytes(req));
  assert.ok(!signableBytes(req).toString().includes("signature"));
});

test("a signed request verifies with the signer's key, also after a JSON round trip with reordered keys", () => {
  const { key } = generateSigningKey("user=alice");
  const req = signRequest({ ...unsigned(), caller: key.name, pubkey: key.publicKey }, key);
  const pub = publicKeyObject(key.publicKey);
  assert.ok(verifyRequestSignature(req, pub));
  const roundTrip = JSON.parse(JSON.stringify(Object.fromEntries(Object.entries(req).reverse()))) as Request;
  assert.ok(verifyRequestSignature(roundTrip, pub));
});

test("a request does not verify with another key", () => {
  const { key } = generateSigningKey("user=alice");
  const { key: other } = generateSigningKey("user=mallory");
  const req = signRequest(unsigned(), key);
  assert.equal(verifyRequestSignature(req, publicKeyObject(other.publicKey)), false);
});

test("tampering with any signed field breaks the signature (filter, ttl, time, data and the rest)", () => {
  const { key } = generateSigningKey("user=alice");
  const req = signRequest(unsigned(), key);
  const pub = publicKeyObject(key.publicKey);
  const tampered: Record<string, Request> = {
    filter: { ...req, filter: emptyFilter() },
    "filter value": { ...req, filter: { ...req.filter, fact: [{ fact: "country", operator: "==", value: "us" }] } },
    "filter compound added": { ...req, filter: { ...req.filter, compound: ["true"] } },
    ttl: { ...req, ttl: 3600 },
    time: { ...req, time: req.time + 1 },
    data: { ...req, data: { ...req.data, fact: "secret" } },
    "nested data": { ...req, data: { ...req.data, nested: { b: 1, a: [3, { y: 2, x: 2 }] } } },
    "data key added": { ...req, data: { ...req.data, extra: true } },
    agent: { ...req, agent: "puppet" },
    action: { ...req, action: "inventory" },
    collective: { ...req, collective: "other" },
    id: { ...req, id: "fedcba9876543210" },
    caller: { ...req, caller: "user=root" },
    sender: { ...req, sender: "elsewhere:2" },
    "signature bytes": { ...req, signature: Buffer.from(Buffer.from(req.signature, "base64").map((b, i) => (i === 0 ? b ^ 1 : b))).toString("base64") },
    "signature garbage": { ...req, signature: "not base64 at all!" },
    "signature empty": { ...req, signature: "" },
  };
  for (const [what, r] of Object.entries(tampered)) assert.equal(verifyRequestSignature(r, pub), false, `tampered ${what} still verifies`);
});

test("keys survive a PEM round trip and only ed25519 is accepted", () => {
  const { key, pem } = generateSigningKey("user=alice");
  const again = signingKeyFromPem("user=alice", pem);
  assert.equal(again.publicKey, key.publicKey);
  assert.equal(Buffer.from(key.publicKey, "base64").length, 32);
  assert.throws(() => publicKeyObject(Buffer.alloc(31).toString("base64")), /32 bytes/);
});
