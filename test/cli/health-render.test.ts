import { test } from "node:test";
import assert from "node:assert/strict";
import { renderHealth } from "../../src/cli/health-render.js";
import { DEFAULT_HEALTH_POLICY, healthReport, type HealthInputs } from "../../src/health/model.js";
import type { Heartbeat } from "../../src/protocol/heartbeat.js";
import { newRecord } from "../../src/protocol/provision-record.js";

// `muster health` as people read it (src/cli/health-render.ts), from a report the model made
// (src/health/model.ts) at a fixed clock: unhealthy nodes first, each problem on its own line with
// why, then the healthy ones, then the summary.

const NOW = Date.parse("2026-03-01T12:00:00Z");
const hb = (identity: string, over: Partial<Heartbeat> = {}): Heartbeat => ({ identity, time: NOW, interval: 10, version: "1", phase: "serving", state: "up", status: {}, ...over });
const seen = (identity: string, agoS: number, over: Partial<Heartbeat> = {}): HealthInputs => ({ identity, beat: { heartbeat: hb(identity, over), at: NOW - agoS * 1000 } });
const plain = (s: string) => s.replace(/\x1b\[[0-9;]*m/g, ""); // eslint-disable-line no-control-regex

const inputs: HealthInputs[] = [
  // named so that sorting by name alone would put the healthy ones first
  seen("a-healthy.example", 3, { status: { puppet: { enabled: true, lastrun: (NOW - 600_000) / 1000, total_resources: 10, changed_resources: 0, failed_resources: 0, last_run_status: "unchanged" } } }),
  seen("b-healthy.example", 1),
  seen("y-off.example", 2, { status: { puppet: { enabled: false, disabled: true, disable_message: "maintenance by jane", lastrun: (NOW - 60_000) / 1000, total_resources: 10, changed_resources: 0, failed_resources: 0, last_run_status: "unchanged" } } }),
  { ...seen("z-broken.example", 90), provisioning: { ...newRecord("z-broken.example", NOW - 600_000), status: "failed", stage: "sign_csr", lastError: "the CSR's fingerprint is not the one the node reported", finishedAt: NOW - 300_000 } },
];

test("unhealthy nodes first, each problem on a line of its own with why, then the healthy ones, then the summary", () => {
  const lines = plain(renderHealth(healthReport(inputs, DEFAULT_HEALTH_POLICY, NOW))).split("\n");
  assert.match(lines[0]!, /^NODE\s+HEALTH\s+WHY$/);
  const rows = lines.slice(1, lines.indexOf(""));
  assert.equal(rows.length, 5, lines.join("\n"));
  // z-broken: two problems, the worst first; its name once, on the first
  assert.match(rows[0]!, /^z-broken\.example\s+unreachable\s+no heartbeat for 90 s \(one is due every 10 s; unreachable after 25 s\)$/);
  assert.match(rows[1]!, /^\s+provisioning failed\s+provisioning failed at sign_csr: the CSR's fingerprint is not the one the node reported$/);
  assert.match(rows[2]!, /^y-off\.example\s+Puppet disabled\s+Puppet is disabled: maintenance by jane$/);
  assert.match(rows[3]!, /^a-healthy\.example\s+ok\s+seen 3 s ago, Puppet no changes 600 s ago$/);
  assert.match(rows[4]!, /^b-healthy\.example\s+ok\s+seen 1 s ago$/);
  // the columns line up
  const why = lines[0]!.indexOf("WHY");
  assert.ok(rows.every((r) => r.slice(why - 2, why) === "  " && r[why] !== " "), rows.join("\n"));
  // a blank line, then the summary, last
  assert.equal(lines.at(-2), "");
  assert.equal(lines.at(-1), "4 nodes: 2 healthy, 2 unhealthy (1 unreachable, 1 provisioning failed, 1 Puppet disabled)");
});

test("--problems: only the unhealthy, then how many healthy were left out, then the summary", () => {
  const lines = plain(renderHealth(healthReport(inputs, DEFAULT_HEALTH_POLICY, NOW), { problemsOnly: true })).split("\n");
  assert.deepEqual(
    lines.map((l) => l.split(/\s{2,}/)[0]),
    ["NODE", "z-broken.example", "", "y-off.example", "(and 2 healthy nodes)", "", "4 nodes: 2 healthy, 2 unhealthy (1 unreachable, 1 provisioning failed, 1 Puppet disabled)"],
  );
});

test("every node healthy: no problem lines, a summary without a breakdown", () => {
  const out = plain(renderHealth(healthReport(inputs.slice(0, 2), DEFAULT_HEALTH_POLICY, NOW)));
  assert.doesNotMatch(out, /unreachable|failed|disabled|stale/);
  assert.equal(out.split("\n").at(-1), "2 nodes: 2 healthy, 0 unhealthy");
});
