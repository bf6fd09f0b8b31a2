import { test } from "node:test";
import assert from "node:assert/strict";
import { DEFAULT_HEALTH_POLICY, failuresInARow, healthReport, nodeHealth, puppetDbView, type HealthInputs } from "../../src/health/model.js";
import { inScope } from "../../src/health/read.js";
import { encodeHeartbeat, parseHeartbeat, type Heartbeat } from "../../src/protocol/heartbeat.js";
import { newRecord } from "../../src/protocol/provision-record.js";
import { encodePuppetRun, parsePuppetRun, puppetRunFromStatus, summaryRunStatus, type PuppetRunRecord } from "../../src/protocol/puppet-run.js";
import { emptyFilter } from "../../src/protocol/types.js";
import { bucketKey } from "../../src/protocol/buckets.js";

// The health model (src/health/model.ts) and the records it reads (protocol/heartbeat.ts,
// protocol/puppet-run.ts): pure, so every rule is checked here against a fixed clock.

const NOW = Date.parse("2026-03-01T12:00:00Z");
const P = DEFAULT_HEALTH_POLICY;
const hb = (over: Partial<Heartbeat> = {}): Heartbeat => ({ identity: "web1", time: NOW, interval: 10, version: "1", phase: "serving", state: "up", status: {}, ...over });
const seen = (agoS: number, over: Partial<Heartbeat> = {}): HealthInputs => ({ identity: over.identity ?? "web1", beat: { heartbeat: hb(over), at: NOW - agoS * 1000 } });
const run = (ago: number, status: PuppetRunRecord["status"]): PuppetRunRecord => ({ identity: "web1", time: NOW - ago * 1000, status, resources: { total: 10, changed: status === "changed" ? 1 : 0, failed: status === "failed" ? 1 : 0 }, duration_s: 3, config_version: "1" });

test("a node is reachable while its heartbeats arrive, unreachable 25 s after the last, with why and since when", () => {
  assert.equal(nodeHealth(seen(24), P, NOW).reachable, true);
  const late = nodeHealth(seen(26), P, NOW);
  assert.equal(late.reachable, false);
  assert.equal(late.problems[0]?.kind, "unreachable");
  assert.match(late.problems[0]!.why, /no heartbeat for 26 s \(one is due every 10 s; unreachable after 25 s\)/);
  assert.equal(late.problems[0]!.since, new Date(NOW - 26_000).toISOString());
  assert.equal(late.last_seen, new Date(NOW - 26_000).toISOString());
  // a node that beats every 60 s is not unreachable after 26 s of silence, but after 150
  assert.equal(nodeHealth(seen(100, { interval: 60 }), P, NOW).reachable, true);
  assert.equal(nodeHealth(seen(151, { interval: 60 }), P, NOW).reachable, false);
});

test("a node whose last heartbeat said it was stopping is unreachable at once", () => {
  const h = nodeHealth(seen(1, { state: "stopping" }), P, NOW);
  assert.equal(h.reachable, false);
  assert.match(h.problems[0]!.why, /stopped 1 s ago/);
});

test("without heartbeats, the registry vouches for a node; known to neither, it is unreachable", () => {
  assert.equal(nodeHealth({ identity: "old", registered: true }, P, NOW).reachable, true);
  const h = nodeHealth({ identity: "old", provisioning: { ...newRecord("old", NOW), status: "done" } }, P, NOW);
  assert.equal(h.reachable, false);
  assert.match(h.problems[0]!.why, /never heard from/);
});

test("Puppet: failed with its streak, disabled with its message and since when, stale only while reachable", () => {
  const puppet = (over: Record<string, unknown>) => ({ enabled: true, lastrun: (NOW - 120_000) / 1000, total_resources: 10, changed_resources: 0, failed_resources: 2, last_run_status: "failed", ...over });
  const failing = nodeHealth({ ...seen(1, { status: { puppet: puppet({}) } }), runs: [run(120, "failed"), run(1920, "failed"), run(3720, "changed")] }, P, NOW);
  assert.equal(failing.puppet?.status, "failed");
  assert.equal(failing.puppet?.failures_in_a_row, 2);
  assert.match(failing.problems.find((p) => p.kind === "puppet_failed")!.why, /failed 2 min ago \(2 failed resources, 2 runs in a row\)/);
  const disabledSince = NOW - 3600_000;
  const off = nodeHealth(seen(1, { status: { puppet: puppet({ enabled: false, disabled: true, disable_message: "maintenance by jane", disabled_since: disabledSince, failed_resources: 0, last_run_status: "unchanged" }) } }), P, NOW);
  const p = off.problems.find((x) => x.kind === "puppet_disabled")!;
  assert.match(p.why, /disabled since .*: maintenance by jane/);
  assert.equal(p.since, new Date(disabledSince).toISOString());
  const old = puppet({ lastrun: (NOW - 7200_000) / 1000, failed_resources: 0, last_run_status: "unchanged" });
  assert.ok(nodeHealth(seen(1, { status: { puppet: old } }), P, NOW).problems.some((x) => x.kind === "puppet_stale"));
  // unreachable: the silence is the problem, not Puppet's age
  assert.deepEqual(nodeHealth(seen(60, { status: { puppet: old } }), P, NOW).problems.map((x) => x.kind), ["unreachable"]);
  assert.equal(failuresInARow([run(1, "failed"), run(2, "unchanged"), run(3, "failed")]), 1);
});

