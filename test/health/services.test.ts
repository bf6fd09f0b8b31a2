import { test } from "node:test";
import assert from "node:assert/strict";
import { masterChecks } from "../../src/agents/puppetca/service.js";
import { DeliveryHealth } from "../../src/agents/notify/delivery-health.js";
import { DEFAULT_HEALTH_POLICY, healthExitCode, healthReport } from "../../src/health/model.js";
import { servicesHealth, summariseServices } from "../../src/health/services.js";
import type { Beat, ServiceSeen } from "../../src/health/stores.js";
import type { Heartbeat } from "../../src/protocol/heartbeat.js";
import type { ServiceBeat } from "../../src/protocol/service.js";
import { provisionerStatus } from "../../src/provisioner/service.js";
import { registryServiceStatus } from "../../src/registry/health.js";

// The site's services in the health model (src/health/services.ts) at a fixed clock: each one
// alive by what it sends, its failing checks its problem, a broker as its observer saw it, and
// what each service says of itself (provisioner, registry, master, notifier), pure.

const NOW = Date.parse("2026-03-01T12:00:00Z");
const sb = (over: Partial<ServiceBeat> & Pick<ServiceBeat, "name" | "role">, agoS: number): ServiceSeen => ({ beat: { time: NOW, interval: 10, version: "0.1.0", state: "up", checks: [], details: {}, ...over }, at: NOW - agoS * 1000 });
const node = (identity: string, agoS: number, over: Partial<Heartbeat> = {}): { identity: string; beat: Beat } => ({ identity, beat: { heartbeat: { identity, time: NOW, interval: 10, version: "1", phase: "serving", state: "up", status: {}, ...over }, at: NOW - agoS * 1000 } });

test("each service alive by its own beat: down after its silence or its stopping beat, failing by a failed check, a warning alone is healthy", () => {
  const list = servicesHealth(
    {
      beats: [
        sb({ name: "p1", role: "provisioner", checks: [{ name: "cycle", status: "ok", why: "fine" }] }, 3),
        sb({ name: "p2", role: "provisioner" }, 40),
        sb({ name: "reg", role: "registry", state: "stopping" }, 5),
        sb({ name: "web", role: "console", checks: [{ name: "alerts", status: "fail", why: "no notifier answered" }] }, 2),
        sb({ name: "nats1", role: "broker", observer: { name: "web", answers: true }, checks: [{ name: "answers", status: "ok", why: "yes" }] }, 2),
        sb({ name: "nats3", role: "broker", observer: { name: "web", answers: false }, checks: [{ name: "answers", status: "fail", why: "no answer on http://nats3:8222: ECONNREFUSED" }] }, 2),
        sb({ name: "nats2", role: "broker", observer: { name: "web", answers: true } }, 90),
      ],
      nodes: [node("puppet-eu.lab", 4, { services: [{ role: "master", checks: [{ name: "ca", status: "warn", why: "12 days left" }], details: {} }] }), node("node1.lab", 2)],
    },
    25,
    NOW,
  );
  const by = Object.fromEntries(list.map((s) => [`${s.role}/${s.name}`, s]));
  // brokers first, then masters, provisioners, registry, console
  assert.deepEqual(list.map((s) => `${s.role}/${s.name}`), ["broker/nats1", "broker/nats2", "broker/nats3", "master/puppet-eu.lab", "provisioner/p1", "provisioner/p2", "registry/reg", "console/web"]);
  assert.deepEqual(by["provisioner/p1"]!.problems, []);
  assert.match(by["provisioner/p2"]!.problems[0]!.why, /^no heartbeat for 40 s \(one is due every 10 s; down after 25 s\)$/);
  assert.equal(by["provisioner/p2"]!.up, false);
  assert.match(by["registry/reg"]!.problems[0]!.why, /stopping/);
  assert.deepEqual(by["console/web"]!.problems.map((p) => [p.kind, p.why]), [["failing", "alerts: no notifier answered"]]);
  assert.deepEqual(by["broker/nats3"]!.problems.map((p) => p.kind), ["down"]);
  assert.match(by["broker/nats3"]!.problems[0]!.why, /does not answer web: answers: no answer on http:\/\/nats3:8222/);
  // the observer silent: not "down" but "unobserved", which names who should have said
  assert.deepEqual(by["broker/nats2"]!.problems.map((p) => p.kind), ["unobserved"]);
  assert.match(by["broker/nats2"]!.problems[0]!.why, /web, which watches it, has not reported/);
  assert.equal(by["master/puppet-eu.lab"]!.problems.length, 0, "a warning alone keeps a service healthy");
  assert.equal(by["master/puppet-eu.lab"]!.checks[0]!.status, "warn");
  assert.deepEqual(summariseServices(list), { services: 8, healthy: 3, unhealthy: 5, down: 3, unobserved: 1, failing: 1 });
});

