import { test } from "node:test";
import assert from "node:assert/strict";
import { encodeHeartbeat, parseHeartbeat, type Heartbeat } from "../../src/protocol/heartbeat.js";
import { encodeServiceBeat, MAX_SERVICE_BEAT_BYTES, parseServiceBeat, serviceKey, serviceRoleSubjects, serviceSubject, type ServiceBeat } from "../../src/protocol/service.js";

// The service heartbeat record (src/protocol/service.ts) and the services a node's heartbeat
// carries: what readers take from a bucket admins can write, field by field, and hostile values
// refused with a reason, never a throw.

const beat: ServiceBeat = { name: "provisioner@p1.example.net", role: "provisioner", time: 1, interval: 10, version: "0.1.0", state: "up", checks: [{ name: "cycle", status: "ok", why: "fine" }], details: { queued: 0 } };
const enc = (v: unknown) => new TextEncoder().encode(typeof v === "string" ? v : JSON.stringify(v));

test("a service beat round-trips under its own key, and its key and subjects are its role's", () => {
  const key = serviceKey("provisioner", beat.name);
  assert.equal(key, "provisioner.provisioner_40p1.example.net");
  const p = parseServiceBeat(encodeServiceBeat(beat), key);
  assert.ok(p.ok, JSON.stringify(p));
  assert.deepEqual(p.beat, beat);
  assert.equal(serviceSubject("provisioner", beat.name), `$KV.muster_services.${key}`);
  assert.equal(serviceRoleSubjects("registry"), "$KV.muster_services.registry.>");
  // a broker's beat, written by the console watching it, names its observer
  const b = parseServiceBeat(encodeServiceBeat({ ...beat, name: "nats1", role: "broker", observer: { name: "console.lab", answers: false } }), "broker.nats1");
  assert.ok(b.ok && b.beat.observer?.answers === false && b.beat.observer.name === "console.lab");
});

test("a console's lost stretches round-trip, open or closed", () => {
  const lost = [{ from: 1000, to: 2000, why: "jetstream is not enabled" }, { from: 3000, why: "no responders" }];
  const p = parseServiceBeat(enc({ ...beat, lost }));
  assert.ok(p.ok);
  assert.deepEqual(p.beat.lost, lost);
});

test("hostile service beats are refused with a reason: another's key, a role that is none, bad checks, wrong types, garbage", () => {
  const bad: [unknown, string | undefined, RegExp][] = [
    [beat, "provisioner.someone-else", /stored under provisioner\.someone-else, names provisioner/],
    [beat, "registry.provisioner_40p1.example.net", /stored under registry\./],
    [{ ...beat, role: "admin" }, undefined, /role must be one of/],
    [{ ...beat, name: "bad name" }, undefined, /name must be a valid identity/],
    [{ ...beat, checks: [{ name: "x", status: "green", why: "" }] }, undefined, /each check must be/],
    [{ ...beat, checks: "all good" }, undefined, /checks must be a list/],
    [{ ...beat, checks: Array.from({ length: 65 }, () => ({ name: "x", status: "ok", why: "" })) }, undefined, /at most 64/],
    [{ ...beat, details: [1] }, undefined, /details must be an object/],
    [{ ...beat, interval: 0 }, undefined, /interval must be seconds/],
    [{ ...beat, state: "dead" }, undefined, /state must be up or stopping/],
    [{ ...beat, observer: { name: "x" } }, undefined, /observer must be/],
    [{ ...beat, lost: "always" }, undefined, /lost must be a list of at most 16/],
    [{ ...beat, lost: Array.from({ length: 17 }, () => ({ from: 1, why: "" })) }, undefined, /at most 16/],
    [{ ...beat, lost: [{ from: 2000, to: 1000, why: "" }] }, undefined, /to not before from/],
    [{ ...beat, lost: [{ from: "yesterday", why: "" }] }, undefined, /each lost stretch/],
    [{ ...beat, lost: [{ from: 1000, why: 7 }] }, undefined, /each lost stretch/],
    ["not json", undefined, /not UTF-8 JSON/],
    ["[1,2]", undefined, /not a JSON object/],
  ];
  for (const [v, key, re] of bad) {
    const p = parseServiceBeat(enc(v), key);
    assert.equal(p.ok, false, JSON.stringify(v));
    assert.match((p as { reason: string }).reason, re);
  }
  assert.match((parseServiceBeat(new Uint8Array(MAX_SERVICE_BEAT_BYTES + 1)) as { reason: string }).reason, /too large/);
  assert.equal(parseServiceBeat(new Uint8Array([0xff, 0xfe])).ok, false);
});

test("a node's heartbeat carries the services it is, checked like a service beat; an ordinary node's carries none", () => {
  const hb: Heartbeat = { identity: "puppet-eu.lab", time: 1, interval: 10, version: "1", phase: "serving", state: "up", status: {}, services: [{ role: "master", checks: [{ name: "ca", status: "warn", why: "12 days left" }], details: {} }] };
  const p = parseHeartbeat(encodeHeartbeat(hb), "puppet-eu.lab");
  assert.ok(p.ok && p.heartbeat.services?.[0]?.role === "master");
  const plain = parseHeartbeat(encodeHeartbeat({ ...hb, services: undefined }), "puppet-eu.lab");
  assert.ok(plain.ok && plain.heartbeat.services === undefined);
  const bad = parseHeartbeat(enc({ ...hb, services: [{ role: "master", checks: [{ name: "ca" }] }] }), "puppet-eu.lab");
  assert.ok(!bad.ok && /services: each check/.test(bad.reason));
  assert.ok(!parseHeartbeat(enc({ ...hb, services: {} }), "puppet-eu.lab").ok);
});