test("Puppet is stale past twice the node's own runinterval (its heartbeat says it), else an hour; a set threshold holds for every node", () => {
  const puppet = (lastrunAgoS: number, over: Record<string, unknown> = {}) => ({ status: { puppet: { enabled: true, lastrun: (NOW - lastrunAgoS * 1000) / 1000, total_resources: 10, changed_resources: 0, failed_resources: 0, last_run_status: "unchanged", ...over } } });
  const stale = (i: HealthInputs, policy = P) => nodeHealth(i, policy, NOW).problems.find((x) => x.kind === "puppet_stale");
  // every 10 minutes: 21 minutes without a run is stale, and says after how long
  const quick = nodeHealth(seen(1, puppet(1260, { runinterval: 600 })), P, NOW);
  assert.equal(quick.puppet?.stale_after_s, 1200);
  assert.match(stale(seen(1, puppet(1260, { runinterval: 600 })))!.why, /Puppet has not run for 21 min \(stale after 20 min\)/);
  assert.equal(stale(seen(1, puppet(1140, { runinterval: 600 }))), undefined, "19 minutes is not");
  // a node that does not say (an older muster, or garbage): Puppet's 30 minutes, twice
  for (const ri of [undefined, "600", -5, 0, Number.NaN]) {
    assert.equal(nodeHealth(seen(1, puppet(1260, { runinterval: ri })), P, NOW).puppet?.stale_after_s, 3600, String(ri));
    assert.equal(stale(seen(1, puppet(1260, { runinterval: ri }))), undefined, String(ri));
  }
  // a node that runs daily is not stale after 3 hours
  assert.equal(stale(seen(1, puppet(3 * 3600, { runinterval: 86_400 }))), undefined);
  // --stale-after / health.stale_after: one threshold for every node, whatever it runs at
  const fixed = { ...P, puppetStaleAfterS: 300 };
  assert.ok(stale(seen(1, puppet(400, { runinterval: 86_400 })), fixed));
  assert.equal(nodeHealth(seen(1, puppet(400, { runinterval: 600 })), fixed, NOW).puppet?.stale_after_s, 300);
});

test("provisioning: a failed node names the stage it failed at (as the board does), a gone one why", () => {
  const rec = { ...newRecord("n1", NOW), status: "failed" as const, stage: "sign_csr" as const, current: "bootstrap" as const, lastError: "puppet run failed" };
  const h = nodeHealth({ identity: "n1", registered: true, provisioning: rec }, P, NOW);
  assert.equal(h.provisioning?.stage, "bootstrap");
  assert.match(h.problems[0]!.why, /provisioning failed at bootstrap: puppet run failed/);
  const gone = nodeHealth({ identity: "n2", registered: true, provisioning: { ...newRecord("n2", NOW), status: "in_progress", current: "bootstrap", gone: { since: NOW - 5000, reason: "no answer for 20s" } } }, P, NOW);
  assert.equal(gone.problems[0]?.kind, "gone");
});

test("the report: unhealthy first (worst problem first), then by name; the summary counts each problem once per node", () => {
  const r = healthReport([seen(1, { identity: "b" }), seen(1, { identity: "a" }), seen(90, { identity: "z" }), { identity: "c", registered: true, provisioning: { ...newRecord("c", NOW), status: "failed" } }], P, NOW);
  assert.deepEqual(r.nodes.map((n) => n.identity), ["z", "c", "a", "b"]);
  assert.deepEqual({ nodes: r.summary.nodes, healthy: r.summary.healthy, unhealthy: r.summary.unhealthy, unreachable: r.summary.unreachable, provisioning_failed: r.summary.provisioning_failed }, { nodes: 4, healthy: 2, unhealthy: 2, unreachable: 1, provisioning_failed: 1 });
});

