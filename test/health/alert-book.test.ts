import { test } from "node:test";
import assert from "node:assert/strict";
import { AlertBook, ackTargets, parseSilenceLength } from "../../src/health/alert-book.js";
import { encodeAlertEvent, parseAlertEvent, type AlertEvent } from "../../src/protocol/alert-event.js";

// The alerts' history folded (src/health/alert-book.ts, pure): what is open and who was told, who
// acknowledged it, silences and their end, how the last delivery went; and the history's events
// checked as they are read back (the stream is writable by every admin).

const T = Date.parse("2026-03-01T12:00:00Z");
const A = "health#web1#unreachable#2026-03-01T11:59:30.000Z";
const ev = (x: Partial<AlertEvent> & Pick<AlertEvent, "type">, at = 0): AlertEvent => ({ time: T + at * 1000, by: "console:c1", ...x });

test("an alert fired and told is open with who was told; acknowledged, it says by whom; resolved, it is gone", () => {
  const b = new AlertBook([ev({ type: "fired", identity: "web1", kind: "unreachable", alert: A, subject: "muster: web1 unreachable", told: ["https://hooks.example/ops"], notifier: "console.lab" })]);
  let v = b.view(T + 5000);
  assert.deepEqual(v.open.map((a) => [a.identity, a.kind, a.delivery, a.told]), [["web1", "unreachable", "told", ["https://hooks.example/ops"]]]);
  assert.deepEqual([v.last_delivery?.ok, v.last_delivery?.told, v.last_delivery?.notifier], [true, ["https://hooks.example/ops"], "console.lab"]);
  b.apply(ev({ type: "acknowledged", identity: "web1", kind: "unreachable", alert: A, by: "web:alice", note: "on it" }, 10));
  v = b.view(T + 11_000);
  assert.deepEqual(v.open[0]!.acknowledged, { by: "web:alice", at: new Date(T + 10_000).toISOString(), note: "on it" });
  b.apply(ev({ type: "resolved", identity: "web1", kind: "unreachable", alert: A, told: ["https://hooks.example/ops"] }, 60));
  v = b.view(T + 61_000);
  assert.deepEqual(v.open, []);
  assert.deepEqual(v.history.map((e) => e.type), ["resolved", "acknowledged", "fired"], "newest first");
});

test("deliveries that fail: the alert is open and not told, the last delivery says why and since when; a success clears it", () => {
  const b = new AlertBook();
  b.apply(ev({ type: "delivery_failed", of: "fired", identity: "web1", kind: "unreachable", alert: A, error: "no notifier answered discovery" }));
  b.apply(ev({ type: "delivery_failed", of: "fired", identity: "web1", kind: "unreachable", alert: A, error: "console.lab did not answer" }, 60));
  let v = b.view(T + 61_000);
  assert.deepEqual(v.open.map((a) => [a.delivery, a.why]), [["failing", "console.lab did not answer"]]);
  assert.deepEqual([v.last_delivery?.ok, v.last_delivery?.error, v.last_delivery?.failing_since], [false, "console.lab did not answer", new Date(T).toISOString()]);
  b.apply(ev({ type: "fired", identity: "web1", kind: "unreachable", alert: A, told: ["mailto:ops@example.net"] }, 120));
  v = b.view(T + 121_000);
  assert.deepEqual(v.open.map((a) => [a.delivery, a.told, a.fired]), [["told", ["mailto:ops@example.net"], new Date(T).toISOString()]], "fired when it first did, told when it finally was");
  assert.equal(v.last_delivery?.ok, true);
  // a resolution that cannot be told still ends the alert; the failure is the last delivery
  b.apply(ev({ type: "delivery_failed", of: "resolved", identity: "web1", kind: "unreachable", alert: A, error: "HTTP 500" }, 200));
  v = b.view(T + 201_000);
  assert.deepEqual([v.open.length, v.last_delivery?.ok, v.last_delivery?.failing_since], [0, false, new Date(T + 200_000).toISOString()]);
});

