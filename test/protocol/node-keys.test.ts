import { test } from "node:test";
import assert from "node:assert/strict";
import { encodeNodeKeyEntry, identityOfNodeKeyName, nodeKeyName, parseNodeKeyEntry, type NodeKeyEntry } from "../../src/protocol/node-keys.js";
import { generateSigningKey } from "../../src/protocol/signing.js";

const enc = (v: unknown) => new TextEncoder().encode(typeof v === "string" ? v : JSON.stringify(v));
const entry: NodeKeyEntry = { identity: "user@web1:eu=x.example", pubkey: generateSigningKey("n").key.publicKey, source: "pinned", time: 1, by: "prov" };

test("directory keys: identities with = : @ round-trip through KV-safe names", () => {
  const name = nodeKeyName(entry.identity);
  assert.match(name, /^[-/_=.a-zA-Z0-9]+$/);
  assert.equal(identityOfNodeKeyName(name), entry.identity);
  assert.equal(nodeKeyName("web1.example.net"), "web1.example.net");
  assert.notEqual(nodeKeyName("a:b"), nodeKeyName("a=3Ab"), "an escaped name cannot collide with a literal one");
});

test("directory entries: a good one parses; hostile ones are refused with a reason", () => {
  const ok = parseNodeKeyEntry(encodeNodeKeyEntry(entry), nodeKeyName(entry.identity));
  assert.deepEqual(ok, { ok: true, entry });
  const bad: [unknown, RegExp, string?][] = [
    ["{nope", /not JSON/],
    [[1], /not an object/],
    [{ ...entry, identity: "" }, /no identity/],
    [{ ...entry, pubkey: "short" }, /pubkey/],
    [{ ...entry, source: "trusted" }, /unknown source/],
    [{ ...entry, time: "1" }, /time or by/],
    [{ ...entry, fingerprint: 3 }, /fingerprint/],
    [entry, /stored under other\.example, names/, "other.example"],
  ];
  for (const [v, re, key] of bad) {
    const r = parseNodeKeyEntry(enc(v), key);
    assert.equal(r.ok, false, JSON.stringify(v));
    assert.match((r as { reason: string }).reason, re);
  }
});