test("scope: no filter takes every known node; an identity filter also matches nodes the registry no longer knows", () => {
  assert.deepEqual([...inScope(["a", "b"], emptyFilter(), new Set(["c"]))].sort(), ["a", "b", "c"]);
  assert.deepEqual([...inScope(["web1", "db1"], { ...emptyFilter(), identity: ["/^web/"] }, new Set())], ["web1"]);
  assert.deepEqual([...inScope(["web1", "db1"], { ...emptyFilter(), class: ["apache"] }, new Set(["web9"]))], ["web9"]);
});

test("a run's status from its summary: failed resources or events, or no catalog applied; changed; unchanged", () => {
  assert.equal(summaryRunStatus({ resources: { total: 10, failed: 1 }, events: {} }), "failed");
  assert.equal(summaryRunStatus({ resources: { total: 10 }, events: { failure: 1 } }), "failed");
  assert.equal(summaryRunStatus({ resources: {}, events: {} }), "failed");
  assert.equal(summaryRunStatus({ resources: { total: 10, changed: 2 }, events: {} }), "changed");
  assert.equal(summaryRunStatus({ resources: { total: 10 }, events: {} }), "unchanged");
  assert.equal(puppetRunFromStatus("web1", { lastrun: 0 }), undefined);
  assert.equal(puppetRunFromStatus("web1", { lastrun: 100, changed_resources: 1, total_resources: 5 })?.status, "changed");
});

test("hostile heartbeats and runs are refused with a reason, and one stored under another node's key too", () => {
  const enc = (v: unknown) => new TextEncoder().encode(typeof v === "string" ? v : JSON.stringify(v));
  assert.equal(parseHeartbeat(encodeHeartbeat(hb()), bucketKey("web1")).ok, true);
  for (const [bad, why] of [
    ["{", /JSON/],
    [[1], /object/],
    [{ ...hb(), identity: "../x" }, /identity/],
    [{ ...hb(), interval: -1 }, /interval/],
    [{ ...hb(), phase: "x" }, /phase/],
    [{ ...hb(), state: "dead" }, /state/],
    [{ ...hb(), status: { puppet: 3 } }, /status/],
  ] as const) {
    const r = parseHeartbeat(enc(bad));
    assert.equal(r.ok, false, JSON.stringify(bad));
    assert.match((r as { reason: string }).reason, why);
  }
  assert.match((parseHeartbeat(encodeHeartbeat(hb()), bucketKey("db1")) as { reason: string }).reason, /stored under db1, names web1/);
  assert.equal(parseHeartbeat(new Uint8Array(70_000)).ok, false);
  assert.equal(parsePuppetRun(encodePuppetRun(run(1, "failed")), bucketKey("web1")).ok, true);
  assert.equal(parsePuppetRun(enc({ ...run(1, "failed"), status: "maybe" })).ok, false);
  assert.equal(parsePuppetRun(enc({ ...run(1, "failed"), resources: { total: -1, changed: 0, failed: 0 } })).ok, false);
});

// PuppetDB as the second witness (docs/puppetdb.md#fleet-health): its reports are the record of
// Puppet runs where one is configured, and the two disagreements are flagged.
const ranAgo = (s: number, status = "unchanged") => ({ puppet: { enabled: true, lastrun: (NOW - s * 1000) / 1000, total_resources: 10, changed_resources: 0, failed_resources: 0, last_run_status: status } });
const inPdb = (reportAgoS: number | null, status: PuppetRunRecord["status"] | null = "unchanged") => ({ active: true, report_at: reportAgoS === null ? null : NOW - reportAgoS * 1000, status: reportAgoS === null ? null : status });

