import { test } from "node:test";
import assert from "node:assert/strict";
import type { RpcResult } from "../../src/client/client.js";
import { renderNrpe, summariseNrpe } from "../../src/cli/commands/nrpe.js";
import { renderResourceResult } from "../../src/cli/commands/resource.js";
import { renderFailures, renderRunallSummary, renderStatus, renderSummaryStats } from "../../src/cli/puppet-render.js";
import { Status } from "../../src/protocol/status.js";
import { REPLY_PROTOCOL, type Reply } from "../../src/protocol/types.js";

// Commands with their own renderers (puppet, resource, nrpe) mark a reply whose sender the node-key
// directory does not know, line by line, as `muster rpc` does: "(unverified)" after the sender.
// The renderers are pure: these results stand for what client.call returns.

process.env.NO_COLOR = "1";

function result(action: string, replies: Array<[string, number, Record<string, unknown>]>, unverified: string[]): RpcResult {
  const rs: Reply[] = replies.map(([sender, statuscode, data]) => ({ protocol: REPLY_PROTOCOL, requestid: "r1", sender, agent: "x", action, time: 1, statuscode, statusmsg: statuscode === Status.OK ? "OK" : "it failed", data }));
  return {
    agent: "x",
    action,
    discovered: rs.map((r) => r.sender),
    replies: rs,
    unverified,
    rejected: [],
    stats: { discovered: rs.length, responded: rs.length, ok: rs.filter((r) => r.statuscode === 0).length, failed: rs.filter((r) => r.statuscode !== 0).length, noResponse: [], verified: rs.length - unverified.length, unverified: unverified.length, rejected: 0, discoveryMs: 1, callMs: 1, totalMs: 1 },
  };
}

const line = (text: string, who: string) => text.split("\n").find((l) => l.includes(who)) ?? `no line for ${who}`;

test("puppet status, its failures and summary's failed nodes mark unverified senders only", () => {
  const r = result(
    "status",
    [
      ["proven.test", Status.OK, { enabled: true, message: "Currently idling" }],
      ["stranger.test", Status.OK, { enabled: true, message: "Currently idling" }],
      ["broken.test", Status.Aborted, {}],
    ],
    ["stranger.test", "broken.test"],
  );
  const out = renderStatus(r);
  assert.match(line(out, "stranger.test"), /Currently idling \(unverified\)$/);
  assert.doesNotMatch(line(out, "proven.test"), /unverified/);
  assert.match(line(out, "broken.test"), /it failed \(unverified\)$/);
  assert.match(line(renderFailures(r, "Failed").join("\n"), "broken.test"), /\(unverified\)$/);
  const summary = result("last_run_summary", [["stranger.test", Status.OK, { failed_resources: 2, total_resources: 9 }], ["proven.test", Status.OK, { failed_resources: 1, total_resources: 9 }]], ["stranger.test"]);
  const text = renderSummaryStats(summary);
  assert.equal(line(text, "stranger.test").trim(), "stranger.test (unverified)");
  assert.equal(line(text, "proven.test").trim(), "proven.test");
});

test("resource: the node's head line carries the mark", () => {
  const r = result("apply", [["stranger.test", Status.OK, { changed: true, state: { ensure: "present" } }], ["proven.test", Status.OK, { changed: false }]], ["stranger.test"]);
  const out = renderResourceResult(r, "all");
  assert.match(line(out, "stranger.test"), /^stranger\.test: changed \(unverified\)$/);
  assert.match(line(out, "proven.test"), /^proven\.test: unchanged$/);
});

test("nrpe: the Nagios first line is unchanged; listed hosts carry the mark; --json says verified per host", () => {
  const r = result(
    "runcommand",
    [
      ["stranger.test", Status.OK, { exitcode: 2, output: "DISK CRITICAL", perfdata: "" }],
      ["proven.test", Status.OK, { exitcode: 1, output: "DISK WARNING", perfdata: "" }],
    ],
    ["stranger.test"],
  );
  const s = summariseNrpe("check_disk", r);
  const out = renderNrpe(s);
  assert.equal(out.split("\n")[0], "check_disk: OK: 0 WARNING: 1 CRITICAL: 1 UNKNOWN: 0|total=2 ok=0 warn=1 crit=1 unknown=0 checktime=0.001000");
  assert.equal(line(out, "stranger.test"), "   stranger.test (unverified): DISK CRITICAL");
  assert.equal(line(out, "proven.test"), "   proven.test: DISK WARNING");
  assert.deepEqual(s.hosts.map((h) => [h.identity, h.verified]), [["proven.test", true], ["stranger.test", false]]);
});

test("runall's summary marks unproven nodes in its table and counts them", () => {
  const node = (identity: string) => ({ identity, outcome: "changed" as const, exitcode: 2, durationMs: 1000, detail: "" });
  const report = { nodes: [node("proven.test"), node("stranger.test")], counts: { ok: 0, changed: 2, failed: 0, skipped: 0, vanished: 0, timeout: 0, busy: 0, cancelled: 0 }, makespanMs: 2000, concurrency: 2, maxConcurrency: 2 } as unknown as Parameters<typeof renderRunallSummary>[0];
  const out = renderRunallSummary(report, ["stranger.test"]);
  assert.match(line(out, "stranger.test"), /^stranger\.test \(unverified\) +changed/);
  assert.match(line(out, "proven.test"), /^proven\.test +changed/);
  assert.match(out, /1 of 2 nodes \(unverified\): no known key for their sender$/);
  assert.doesNotMatch(renderRunallSummary(report), /unverified/);
});