test("a silence holds until its time; ended early, it is gone; a held alert says why nobody was told", () => {
  const b = new AlertBook([ev({ type: "silenced", identity: "web1", until: T + 3_600_000, by: "user=ops", note: "disk swap" })]);
  assert.equal(b.silenced("web1", T + 60_000)?.by, "user=ops");
  assert.equal(b.silenced("web1", T + 3_600_001), undefined, "over at its time");
  assert.equal(b.silenced("web2", T), undefined);
  b.apply(ev({ type: "fired", identity: "web1", kind: "unreachable", alert: A, told: [], held: "web1 is silenced until ..." }, 5));
  assert.deepEqual(b.view(T + 6000).open.map((a) => [a.delivery, a.why]), [["held", "web1 is silenced until ..."]]);
  assert.equal(b.view(T + 6000).last_delivery, null, "a held alert was no delivery");
  b.apply(ev({ type: "unsilenced", identity: "web1", by: "user=ops" }, 10));
  assert.equal(b.silenced("web1", T + 11_000), undefined);
  assert.deepEqual(b.view(T + 11_000).silences, []);
});

test("an event read twice (kept at once, then followed) counts once", () => {
  const b = new AlertBook();
  const e = ev({ id: "e1", type: "acknowledged", identity: "web1", kind: "unreachable", alert: A });
  b.apply(ev({ id: "f1", type: "fired", identity: "web1", kind: "unreachable", alert: A, told: ["x"] }));
  b.apply(e);
  b.apply(e);
  assert.equal(b.view(T).history.length, 2);
});

test("what an acknowledgement names: a node's open alerts, of one kind, or one by id; none open is an error saying so", () => {
  const B = "health#web1#puppet_failing#2026-03-01T10:00:00.000Z";
  const b = new AlertBook([ev({ type: "fired", identity: "web1", kind: "unreachable", alert: A, told: ["x"] }), ev({ type: "fired", identity: "web1", kind: "puppet_failing", alert: B, told: ["x"] })]);
  assert.equal(ackTargets(b, { identity: "web1" }).length, 2);
  assert.deepEqual(ackTargets(b, { identity: "web1", kind: "puppet_failing" }).map((a) => a.alert), [B]);
  assert.deepEqual(ackTargets(b, { alert: A }).map((a) => a.alert), [A]);
  assert.throws(() => ackTargets(b, { identity: "web2" }), /web2 has no open alert/);
  assert.throws(() => ackTargets(b, { alert: "health#web9#unreachable#never" }), /no open alert/);
  assert.throws(() => ackTargets(b, {}), /name the alert, or its node/);
});

test("a silence's length: 30m, 2h, 1d, 1h30m; too short, too long or garbled is refused saying what it takes", () => {
  assert.equal(parseSilenceLength("30m"), 1_800_000);
  assert.equal(parseSilenceLength("1h30m"), 5_400_000);
  assert.equal(parseSilenceLength(" 2h "), 7_200_000);
  assert.equal(parseSilenceLength("1d"), 86_400_000);
  assert.throws(() => parseSilenceLength("10s"), /at least a minute/);
  assert.throws(() => parseSilenceLength("31d"), /at most 30 days/);
  for (const bad of ["", "2 hours", "h", "-1h", "1h; rm -rf /", "1e9h"]) assert.throws(() => parseSilenceLength(bad), /(a length such as|at most)/, bad);
});

test("history events read back: each field checked; anything malformed, oversized or of the wrong type is refused whole", () => {
  const good = ev({ id: "x1", type: "silenced", identity: "web1", until: T + 60_000, note: "n" });
  assert.deepEqual(parseAlertEvent(encodeAlertEvent(good)), { ok: true, event: good });
  const bad: [unknown, RegExp][] = [
    ["not json", /not UTF-8 JSON/],
    [[], /not a JSON object/],
    [{ ...good, type: "exploded" }, /type must be one of/],
    [{ ...good, time: "yesterday" }, /time must be/],
    [{ ...good, by: "" }, /by must name who/],
    [{ ...good, identity: "no spaces allowed" }, /identity must be a valid identity/],
    [{ ...good, until: undefined }, /says until when/],
    [{ type: "acknowledged", time: T, by: "x" }, /names its alert/],
    [{ ...good, told: "everyone" }, /told must be a list/],
    [{ ...good, note: "x".repeat(3000) }, /note must be text/],
    [{ ...good, of: "exploded" }, /of must be/],
  ];
  for (const [v, re] of bad) {
    const p = parseAlertEvent(typeof v === "string" ? v : JSON.stringify(v));
    assert.equal(p.ok, false, JSON.stringify(v).slice(0, 80));
    assert.match((p as { reason: string }).reason, re);
  }
  assert.match((parseAlertEvent(new Uint8Array(70_000)) as { reason: string }).reason, /too large/);
  assert.match((parseAlertEvent(new Uint8Array([0xff, 0xfe])) as { reason: string }).reason, /not UTF-8/);
});
