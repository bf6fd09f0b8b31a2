import { test } from "node:test";
import assert from "node:assert/strict";
import { alertsFor, RESTART_GRACE_S, type AlertState } from "../../src/health/alerts.js";
import { DEFAULT_HEALTH_POLICY, healthReport, type HealthInputs, type HealthReport } from "../../src/health/model.js";
import type { Heartbeat } from "../../src/protocol/heartbeat.js";
import type { PuppetRunRecord } from "../../src/protocol/puppet-run.js";

// When the admins are told (src/health/alerts.ts, pure): once per trouble, once per recovery,
// with keys every console computes the same, so the notifier sends each once.

const T0 = Date.parse("2026-03-01T12:00:00Z");
const hb: Heartbeat = { identity: "web1", time: T0, interval: 10, version: "1", phase: "serving", state: "up", status: {} };
const at = (lastSeen: number, runs: PuppetRunRecord[] = []): HealthInputs => ({ identity: "web1", beat: { heartbeat: hb, at: lastSeen }, runs });
const report = (i: HealthInputs, now: number) => healthReport([i], DEFAULT_HEALTH_POLICY, now);
const policy = { unreachableAfterS: 0, puppetFailures: 3 };

test("unreachable: told once when it goes, once when it is back; a second console computes the same keys", () => {
  const state: AlertState = new Map();
  assert.deepEqual(alertsFor(state, report(at(T0), T0 + 5000), policy), []);
  const gone = alertsFor(state, report(at(T0), T0 + 30_000), policy);
  assert.equal(gone.length, 1);
  assert.deepEqual([gone[0]!.event, gone[0]!.subject], ["problem", "muster: web1 unreachable"]);
  assert.equal(gone[0]!.dedupe_key, `health#web1#unreachable#${new Date(T0).toISOString()}`);
  assert.match(gone[0]!.message, /no heartbeat for 30 s/);
  assert.deepEqual(alertsFor(state, report(at(T0), T0 + 60_000), policy), [], "not again while it stays unreachable");
  // another console (or this one restarted) sees the same outage: the same key, which the notifier sends once
  assert.equal(alertsFor(new Map(), report(at(T0), T0 + 90_000), policy)[0]!.dedupe_key, gone[0]!.dedupe_key);
  const back = alertsFor(state, report(at(T0 + 100_000), T0 + 101_000), policy);
  assert.deepEqual(back.map((a) => [a.event, a.subject]), [["recovered", "muster: web1 reachable again"]]);
  assert.match(back[0]!.message, /after 101 s/);
  assert.equal(state.size, 0);
});

test("a higher threshold waits longer; Puppet is reported after N failed runs in a row, keyed by when the streak began", () => {
  assert.deepEqual(alertsFor(new Map(), report(at(T0), T0 + 30_000), { ...policy, unreachableAfterS: 60 }), []);
  assert.equal(alertsFor(new Map(), report(at(T0), T0 + 61_000), { ...policy, unreachableAfterS: 60 }).length, 1);
  const run = (ago: number, status: PuppetRunRecord["status"]): PuppetRunRecord => ({ identity: "web1", time: T0 - ago * 1000, status, resources: { total: 5, changed: 0, failed: status === "failed" ? 1 : 0 }, duration_s: 1, config_version: null });
  const state: AlertState = new Map();
  const two = [run(60, "failed"), run(120, "failed"), run(180, "changed")];
  assert.deepEqual(alertsFor(state, report(at(T0, two), T0 + 1000), policy), []);
  const three = [run(0, "failed"), ...two];
  const told = alertsFor(state, report(at(T0, three), T0 + 1000), policy);
  assert.deepEqual(told.map((a) => [a.kind, a.event]), [["puppet_failing", "problem"]]);
  assert.equal(told[0]!.dedupe_key, `health#web1#puppet_failing#${new Date(T0 - 120_000).toISOString()}`);
  const fixed = alertsFor(state, report(at(T0, [run(-10, "changed"), ...three]), T0 + 20_000), policy);
  assert.deepEqual(fixed.map((a) => [a.kind, a.event, a.subject]), [["puppet_failing", "recovered", "muster: web1 Puppet runs again"]]);
  assert.deepEqual(alertsFor(new Map(), report(at(T0, three), T0 + 1000), { ...policy, puppetFailures: 0 }), [], "0 turns Puppet alerts off");
});

test("a restart is no outage: a node whose last heartbeat said it was stopping is reported only once it stays silent past the grace; back sooner, nobody is told either way", () => {
  const stopping: Heartbeat = { ...hb, state: "stopping" };
  const said = (lastSeen: number): HealthInputs => ({ identity: "web1", beat: { heartbeat: stopping, at: lastSeen }, runs: [] });
  const state: AlertState = new Map();
  // unreachable at once (it said it was stopping), not alerted within the grace
  assert.equal(report(said(T0), T0 + 5000).nodes[0]!.reachable, false);
  assert.deepEqual(alertsFor(state, report(said(T0), T0 + 5000), policy), []);
  // back 8 s later (the server restarted into production): no alert, and no recovery either
  assert.deepEqual(alertsFor(state, report(at(T0 + 8000), T0 + 9000), policy), []);
  assert.equal(state.size, 0);
  // a stop that lasts: told once the grace is over
  const told = alertsFor(state, report(said(T0), T0 + (RESTART_GRACE_S + 1) * 1000), policy);
  assert.deepEqual(told.map((a) => [a.event, a.subject]), [["problem", "muster: web1 unreachable"]]);
  assert.match(told[0]!.message, /stopping/);
});

