import { test } from "node:test";
import assert from "node:assert/strict";
import { decodeNodeRecord, encodeNodeRecord, newRecord, parseNodeRecord, recordKey, type NodeRecord } from "../../src/protocol/provision-record.js";

// The provisioning record's codec: what every reader of the state bucket (provisioner, CLI, web,
// lab, decommission) accepts, and the reason it gives for what it refuses.

const T0 = Date.UTC(2026, 0, 1);
const full: NodeRecord = {
  ...newRecord("web1.example", T0),
  status: "in_progress",
  stage: "sign_csr",
  current: "bootstrap",
  attempts: 1,
  rounds: 2,
  master: "puppet1",
  masterAddress: "127.0.0.5",
  nodeAddress: "127.0.0.9",
  owner: "prov-a",
  claimExpires: T0 + 600_000,
  lockExpires: T0 + 900_000,
  startedAt: T0,
  timings: { lock: 3, sign_csr: 40 },
  stageTimes: { lock: { start: T0, end: T0 + 3 }, bootstrap: { start: T0 + 50 } },
  fingerprint: "AB:CD",
  nodeKey: "k".repeat(43) + "=",
  hadCert: false,
  signedBy: "puppet1",
  lastError: "bootstrap: no reply",
  gone: { since: T0 + 60_000, reason: "broker connection closed" },
  masterWait: { since: T0 + 90_000, reason: "waiting for its master puppet1, which does not answer", master: "puppet1" },
  log: ["2026-01-01T00:00:00.000Z provisioning started (discovery)"],
};

test("a record goes through the codec unchanged, gone and masterWait included; older records without them decode", () => {
  const r = decodeNodeRecord(encodeNodeRecord(full), recordKey(full.identity));
  assert.ok(r.ok, !r.ok ? r.reason : "");
  assert.deepEqual(r.record, full);
  const bare = decodeNodeRecord(encodeNodeRecord(newRecord("n1", T0)));
  assert.ok(bare.ok);
  assert.equal(bare.record.gone, undefined);
  assert.equal(bare.record.masterWait, undefined);
  const { masterWait: _, ...older } = full;
  const old = decodeNodeRecord(encodeNodeRecord(older as NodeRecord));
  assert.ok(old.ok, "a record written before masterWait existed");
  const anyMaster = decodeNodeRecord(encodeNodeRecord({ ...full, masterWait: { since: T0, reason: "waiting for a Puppet master: none answers (agent puppetca)" } }));
  assert.ok(anyMaster.ok, "waiting for any master: no master named");
});

test("fields this version does not know are kept; null optionals read as absent", () => {
  const r = parseNodeRecord({ ...newRecord("n1", T0), fromTheFuture: { x: 1 }, master: null });
  assert.ok(r.ok);
  assert.deepEqual((r.record as unknown as Record<string, unknown>).fromTheFuture, { x: 1 });
  assert.equal("master" in r.record, false);
});

test("hostile or broken values are refused with the field that is wrong", () => {
  const enc = (x: unknown) => new TextEncoder().encode(JSON.stringify(x));
  const base = newRecord("n1", T0) as unknown as Record<string, unknown>;
  const cases: [unknown, RegExp][] = [
    ["not an object", /not an object/],
    [[base], /not an object/],
    [{ ...base, identity: "" }, /no identity/],
    [{ ...base, identity: 7 }, /no identity/],
    [{ ...base, status: "exploded" }, /unknown status "exploded"/],
    [{ ...base, attempts: -1 }, /attempts is not a count/],
    [{ ...base, rounds: "2" }, /rounds is not a count/],
    [{ ...base, updatedAt: "yesterday" }, /updatedAt/],
    [{ ...base, timings: { lock: "fast" } }, /timings/],
    [{ ...base, timings: { reboot: 3 } }, /timings/],
    [{ ...base, log: "one line" }, /log/],
    [{ ...base, log: [1, 2] }, /log/],
    [{ ...base, stage: "reboot" }, /stage is not a stage/],
    [{ ...base, current: 3 }, /current is not a stage/],
    [{ ...base, master: { name: "m" } }, /master is not a string/],
    [{ ...base, claimExpires: "soon" }, /claimExpires/],
    [{ ...base, hadCert: "yes" }, /hadCert/],
    [{ ...base, gone: true }, /gone is not/],
    [{ ...base, gone: { since: T0 } }, /gone is not/],
    [{ ...base, gone: { since: "now", reason: "x" } }, /gone is not/],
    [{ ...base, masterWait: "puppet1" }, /masterWait is not/],
    [{ ...base, masterWait: { since: T0 } }, /masterWait is not/],
    [{ ...base, masterWait: { since: T0, reason: "x", master: 7 } }, /masterWait is not/],
    [{ ...base, stageTimes: { lock: { end: T0 } } }, /stageTimes/],
  ];
  for (const [value, why] of cases) {
    const r = decodeNodeRecord(enc(value));
    assert.equal(r.ok, false, `accepted ${JSON.stringify(value).slice(0, 80)}`);
    assert.match((r as { reason: string }).reason, why);
  }
  const garbled = decodeNodeRecord(new TextEncoder().encode("{nope"));
  assert.deepEqual(garbled, { ok: false, reason: "not JSON" });
});

test("a record must sit under its own identity's key", () => {
  const r = decodeNodeRecord(encodeNodeRecord(newRecord("a@b", T0)), "somebody_2delse");
  assert.equal(r.ok, false);
  assert.match((r as { reason: string }).reason, /stored under somebody_2delse, names a@b/);
  assert.ok(decodeNodeRecord(encodeNodeRecord(newRecord("a@b", T0)), recordKey("a@b")).ok);
});