test("PuppetDB: a node it lists active that has not answered past the threshold is flagged, with what to do", () => {
  const gone = nodeHealth({ ...seen(60), puppetdb: inPdb(600) }, P, NOW);
  assert.deepEqual(gone.problems.map((p) => p.kind), ["unreachable", "puppetdb_active"]);
  assert.match(gone.problems[1]!.why, /PuppetDB still lists it active, its last report 10 min ago: if it is gone for good, `muster decommission web1` deactivates it there/);
  // deactivated (or never known) in PuppetDB: unreachable only
  assert.deepEqual(nodeHealth({ ...seen(60), puppetdb: { active: false, report_at: null, status: null } }, P, NOW).problems.map((p) => p.kind), ["unreachable"]);
  // known to PuppetDB alone, never heard from: both
  const only = nodeHealth({ identity: "ghost", puppetdb: inPdb(3600) }, P, NOW);
  assert.deepEqual(only.problems.map((p) => p.kind), ["unreachable", "puppetdb_active"]);
  assert.match(only.problems[0]!.why, /never heard from/);
  // answering and active in PuppetDB: nothing to say
  assert.deepEqual(nodeHealth({ ...seen(1, { status: ranAgo(60) }), puppetdb: inPdb(60) }, P, NOW).problems, []);
});

test("PuppetDB: a node that answers with no report there within the stale threshold is flagged; PuppetDB's record of runs wins", () => {
  const none = nodeHealth({ ...seen(1, { status: ranAgo(60) }), puppetdb: { active: false, report_at: null, status: null } }, P, NOW);
  assert.deepEqual(none.problems.map((p) => p.kind), ["puppetdb_no_report"]);
  assert.match(none.problems[0]!.why, /^PuppetDB holds no report of it \(stale after 60 min\), though the node says its Puppet ran 60 s ago: its reports do not reach PuppetDB/);
  assert.equal(none.puppet?.source, "puppetdb");
  assert.equal(none.puppet?.status, null, "PuppetDB's record, not the node's");
  const old = nodeHealth({ ...seen(1, { status: ranAgo(5 * 3600) }), puppetdb: inPdb(5 * 3600) }, P, NOW);
  assert.deepEqual(old.problems.map((p) => p.kind), ["puppetdb_no_report"], "stale by PuppetDB's record, not puppet_stale twice");
  assert.match(old.problems[0]!.why, /^PuppetDB's last report of it is 5 h old \(stale after 60 min\)$/);
  // a node PuppetDB does not know whose Puppet never ran (a site machine Puppet does not manage): nothing to report
  assert.deepEqual(nodeHealth({ ...seen(1), puppetdb: { active: false, report_at: null, status: null } }, P, NOW).problems, []);
  // a node waiting to be provisioned, or one with Puppet disabled, is not expected to report
  assert.deepEqual(nodeHealth({ ...seen(1, { phase: "waiting" }), puppetdb: { active: false, report_at: null, status: null } }, P, NOW).problems, []);
  assert.deepEqual(nodeHealth({ ...seen(1, { status: { puppet: { ...ranAgo(60).puppet, enabled: false, disabled: true, disable_message: "x" } } }), puppetdb: inPdb(null) }, P, NOW).problems.map((p) => p.kind), ["puppet_disabled"]);
  // the node says its last run failed, PuppetDB's report says changed: PuppetDB's is the record
  const differ = nodeHealth({ ...seen(1, { status: ranAgo(60, "failed") }), puppetdb: inPdb(30, "changed") }, P, NOW);
  assert.equal(differ.puppet?.status, "changed");
  assert.deepEqual(differ.problems, []);
});

test("PuppetDB: a failed run's streak and counts come from PuppetDB's runs when they were read", () => {
  const runs = [run(120, "failed"), run(1920, "failed"), run(3720, "unchanged")];
  const h = nodeHealth({ ...seen(1), puppetdb: { active: true, report_at: NOW - 120_000, status: "failed", runs } }, P, NOW);
  assert.equal(h.puppet?.failures_in_a_row, 2);
  assert.deepEqual(h.puppet?.resources, { total: 10, changed: 0, failed: 1 });
  assert.match(h.problems.find((p) => p.kind === "puppet_failed")!.why, /1 failed resource, 2 runs in a row/);
  // not read: the report's time and status, counts unknown
  const bare = nodeHealth({ ...seen(1), puppetdb: inPdb(120, "failed") }, P, NOW);
  assert.equal(bare.puppet?.resources, null);
  assert.equal(bare.puppet?.failures_in_a_row, 1);
});

test("puppetDbView: a node PuppetDB lists, one it does not, and no PuppetDB at all", () => {
  const nodes = new Map([["a", { certname: "a", report_at: NOW, status: "changed" as const, noop: false }]]);
  assert.deepEqual(puppetDbView(nodes, "a"), { active: true, report_at: NOW, status: "changed" });
  assert.deepEqual(puppetDbView(nodes, "b"), { active: false, report_at: null, status: null });
  assert.equal(puppetDbView(undefined, "a"), undefined);
});