test("a site service down past the grace is told once, keyed by role and name; back, told once; a quick restart tells nobody", () => {
  type Svc = HealthReport["services"][number];
  const svc = (up: boolean, seenAgoS: number): Svc => ({
    name: "provisioner@provisioner2",
    role: "provisioner",
    up,
    last_seen: new Date(T0).toISOString(),
    seen_s_ago: seenAgoS,
    observer: null,
    version: "1",
    checks: [],
    details: {},
    problems: up ? [] : [{ kind: "down", why: `no service heartbeat for ${seenAgoS} s`, since: new Date(T0).toISOString() }],
  });
  const withSvc = (s: Svc, now: number): HealthReport => ({ ...report(at(now), now), services: [s] });
  const state: AlertState = new Map();
  assert.deepEqual(alertsFor(state, withSvc(svc(false, RESTART_GRACE_S - 5), T0 + 15_000), policy), [], "within the grace: a restart, nobody told");
  const down = alertsFor(state, withSvc(svc(false, 30), T0 + 30_000), policy);
  assert.deepEqual(down.map((a) => [a.event, a.kind, a.identity, a.subject]), [["problem", "service_down", "provisioner/provisioner@provisioner2", "muster: provisioner/provisioner@provisioner2 down"]]);
  assert.equal(down[0]!.dedupe_key, `health#provisioner/provisioner@provisioner2#service_down#${new Date(T0).toISOString()}`);
  assert.deepEqual(alertsFor(state, withSvc(svc(false, 60), T0 + 60_000), policy), [], "not again while it stays down");
  const back = alertsFor(state, withSvc(svc(true, 1), T0 + 90_000), policy);
  assert.deepEqual(back.map((a) => [a.event, a.subject]), [["recovered", "muster: provisioner/provisioner@provisioner2 up again"]]);
  assert.equal(state.size, 0);
});

test("a broker holding a stuck copy is told once as store_copy_stuck with the rebuild to run, once more when whole; its going down meanwhile keeps the stuck alert open", () => {
  type Svc = HealthReport["services"][number];
  const since = new Date(T0).toISOString();
  const why = "1 copy stuck apart from the leader's, no spare should the leader restart: KV_muster_provision: its copy has stayed at 44 for 30 s while its leader nats1 is at 84. Rebuild: muster broker stores --rebuild nats2 (docs/deploy.md#a-broker-back-from-a-power-cut)";
  const broker = (o: { up?: boolean; stuck?: boolean }): Svc => ({
    name: "nats2",
    role: "broker",
    up: o.up ?? true,
    last_seen: since,
    seen_s_ago: o.up === false ? 60 : 2,
    observer: "console.lab",
    version: "2.10.27",
    checks: o.stuck ? [{ name: "streams", status: "fail", why }] : [{ name: "streams", status: "ok", why: "3 replicated stream copies current" }],
    details: o.stuck ? { stuck: [{ stream: "KV_muster_provision", leader: "nats1", seq: 44, leader_seq: 84, since, for_s: 30 }] } : {},
    problems: o.up === false ? [{ kind: "down", why: "does not answer console.lab", since }] : o.stuck ? [{ kind: "failing", why: `streams: ${why}` }] : [],
  });
  const withSvc = (s: Svc, now: number): HealthReport => ({ ...report(at(now), now), services: [s] });
  const state: AlertState = new Map();
  assert.deepEqual(alertsFor(state, withSvc(broker({}), T0), policy), []);
  const told = alertsFor(state, withSvc(broker({ stuck: true }), T0 + 30_000), policy);
  assert.deepEqual(told.map((a) => [a.event, a.kind, a.identity, a.subject]), [["problem", "store_copy_stuck", "broker/nats2", "muster: broker/nats2 store copy stuck"]]);
  assert.match(told[0]!.message, /muster broker stores --rebuild nats2/);
  assert.equal(told[0]!.dedupe_key, `health#broker/nats2#store_copy_stuck#${since}`);
  assert.deepEqual(alertsFor(state, withSvc(broker({ stuck: true }), T0 + 35_000), policy), [], "not again while it stays stuck");
  // down meanwhile: told as down; the stuck alert is not ended by a broker that cannot be looked at
  const down = alertsFor(state, withSvc(broker({ up: false }), T0 + 120_000), policy);
  assert.deepEqual(down.map((a) => [a.event, a.kind]), [["problem", "service_down"]]);
  const back = alertsFor(state, withSvc(broker({}), T0 + 180_000), policy);
  assert.deepEqual(back.map((a) => [a.event, a.kind, a.subject]).sort(), [
    ["recovered", "service_down", "muster: broker/nats2 up again"],
    ["recovered", "store_copy_stuck", "muster: broker/nats2 store copies whole again"],
  ]);
  assert.equal(back.find((a) => a.kind === "store_copy_stuck")!.alert, `health#broker/nats2#store_copy_stuck#${since}`, "the recovery names the alert it ends");
  assert.equal(state.size, 0);
});

test("a delivery that failed is tried again 10 s later, then 20 s, 40 s, and every minute while it fails", async () => {
  const { retryDelay } = await import("../../src/health/alerter.js");
  assert.deepEqual([1, 2, 3, 4, 5, 50].map(retryDelay), [10_000, 20_000, 40_000, 60_000, 60_000, 60_000]);
});
