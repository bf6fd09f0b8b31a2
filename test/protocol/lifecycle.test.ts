import { test } from "node:test";
import assert from "node:assert/strict";
import { encodeLifecycleEvent, lifecycleEvent, lifecycleSubject, MAX_LIFECYCLE_BYTES, parseLifecycleEvent, type LifecycleEvent } from "../../src/protocol/lifecycle.js";
import { encodeNodeEvent, parseNodeEvent } from "../../src/protocol/events.js";
import { DEFAULT_REGISTRY_BUCKET, DEFAULT_STATE_BUCKET } from "../../src/protocol/buckets.js";
import { DEFAULT_STATE_BUCKET as PROVISIONER_STATE_BUCKET } from "../../src/provisioner/config.js";
import { DEFAULT_BUCKET as REGISTRY_BUCKET } from "../../src/registry/bucket.js";
import { BrokerAuthSpecSchema } from "../../src/broker/auth.js";

// Lifecycle events are hostile input: whoever may publish on muster.lifecycle.> can send anything.

const good = { type: "startup", identity: "web1.example.net", component: "server", version: "0.1.0", collectives: ["muster"], time: 1_700_000_000_000 };
const json = (o: unknown) => JSON.stringify(o);
const without = (k: keyof typeof good) => {
  const o: Record<string, unknown> = { ...good };
  delete o[k];
  return json(o);
};

test("a well-formed event parses to the union member its type names", () => {
  for (const type of ["startup", "shutdown"] as const) {
    const r = parseLifecycleEvent(json({ ...good, type }));
    assert.ok(r.ok, r.ok ? "" : r.reason);
    assert.deepEqual(r.event, { ...good, type });
    const e: LifecycleEvent = r.event;
    assert.equal(e.type, type);
  }
});

test("what the publisher encodes, the parser reads back, on the subject it names", () => {
  const e = lifecycleEvent("shutdown", { identity: "node01.eu.lab", component: "emulator", version: "1.2.3", collectives: ["provisioning", "muster"], time: 42 });
  assert.equal(lifecycleSubject(e), "muster.lifecycle.shutdown.emulator");
  const r = parseLifecycleEvent(encodeLifecycleEvent(e), lifecycleSubject(e));
  assert.deepEqual(r, { ok: true, event: e });
});

test("unknown extra fields are ignored and not passed on", () => {
  const r = parseLifecycleEvent(json({ ...good, extra: { x: 1 } }));
  assert.ok(r.ok);
  assert.equal("extra" in r.event, false);
});

const refused: [string, string | Uint8Array, RegExp, string?][] = [
  ["not UTF-8", new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]), /not UTF-8/],
  ["not JSON", "{type: startup}", /not JSON/],
  ["empty", "", /not JSON/],
  ["a JSON array", json([good]), /not a JSON object but an array/],
  ["JSON null", "null", /not a JSON object but null/],
  ["a JSON string", json("startup"), /not a JSON object but string/],
  ["no type", without("type"), /type must be a string, got undefined/],
  ["a numeric type", json({ ...good, type: 1 }), /type must be a string, got number/],
  ["an unknown type", json({ ...good, type: "reboot" }), /unknown type "reboot"; expected startup or shutdown/],
  ["no identity", without("identity"), /identity must be a string/],
  ["an identity of the wrong type", json({ ...good, identity: ["web1"] }), /identity must be a string, got an array/],
  ["an identity with a subject wildcard", json({ ...good, identity: "web1.>" }), /identity "web1.>" is not a valid identity/],
  ["an identity with a doubled dot", json({ ...good, identity: "web1..net" }), /not a valid identity/],
  ["an empty identity", json({ ...good, identity: "" }), /not a valid identity/],
  ["an overlong identity", json({ ...good, identity: "a".repeat(254) }), /not a valid identity/],
  ["no component", without("component"), /component must be a string/],
  ["a component with a dot", json({ ...good, component: "server.x" }), /component "server.x" is not a valid component name/],
  ["no version", without("version"), /version must be a string, got undefined/],
  ["an overlong version", json({ ...good, version: "1".repeat(65) }), /version is longer than 64/],
  ["no collectives", without("collectives"), /collectives must be an array, got undefined/],
  ["collectives as a string", json({ ...good, collectives: "muster" }), /collectives must be an array, got string/],
  ["a collective of the wrong type", json({ ...good, collectives: ["muster", 7] }), /collectives\[1\] 7 is not a valid collective name/],
  ["a collective with a wildcard", json({ ...good, collectives: ["*"] }), /collectives\[0\] "\*" is not a valid collective name/],
  ["too many collectives", json({ ...good, collectives: Array.from({ length: 1025 }, (_, i) => `c${i}`) }), /more than 1024 collectives/],
  ["no time", without("time"), /time must be a non-negative number of ms, got undefined/],
  ["time as a string", json({ ...good, time: "1700000000000" }), /time must be a non-negative number/],
  ["a negative time", json({ ...good, time: -1 }), /time must be a non-negative number/],
  ["too large", json({ ...good, pad: "x".repeat(MAX_LIFECYCLE_BYTES) }), /too large: \d+ bytes, at most 65536/],
  ["a startup payload on a shutdown subject", json(good), /a startup event from component server arrived on "muster.lifecycle.shutdown.server", not on muster.lifecycle.startup.server/, "muster.lifecycle.shutdown.server"],
  ["a server event on the emulator's subject", json(good), /not on muster.lifecycle.startup.server/, "muster.lifecycle.startup.emulator"],
];

for (const [what, payload, reason, subject] of refused) {
  test(`refused, with the reason: ${what}`, () => {
    const r = parseLifecycleEvent(payload, subject);
    assert.equal(r.ok, false, `${what} was accepted`);
    if (!r.ok) assert.match(r.reason, reason);
  });
}

test("node events: parsed, checked against their subject, garbage refused with a reason", () => {
  const e = { identity: "web1", agent: "puppet", event: "run_complete", time: 5, data: { requestid: "r1" } };
  assert.deepEqual(parseNodeEvent(encodeNodeEvent(e), "muster.event.puppet.run_complete"), { ok: true, event: e });
  const cases: [string, RegExp, string?][] = [
    ["{", /not UTF-8 JSON/],
    [json([]), /not a JSON object/],
    [json({ ...e, identity: "a b" }), /identity/],
    [json({ ...e, agent: "Puppet" }), /agent/],
    [json({ ...e, event: "run.complete" }), /event/],
    [json({ ...e, data: [1] }), /data must be a JSON object/],
    [json({ ...e, time: "now" }), /time/],
    [json(e), /arrived on muster.event.puppet.other/, "muster.event.puppet.other"],
  ];
  for (const [payload, reason, subject] of cases) {
    const r = parseNodeEvent(payload, subject);
    assert.equal(r.ok, false, payload);
    if (!r.ok) assert.match(r.reason, reason);
  }
});

test("bucket names: one definition, and every old name still agrees with it", () => {
  assert.equal(PROVISIONER_STATE_BUCKET, DEFAULT_STATE_BUCKET);
  assert.equal(REGISTRY_BUCKET, DEFAULT_REGISTRY_BUCKET);
  const spec = BrokerAuthSpecSchema.parse({});
  assert.equal(spec.state_bucket, DEFAULT_STATE_BUCKET);
  assert.equal(spec.registry_bucket, DEFAULT_REGISTRY_BUCKET);
});