test("the exit code counts a service as it counts a node; a report narrowed by a filter lists no service", () => {
  const nodes = [{ identity: "n1", beat: node("n1", 1).beat }];
  const ok = healthReport(nodes, DEFAULT_HEALTH_POLICY, NOW, { services: { beats: [sb({ name: "p1", role: "provisioner" }, 1)], nodes: [] } });
  assert.equal(healthExitCode(ok), 0);
  const down = healthReport(nodes, DEFAULT_HEALTH_POLICY, NOW, { services: { beats: [sb({ name: "p1", role: "provisioner" }, 100)], nodes: [] } });
  assert.equal(down.summary.unhealthy, 0);
  assert.equal(healthExitCode(down), 2);
  assert.equal(healthExitCode(healthReport([], DEFAULT_HEALTH_POLICY, NOW, { services: { beats: [sb({ name: "p1", role: "provisioner" }, 1)], nodes: [] } })), 0, "services alone are something known");
  assert.equal(healthExitCode(healthReport([], DEFAULT_HEALTH_POLICY, NOW)), 1);
  assert.deepEqual(healthReport(nodes, DEFAULT_HEALTH_POLICY, NOW).services, []);
});

test("a provisioner says its claims, queue and last cycle; a failed or late cycle fails its check", () => {
  const claims = { provisioning: ["a", "b"], queued: 1, parked: ["c"], waitingForMaster: [] };
  const ok = provisionerStatus({ claims, lastCycle: { at: NOW - 5000, tookMs: 120, found: 3 }, sleeptimeS: 5, id: "p1" }, NOW);
  assert.deepEqual(ok.checks.map((c) => [c.name, c.status]), [["cycle", "ok"], ["claims", "ok"]]);
  assert.match(ok.checks[0]!.why, /5 s ago, found 3 waiting nodes in 120 ms/);
  assert.match(ok.checks[1]!.why, /holds 3 nodes: 2 provisioning \(1 of them waiting for a slot\), 1 gone, 0 waiting for a master/);
  assert.deepEqual(ok.details.provisioning, ["a", "b"]);
  const failed = provisionerStatus({ claims, lastCycle: { at: NOW - 5000, tookMs: 0, found: 0, error: "no responders" }, sleeptimeS: 5, id: "p1" }, NOW);
  assert.match(failed.checks[0]!.why, /failed: no responders/);
  const late = provisionerStatus({ claims, lastCycle: { at: NOW - 200_000, tookMs: 1, found: 0 }, sleeptimeS: 5, id: "p1" }, NOW);
  assert.equal(late.checks[0]!.status, "fail");
  assert.match(late.checks[0]!.why, /no discovery cycle has finished for 200 s/);
});

test("the registry warns while it hears from nobody and fails when its writes fail", () => {
  const stats = { received: 10, accepted: 10, rejected: {} as never, written: 4, unchanged: 6, merged: 0, dropped: 0, writeErrors: 2 };
  const ok = registryServiceStatus({ nodes: 3, newest_seen: NOW - 4000, expire_after_ms: 900_000 }, stats, 2, NOW);
  assert.deepEqual(ok.checks.map((c) => c.status), ["ok", "ok"]);
  const bad = registryServiceStatus({ nodes: 0, newest_seen: null, expire_after_ms: 900_000 }, stats, 0, NOW);
  assert.deepEqual(bad.checks.map((c) => c.status), ["warn", "fail"]);
  assert.match(bad.checks[1]!.why, /2 writes to its bucket failed/);
});

test("a master: puppetserver's status API and the CA's days left; an expiring CA warns, an expired one or no answer fails", () => {
  const day = 86_400_000;
  const far = masterChecks({ ok: true, state: "running" }, { notAfter: new Date(NOW + 400 * day).toISOString() }, NOW);
  assert.deepEqual(far.checks.map((c) => [c.name, c.status]), [["puppetserver", "ok"], ["ca", "ok"]]);
  assert.match(far.checks[1]!.why, /400 days left/);
  assert.equal(far.details.ca_days_left, 400);
  assert.equal(masterChecks({ ok: true, state: "running" }, { notAfter: new Date(NOW + 12 * day).toISOString() }, NOW).checks[1]!.status, "warn");
  assert.equal(masterChecks({ ok: true, state: "running" }, { notAfter: new Date(NOW - day).toISOString() }, NOW).checks[1]!.status, "fail");
  const down = masterChecks(new Error("connect ECONNREFUSED"), new Error("cannot reach the CA"), NOW);
  assert.deepEqual(down.checks.map((c) => c.status), ["fail", "fail"]);
  assert.equal(masterChecks({ ok: false, state: "starting" }, { notAfter: new Date(NOW + 400 * day).toISOString() }, NOW).checks[0]!.why, "status API: starting");
});

test("the notifier answers when its last delivery worked, and fails, naming the recipient and why, when it did not", () => {
  const h = new DeliveryHealth();
  assert.equal(h.status(NOW).checks[0]!.status, "ok");
  h.record({ at: NOW - 3000, subject: "s", results: [{ recipient: "https://hooks/x", ok: false, error: "HTTP 500" }, { recipient: "mailto:a@b", ok: true }] });
  const failed = h.status(NOW);
  assert.equal(failed.checks[0]!.status, "fail");
  assert.match(failed.checks[0]!.why, /the last delivery \(3 s ago\) failed for https:\/\/hooks\/x: HTTP 500/);
  h.record({ at: NOW - 1000, subject: "t", results: [{ recipient: "https://hooks/x", ok: true }] });
  const ok = h.status(NOW);
  assert.equal(ok.checks[0]!.status, "ok");
  assert.deepEqual([ok.details.delivered, ok.details.failed], [2, 1]);
  assert.ok(ok.details.last_failure, "the last failure is still named after a success");
});
