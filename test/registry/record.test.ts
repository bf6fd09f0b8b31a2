import { test } from "node:test";
import assert from "node:assert/strict";
import { decodeRecord, encodeRecord, fingerprint, keyFor, parseRegistration, type Checked } from "../../src/registry/record.js";

// Registration messages are untrusted: anyone allowed to publish on <collective>.registration can
// send anything. Every refusal names a reason from a closed set; nothing throws.

const enc = new TextEncoder();
const NOW = 1_700_000_000_000;
const good = { identity: "web1.example.net", facts: { country: "de", os: { family: "Debian" } }, classes: ["base", "web"], agents: ["discovery", "rpcutil"], collectives: ["muster"], time: NOW - 5, version: "0.1.0" };
const bytes = (x: unknown) => enc.encode(typeof x === "string" ? x : JSON.stringify(x));

function refused(c: Checked, reason: string, detail?: RegExp): void {
  assert.equal(c.ok, false, "expected a refusal");
  if (c.ok) return;
  assert.equal(c.reason, reason, c.detail);
  if (detail) assert.match(c.detail, detail);
}

test("a node's registration becomes a record stamped with the registry's clock", () => {
  const c = parseRegistration(bytes(good), "muster", NOW);
  assert.ok(c.ok);
  assert.deepEqual(c.record, { identity: "web1.example.net", facts: good.facts, classes: ["base", "web"], agents: ["discovery", "rpcutil"], collectives: ["muster"], version: "0.1.0", sent_at: NOW - 5, last_seen: NOW });
});

test("unknown top-level keys are dropped, missing classes and agents are empty", () => {
  const c = parseRegistration(bytes({ identity: "a", facts: {}, collectives: ["muster"], extra: { big: true } }), "muster", NOW);
  assert.ok(c.ok);
  assert.deepEqual(c.record, { identity: "a", facts: {}, classes: [], agents: [], collectives: ["muster"], last_seen: NOW });
});

test("hostile registrations are refused with a reason, never an exception", () => {
  const cases: [unknown, string, RegExp?][] = [
    ["", "garbled", /JSON/],
    ["{not json", "garbled"],
    [new Uint8Array([0xff, 0xfe, 0x7b, 0x7d]), "garbled", /UTF-8/],
    ["null", "shape", /null/],
    ["[1,2]", "shape", /an array/],
    ["42", "shape"],
    [{ ...good, identity: 5 }, "identity", /a number/],
    [{ ...good, identity: "web 1" }, "identity", /not a valid identity/],
    [{ ...good, identity: "*.>" }, "identity"],
    [{ ...good, identity: "x".repeat(300) }, "identity"],
    [{ ...good, facts: "country=de" }, "shape", /facts is a string/],
    [{ ...good, facts: [1] }, "shape", /facts is an array/],
    [{ ...good, facts: null }, "shape"],
    [{ ...good, classes: "web" }, "shape", /classes is a string/],
    [{ ...good, classes: ["web", 7] }, "shape", /classes\[1\] is a number/],
    [{ ...good, classes: [""] }, "shape"],
    [{ ...good, classes: Array.from({ length: 10_001 }, (_, i) => `c${i}`) }, "shape", /limit is 10000/],
    [{ ...good, agents: ["Not An Agent"] }, "shape", /agent name/],
    [{ ...good, agents: {} }, "shape"],
    [{ ...good, collectives: undefined }, "shape", /collectives is nothing|collectives is a/],
    [{ ...good, collectives: [] }, "collective", /at least one/],
    [{ ...good, collectives: ["other"] }, "collective", /lists only other/],
    [{ ...good, collectives: ["muster", "bad.name"] }, "shape"],
    [{ ...good, version: { v: 1 } }, "shape", /version/],
    [{ ...good, time: "yesterday" }, "shape", /time/],
  ];
  for (const [input, reason, detail] of cases) {
    const data = input instanceof Uint8Array ? input : bytes(input);
    refused(parseRegistration(data, "muster", NOW), reason, detail);
  }
});

test("an oversized message is refused before it is decoded; deep nesting is garbled, not a crash", () => {
  refused(parseRegistration(new Uint8Array(2048).fill(0x20), "muster", NOW, { maxBytes: 1024 }), "oversized", /2048 bytes; the limit is 1024/);
  const deep = `{"identity":"a","collectives":["muster"],"facts":{"x":${"[".repeat(200_000)}${"]".repeat(200_000)}}}`;
  const c = parseRegistration(bytes(deep), "muster", NOW, { maxBytes: 1024 * 1024 });
  assert.ok(c.ok || c.reason === "garbled", "either parsed or refused as garbled");
});

test("__proto__ and constructor facts stay plain data", () => {
  const c = parseRegistration(bytes('{"identity":"a","collectives":["muster"],"facts":{"__proto__":{"polluted":1},"constructor":"x"}}'), "muster", NOW);
  assert.ok(c.ok);
  assert.equal(({} as Record<string, unknown>)["polluted"], undefined);
  assert.ok(Object.hasOwn(c.record.facts, "__proto__"));
});

test("records round-trip through the bucket encoding; invalid stored values decode to undefined", () => {
  const c = parseRegistration(bytes(good), "muster", NOW);
  assert.ok(c.ok);
  assert.deepEqual(decodeRecord(encodeRecord(c.record)), c.record);
  assert.equal(decodeRecord(bytes("garbage")), undefined);
  assert.equal(decodeRecord(bytes({ ...good })), undefined, "a stored record needs last_seen");
  assert.equal(decodeRecord(bytes({ ...good, last_seen: "now" })), undefined);
});

test("the fingerprint ignores timestamps and sees every change of data", () => {
  const a = parseRegistration(bytes(good), "muster", NOW);
  const b = parseRegistration(bytes({ ...good, time: NOW + 1000 }), "muster", NOW + 1000);
  const c = parseRegistration(bytes({ ...good, facts: { ...good.facts, country: "fr" } }), "muster", NOW);
  const d = parseRegistration(bytes({ ...good, agents: ["discovery"] }), "muster", NOW);
  assert.ok(a.ok && b.ok && c.ok && d.ok);
  assert.equal(fingerprint(a.record), fingerprint(b.record));
  assert.notEqual(fingerprint(a.record), fingerprint(c.record));
  assert.notEqual(fingerprint(a.record), fingerprint(d.record));
});

test("keyFor gives valid KV keys and keeps distinct identities distinct", () => {
  const ids = ["web1.example.net", "a:b", "a_3ab", "user@host", "a_b", "a-b", "A.b", "x_5f"];
  const keys = ids.map(keyFor);
  assert.equal(new Set(keys).size, ids.length);
  for (const k of keys) assert.match(k, /^[-/_=.a-zA-Z0-9]+$/);
  assert.equal(keyFor("web1.example.net"), "web1.example.net");
  assert.equal(keyFor("a:b_c"), "a_3ab_5fc");
});
