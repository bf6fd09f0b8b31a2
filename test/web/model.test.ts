import { test } from "node:test";
import assert from "node:assert/strict";

// The console's pure view logic (src/web/assets/model.js, plain JS the browser loads as is). The
// compiled test sits in dist/test/web, so the module is found from the repository root at run time.
type Model = typeof import("../../src/web/assets/model.js");
const m = (await import(new URL("../../../src/web/assets/model.js", import.meta.url).href)) as Model;

test("the board puts failed nodes first, then working, waiting and done, by name within", () => {
  const nodes = [
    { identity: "b", status: "done" },
    { identity: "a", status: "pending" },
    { identity: "c", status: "failed" },
    { identity: "a", status: "failed" },
    { identity: "z", status: "in_progress" },
  ];
  assert.deepEqual(
    [...nodes].sort(m.boardOrder).map((n) => `${n.status}:${n.identity}`),
    ["failed:a", "failed:c", "in_progress:z", "pending:a", "done:b"],
  );
  assert.deepEqual(m.statusCounts(nodes), { failed: 2, in_progress: 1, pending: 1, done: 1 });
  const n = { identity: "web01.example.net", status: "in_progress", stage: "bootstrap", master: "puppet-de.example.net" };
  assert.ok(m.matchesFind(n, "web01") && m.matchesFind(n, "in_progress") && m.matchesFind(n, "bootstrap") && m.matchesFind(n, "puppet-de.example.net") && m.matchesFind(n, ""));
  assert.ok(!m.matchesFind(n, "done") && !m.matchesFind(n, "boot") && !m.matchesFind(n, "db"));
});

test("a timeline's segments are each stage's share of the time, the running one ending now", () => {
  const t0 = Date.parse("2026-01-01T00:00:00Z");
  const iso = (s: number) => new Date(t0 + s * 1000).toISOString();
  const segs = m.timelineSegments(
    [
      { stage: "lock", start: iso(0), end: iso(1) },
      { stage: "bootstrap", start: iso(1), end: iso(7) },
      { stage: "production", start: iso(7) },
    ],
    t0 + 10_000,
  );
  assert.deepEqual(
    segs.map((s) => [s.stage, s.ms, s.running]),
    [
      ["lock", 1000, false],
      ["bootstrap", 6000, false],
      ["production", 3000, true],
    ],
  );
  assert.deepEqual(
    segs.map((s) => s.fraction),
    [0.1, 0.6, 0.3],
  );
  assert.deepEqual(m.timelineSegments([], t0), []);
  // Zero-length stages still show, in equal parts, rather than dividing by zero.
  assert.deepEqual(
    m.timelineSegments([{ stage: "lock", start: iso(0), end: iso(0) }, { stage: "unlock", start: iso(0), end: iso(0) }], t0).map((s) => s.fraction),
    [0.5, 0.5],
  );
  // A garbled time counts as zero, never NaN.
  assert.equal(m.timelineSegments([{ stage: "lock", start: "yesterday" }], t0)[0]!.ms, 0);
});

test("durations, elapsed time and cells read as an operator expects", () => {
  assert.equal(m.formatDuration(4.7), "4s");
  assert.equal(m.formatDuration(0.7), "700ms");
  assert.equal(m.formatDuration(0), "0ms");
  assert.equal(m.formatDuration(125), "2m05s");
  assert.equal(m.formatDuration(3720), "1h02m");
  assert.equal(m.formatDuration(undefined), "");
  assert.equal(m.formatDuration(-1), "");
  const now = Date.parse("2026-01-01T00:01:00Z");
  assert.equal(m.elapsedSeconds({ status: "in_progress", started: "2026-01-01T00:00:00Z", elapsed_s: 3 }, now), 60);
  assert.equal(m.elapsedSeconds({ status: "done", started: "2026-01-01T00:00:00Z", elapsed_s: 42 }, now), 42);
  assert.equal(m.cellText("x"), "x");
  assert.equal(m.cellText(3), "3");
  assert.equal(m.cellText(["a", "b"]), '["a","b"]');
  assert.equal(m.cellText(null), "");
});

test("the caret points at the filter error's column, and just past the end for a missing token", () => {
  assert.equal(m.caretLine("country=de and", 12), "           ^");
  assert.equal(m.caretLine("a and", 99), "     ^");
  assert.equal(m.caretLine("x", 0), "^");
});

test("columns, counts, visible rows and routes", () => {
  assert.deepEqual(m.parseColumns(" os, country,,os ,role"), ["os", "country", "role"]);
  assert.deepEqual(m.parseColumns(undefined), []);
  assert.deepEqual(
    m.countBars([
      { value: "debian", count: 8 },
      { value: "rhel", count: 2 },
    ]).map((b) => b.fraction),
    [1, 0.25],
  );
  assert.deepEqual(m.visibleRange(0, 300, 30, 10_000, 5), { first: 0, last: 15 });
  assert.deepEqual(m.visibleRange(30_000, 300, 30, 10_000, 5), { first: 995, last: 1015 });
  assert.deepEqual(m.visibleRange(299_900, 300, 30, 10_000, 5), { first: 9991, last: 10_000 });
  assert.deepEqual(m.visibleRange(0, 300, 30, 0), { first: 0, last: 0 });
  assert.deepEqual(m.parseRoute(""), { view: "health", arg: undefined, params: {} }, "the landing page is the fleet's health");
  assert.deepEqual(m.parseRoute("#/node/web%3A1.example"), { view: "node", arg: "web:1.example", params: {} });
  assert.deepEqual(m.parseRoute("#/explorer?filter=country%3Dde%20and%20x&columns=os"), { view: "explorer", arg: undefined, params: { filter: "country=de and x", columns: "os" } });
});

test("the board sorts by a column either way, ties in the board's order; gone nodes come right after failed", () => {
  const now = Date.parse("2026-01-01T01:00:00Z");
  const nodes = [
    { identity: "b", status: "done", stage: "notify", master: "m2", elapsed_s: 50, tries: 0 },
    { identity: "a", status: "in_progress", stage: "bootstrap", master: "m1", started: "2026-01-01T00:59:00Z", tries: 1 },
    { identity: "g", status: "in_progress", stage: "request_csr", master: "m1", started: "2026-01-01T00:00:00Z", tries: 0, gone: { since: "x", reason: "destroyed" } },
    { identity: "c", status: "failed", stage: "sign_csr", master: "m2", elapsed_s: 10, tries: 3 },
  ];
  assert.deepEqual(m.sortBoard(nodes, "status", "asc", now).map((n) => n.identity), ["c", "g", "a", "b"]);
  assert.deepEqual(m.sortBoard(nodes, "status", "desc", now).map((n) => n.identity), ["b", "a", "g", "c"]);
  assert.deepEqual(m.sortBoard(nodes, "identity", "desc", now).map((n) => n.identity), ["g", "c", "b", "a"]);
  assert.deepEqual(m.sortBoard(nodes, "elapsed", "desc", now).map((n) => n.identity), ["g", "a", "b", "c"], "running nodes' elapsed is live");
  assert.deepEqual(m.sortBoard(nodes, "master", "asc", now).map((n) => n.identity), ["g", "a", "c", "b"], "ties by the board's order");
  assert.deepEqual(m.sortBoard(nodes, "tries", "desc", now).map((n) => n.identity), ["c", "a", "g", "b"]);
  assert.deepEqual(m.BOARD_SORTS, ["status", "identity", "stage", "master", "elapsed", "tries"]);
});

test("stuck: on a stage for more than twice its usual p95 (at least a minute), with enough samples to say", () => {
  const t0 = Date.parse("2026-01-01T00:00:00Z");
  const iso = (s: number) => new Date(t0 + s * 1000).toISOString();
  const node = { identity: "n", status: "in_progress", stage: "request_csr", timeline: [{ stage: "lock", start: iso(0), end: iso(1) }, { stage: "request_csr", start: iso(1) }] };
  const stages = [{ stage: "request_csr", samples: 20, p95_ms: 40_000 }];
  assert.equal(m.stuckInfo(node, stages, t0 + 61_000), null, "60 s: not over 80 s");
  assert.deepEqual(m.stuckInfo(node, stages, t0 + 91_000), { stage: "request_csr", since: t0 + 1000, for_ms: 90_000, usual_ms: 40_000 });
  assert.equal(m.stuckInfo(node, [{ stage: "request_csr", samples: 4, p95_ms: 1000 }], t0 + 3600_000), null, "too few samples");
  assert.equal(m.stuckInfo(node, [{ stage: "request_csr", samples: 50, p95_ms: 1000 }], t0 + 59_000), null, "never under a minute");
  assert.ok(m.stuckInfo(node, [{ stage: "request_csr", samples: 50, p95_ms: 1000 }], t0 + 62_000));
  assert.equal(m.stuckInfo({ ...node, status: "failed" }, stages, t0 + 3600_000), null);
  assert.equal(m.stuckInfo({ ...node, gone: { since: "", reason: "" } }, stages, t0 + 3600_000), null, "gone says more than stuck");
  assert.equal(m.stuckInfo({ ...node, waiting: { since: "", reason: "waiting for its master m1, which does not answer", master: "m1" } }, stages, t0 + 3600_000), null, "waiting for a master says more than stuck");
});

test("relative times, ETAs, and the timeline on one scale and in words", () => {
  const now = Date.parse("2026-01-01T12:00:00Z");
  assert.equal(m.formatRelative(now - 3000, now), "just now");
  assert.equal(m.formatRelative(now - 45_000, now), "45 s ago");
  assert.equal(m.formatRelative(now - 3 * 60_000, now), "3 min ago");
  assert.equal(m.formatRelative(now - 5400_000, now), "1.5 h ago");
  assert.equal(m.formatRelative(now + 120_000, now), "in 2 min");
  assert.equal(m.formatRelative(now - 3 * 86400_000, now), "3 days ago");
  assert.equal(m.formatEta(null), "no estimate");
  assert.equal(m.formatEta(0), "nothing left");
  assert.equal(m.formatEta(30), "under a minute");
  assert.equal(m.formatEta(14 * 60 + 10), "about 14 min");
  assert.equal(m.formatEta(2 * 3600 + 5 * 60), "about 2 h 05 min");
  const t0 = now - 100_000;
  const iso = (s: number) => new Date(t0 + s * 1000).toISOString();
  const tl = [
    { stage: "lock", start: iso(0), end: iso(1) },
    { stage: "bootstrap", start: iso(1), end: iso(7) },
    { stage: "production", start: iso(7) },
  ];
  assert.equal(m.timelineTotal(tl, t0 + 10_000), 10_000);
  const scaled = m.timelineSegments(tl, t0 + 10_000, 40_000);
  assert.deepEqual(scaled.map((s) => s.fraction), [0.025, 0.15, 0.075], "fractions of the common scale");
  assert.equal(m.timelineScale([{ timeline: tl }, { timeline: [] }], t0 + 10_000), 10_000);
  assert.equal(m.timelineScale([{ timeline: tl }], t0 + 50_000), 60_000, "rounded up to a readable span");
  assert.equal(m.timelineText(tl, t0 + 10_000), "lock 1s, bootstrap 6s, production 3s (running)");
  assert.equal(m.timelineText([], now), "no stages yet");
});

test("CSV export: quoted where needed, formulas defused, one row per node as the table shows it", () => {
  const csv = m.toCsv([{ a: "plain", b: 'say "hi", then\nleave', c: null }, { a: "=HYPERLINK(1)", b: -3, c: { x: 1 } }], ["a", "b", "c"]);
  assert.equal(csv, 'a,b,c\r\nplain,"say ""hi"", then\nleave",\r\n\'=HYPERLINK(1),-3,"{""x"":1}"\r\n');
  const now = Date.parse("2026-01-01T00:10:00Z");
  const rows = m.boardExportRows([{ identity: "n1", status: "failed", stage: "sign_csr", master: "m", started: "2026-01-01T00:09:00.000Z", finished: "2026-01-01T00:09:12.400Z", updated: "2026-01-01T00:09:12.400Z", elapsed_s: 12.4, tries: 3, rounds: 2, last_error: "boom", gone: null, timeline: [] }], [], now);
  // with its times: a row read later still says when
  assert.deepEqual(rows, [{ identity: "n1", status: "failed", stage: "sign_csr", master: "m", started: "2026-01-01T00:09:00.000Z", finished: "2026-01-01T00:09:12.400Z", updated: "2026-01-01T00:09:12.400Z", elapsed_s: 12, tries: 3, rounds: 2, gone_since: null, gone_reason: null, stuck_for_s: null, last_error: "boom" }]);
  assert.deepEqual(Object.keys(rows[0]!), m.BOARD_EXPORT_COLUMNS);
  assert.equal(m.routeHash("board", undefined, { find: "web 1", sort: "elapsed", dir: "" }), "#/board?find=web+1&sort=elapsed");
  assert.deepEqual(m.parseRoute(m.routeHash("node", "a/b.lab", { section: "puppet" })), { view: "node", arg: "a/b.lab", params: { section: "puppet" } });
});

test("the explorer's export makes structured facts dotted columns, never JSON in a cell; facts group by their first name part and are searched by name or value", () => {
  const x = m.explorerExport([{ identity: "a", columns: { os: { family: "Debian", release: { major: "13" } }, country: "de" } }, { identity: "b", columns: { os: { family: "RedHat" }, country: "us" } }], ["os", "country"]);
  assert.deepEqual(x.columns, ["identity", "os.family", "os.release.major", "country"]);
  assert.equal(m.toCsv(x.rows, x.columns), "identity,os.family,os.release.major,country\r\na,Debian,13,de\r\nb,RedHat,,us\r\n");
  const facts = { country: "de", os: { family: "Debian", name: "debian" }, networking: { ip: "10.1.2.3", interfaces: { eth0: { mtu: 1500 } } } };
  assert.deepEqual(m.factGroups(facts).map((g) => [g.name, g.entries.map(([k]) => k)]), [["(top level)", ["country"]], ["networking", ["networking.interfaces.eth0.mtu", "networking.ip"]], ["os", ["os.family", "os.name"]]]);
  assert.deepEqual(m.factGroups(facts, "DEBIAN").map((g) => g.entries.map(([k]) => k)), [["os.family", "os.name"]]);
  assert.deepEqual(m.factGroups(facts, "1500").flatMap((g) => g.entries), [["networking.interfaces.eth0.mtu", 1500]]);
});

test("health on the page: problems grouped by kind worst first, the title with the count, new problems for notifications", () => {
  const nodes = [
    { identity: "a", problems: [{ kind: "puppet_failed", why: "x" }] },
    { identity: "b", problems: [{ kind: "unreachable", why: "no heartbeat for 30 s", since: "2026-01-01T00:00:00Z" }, { kind: "puppet_stale", why: "y" }] },
  ];
  const g = m.healthGroups(nodes);
  assert.deepEqual(g.map((x) => x.kind), ["unreachable", "puppetdb_active", "gone", "provisioning_failed", "puppet_failed", "puppet_disabled", "puppetdb_no_report", "puppet_stale"]);
  assert.deepEqual(g[0]!.nodes, [{ identity: "b", why: "no heartbeat for 30 s", since: "2026-01-01T00:00:00Z" }]);
  assert.deepEqual(g.find((x) => x.kind === "puppet_stale")!.nodes.map((n: { identity: string }) => n.identity), ["b"]);
  assert.equal(m.titleWithProblems("Health · muster", 2), "(2) Health · muster");
  assert.equal(m.titleWithProblems("Health · muster", 0), "Health · muster");
  assert.deepEqual(m.newProblems([nodes[0]!], nodes).map((p: { identity: string }) => p.identity), ["b"]);
  assert.deepEqual(m.newProblems(nodes, nodes), []);
});

test("the last Puppet run, readable: status, when, how long, counts, failed resources with their messages", () => {
  const summary = { lastrun: 1767268800, since_lastrun: 180, config_version: "1767268790", puppet_version: "8.10.0", environment: "production", total_resources: 212, changed_resources: 0, failed_resources: 1, out_of_sync_resources: 1, corrected_resources: 0, skipped_resources: 0, total_time: 12.345678901234567, events: { failure: 1, success: 0, total: 1 } };
  const status = {
    enabled: true,
    applying: false,
    last_runonce: {
      finished_at: 1767268800 * 1000 + 1500,
      success: false,
      changed: false,
      duration: 12.3,
      message: "1 resource(s) failed: File[/etc/motd]",
      failed_resources: ["File[/etc/motd]"],
      errors: ["/Stage[main]/Motd/File[/etc/motd]/content: change from '{md5}a' to '{md5}b' failed: Permission denied", "Could not send report"],
    },
  };
  const v = m.puppetRunView(summary, status)!;
  assert.equal(v.status, "failed");
  assert.equal(v.at, 1767268800 * 1000);
  assert.equal(v.duration_s, 12.3, "no float noise");
  assert.deepEqual(v.failed_resources, [{ resource: "File[/etc/motd]", messages: [status.last_runonce.errors[0]] }]);
  assert.deepEqual(v.errors, ["Could not send report"]);
  assert.equal(v.message, "1 resource(s) failed: File[/etc/motd]");
  assert.deepEqual(v.counts.find((c) => c.name === "failed"), { name: "failed", value: 1 });
  // another run than the one this agent started: its details are not mixed in
  const other = m.puppetRunView({ ...summary, failed_resources: 0, changed_resources: 3, events: { failure: 0 } }, { ...status, last_runonce: { ...status.last_runonce, finished_at: 1000 } })!;
  assert.deepEqual([other.status, other.label, other.failed_resources.length, other.message], ["changed", "changed", 0, null]);
  assert.equal(m.puppetRunView({ ...summary, failed_resources: 0, changed_resources: 0, events: { failure: 0 } }, null)!.label, "no changes");
  assert.equal(m.puppetRunView(null, null), null);
  assert.equal(m.puppetRunView(null, status)!.status, "failed", "a run this agent started, without a summary");
});

test("with the run's report: every changed and failed resource with its messages", () => {
  const summary = { lastrun: 1767268800, total_resources: 20, changed_resources: 1, failed_resources: 1, events: { failure: 1 }, total_time: 3.2 };
  const report = {
    status: "failed",
    resources: [
      { resource: "File[/opt/app.conf]", status: "failed", messages: ["change from 'absent' to 'file' failed: Permission denied"] },
      { resource: "File[/etc/motd]", status: "changed", messages: ["content changed '{md5}a' to '{md5}b'"] },
    ],
    resources_left_out: 3,
    logs: [
      { level: "warning", message: "Unknown variable" },
      { level: "err", message: "change from 'absent' to 'file' failed: Permission denied" },
      { level: "err", message: "Could not send report" },
    ],
  };
  const v = m.puppetRunView(summary, null, report)!;
  assert.equal(v.status, "failed");
  assert.deepEqual(v.failed_resources, [{ resource: "File[/opt/app.conf]", messages: ["change from 'absent' to 'file' failed: Permission denied"] }]);
  assert.deepEqual(v.changed_resources, [{ resource: "File[/etc/motd]", messages: ["content changed '{md5}a' to '{md5}b'"] }]);
  assert.equal(v.left_out, 3);
  assert.deepEqual(v.errors, ["Could not send report"], "errors already shown under their resource are not repeated");
});

test("the node page after a retry: the summary says round 2 (not \"0 tries\"), and the rounds table shows round 2 and who retried round 1", async () => {
  // the record as the provisioner and the console write it (the real rules), then as /api/nodes sends it
  const { claimRecord } = await import("../../src/provisioner/claim.js");
  const { applyRetry } = await import("../../src/provisioner/record-rules.js");
  const { noteRound } = await import("../../src/protocol/provision-record.js");
  const { boardNode } = await import("../../src/web/board.js");
  const t0 = Date.parse("2026-01-01T00:00:00Z");
  const { v } = claimRecord(undefined, "web9.test", "prov-a", t0, 600)!;
  const rec = v.record;
  Object.assign(rec, { status: "failed", current: "sign_csr", stage: "request_csr", attempts: 3, lastError: "sign_csr: CSR never arrived", finishedAt: t0 + 60_000 });
  noteRound(rec, { event: "failed", stage: "sign_csr", detail: "sign_csr: CSR never arrived" }, t0 + 60_000);
  applyRetry(rec, "alice (web console)", t0 + 120_000);
  claimRecord(v, "web9.test", "prov-b", t0 + 125_000, 600);
  Object.assign(rec, { current: "bootstrap", master: "puppet1.test" });
  const p = JSON.parse(JSON.stringify(boardNode(rec, t0 + 130_000))) as Parameters<typeof m.provisioningLine>[0] & { history: Parameters<typeof m.roundRows>[0] };
  assert.equal(p.rounds, 2);

  const line = m.provisioningLine(p, t0 + 130_000);
  assert.equal(line, "stage bootstrap, master puppet1.test, 5s, round 2");
  assert.doesNotMatch(line, /tries/, "a new round has no failed tries yet");
  assert.equal(m.provisioningLine({ ...p, tries: 1 }, t0 + 130_000), "stage bootstrap, master puppet1.test, 5s, round 2, 1 failed try of this stage");

  const rows = m.roundRows(p.history);
  assert.deepEqual(
    rows.map((r) => [r.round, r.what, r.stage, r.detail]),
    [
      [2, "round started by prov-b", "", ""],
      [1, "retried by alice (web console)", "", "was failed"],
      [1, "failed", "sign_csr", "sign_csr: CSR never arrived"],
      [1, "round started by prov-a", "", ""],
    ],
    "newest first",
  );
  assert.equal(rows[1]!.at, new Date(t0 + 120_000).toISOString(), "when, as the API says it");
  assert.deepEqual(m.roundRows(undefined), [], "a record from before rounds were kept: no table");
});

test("the throughput chart's time labels: on the hour and half hour, anchored inward at both ends so none reaches past the chart", () => {
  const minutes = (from: number) => Array.from({ length: 180 }, (_, i) => ({ start: from + i * 60_000 }));
  // three hours ending on a half hour (local time, as the labels are): the last bucket has a label
  const ticks = m.chartTicks(minutes(new Date(2026, 0, 1, 9, 31).getTime()));
  assert.deepEqual(ticks.map((t) => t.i), [29, 59, 89, 119, 149, 179]);
  assert.deepEqual(ticks.map((t) => t.anchor), ["middle", "middle", "middle", "middle", "middle", "end"]);
  // starting on one: the first bucket's label starts at the chart's left edge
  const first = m.chartTicks(minutes(new Date(2026, 0, 1, 9, 30).getTime()));
  assert.deepEqual(first[0], { i: 0, start: new Date(2026, 0, 1, 9, 30).getTime(), anchor: "start" });
  assert.deepEqual(first.at(-1), { i: 150, start: new Date(2026, 0, 1, 12, 0).getTime(), anchor: "middle" }, "away from the ends, centred");
});

test("the board: a node done long ago that health says is unreachable reads done, unreachable (issue 36: the board said done)", () => {
  const health = [
    { identity: "node05.eu.lab", reachable: false, problems: [{ kind: "unreachable", why: "no heartbeat for 40 s" }] },
    { identity: "node06.eu.lab", reachable: true, problems: [{ kind: "puppet_failed", why: "..." }] },
  ];
  const down = m.unreachableSet(health);
  assert.deepEqual([...down], ["node05.eu.lab"]);
  assert.deepEqual(m.boardStatus({ identity: "node05.eu.lab", status: "done" }, down), { status: "done", unreachable: true, label: "done, unreachable" });
  assert.deepEqual(m.boardStatus({ identity: "node06.eu.lab", status: "done" }, down), { status: "done", unreachable: false, label: "done" });
  assert.equal(m.boardStatus({ identity: "x", status: "failed" }, null).unreachable, false, "no health yet: the record alone");
  assert.deepEqual([...m.unreachableSet(undefined)], []);
});

test("the explorer's cells: the os fact as an operator says it, other structured facts as their dotted parts, never JSON", () => {
  const trixie = { name: "Debian", family: "Debian", release: { full: "13.1", major: "13", minor: "1" }, distro: { codename: "trixie", description: "Debian GNU/Linux 13 (trixie)", id: "Debian" }, architecture: "amd64" };
  assert.equal(m.factCellText("os", trixie), "Debian 13 (trixie)");
  assert.equal(m.osText({ family: "RedHat", name: "Rocky", release: { major: "9" } }), "Rocky 9");
  assert.equal(m.osText({ family: "Debian" }), "Debian");
  assert.equal(m.osText("debian"), "debian", "a plain value stays itself");
  assert.equal(m.factCellText("memory", { system: { total: "2 GiB", used: "1 GiB" } }), "system.total=2 GiB, system.used=1 GiB");
  assert.equal(m.factCellText("country", "de"), "de");
  assert.equal(m.factCellText("ips", ["10.0.0.1", "10.0.0.2"]), '["10.0.0.1","10.0.0.2"]', "lists stay whole");
  assert.ok(!m.factCellText("os", trixie).includes("{"));
});

test("a node page's last run, when its agent was not asked or did not answer: the run health knows, marked as such", () => {
  const at = Date.parse("2026-03-01T11:00:00Z");
  const v = m.knownRunView({ status: "changed", time: at, resources: { total: 12, changed: 2, failed: 0 }, duration_s: 4.24, config_version: "1700" });
  assert.equal(v?.known_only, true);
  assert.deepEqual([v?.status, v?.label, v?.at, v?.duration_s, v?.config_version], ["changed", "changed", at, 4.2, "1700"]);
  assert.deepEqual(v?.counts, [{ name: "resources", value: 12 }, { name: "changed", value: 2 }, { name: "failed", value: 0 }]);
  // health's own Puppet view (its report): an ISO time, no duration
  const h = m.knownRunView({ status: "unchanged", last_run: "2026-03-01T11:00:00.000Z", resources: { total: 5, changed: 0, failed: 0 } });
  assert.deepEqual([h?.label, h?.at, h?.duration_s], ["no changes", at, null]);
  assert.equal(m.knownRunView(null), null);
  assert.equal(m.knownRunView({ status: null }), null);
});

test("the alerts' history in words: who was told, or why nobody was, or what failed", () => {
  const t = Date.parse("2026-03-01T12:00:00Z");
  assert.deepEqual(m.alertEventRow({ type: "fired", time: t, by: "console:c", identity: "node05.eu.lab", kind: "unreachable", told: ["http://hooks/ops"], notifier: "console.lab" }), { what: "fired", about: "node05.eu.lab unreachable", detail: "told http://hooks/ops (through console.lab)", ok: true });
  assert.equal(m.alertEventRow({ type: "fired", time: t, by: "c", identity: "n", kind: "unreachable", told: [], held: "n is silenced until ..." }).detail, "nobody told: n is silenced until ...");
  assert.deepEqual(m.alertEventRow({ type: "delivery_failed", of: "resolved", time: t, by: "c", identity: "n", kind: "puppet_failing", error: "no notifier answered" }), { what: "resolved not delivered", about: "n puppet failing", detail: "no notifier answered", ok: false });
  assert.equal(m.alertEventRow({ type: "test", time: t, by: "web:alice", kind: "test", told: ["x"] }).about, "the admins");
  const now = t + 120_000;
  assert.equal(m.deliveryText(null, now), "No alert has been sent yet.");
  assert.equal(m.deliveryText({ ok: true, at: new Date(t).toISOString(), notifier: "console.lab", told: ["http://hooks/ops"], error: null, failing_since: null }, now), "The last alert reached http://hooks/ops through console.lab, 2 min ago.");
  assert.equal(m.deliveryText({ ok: false, at: new Date(t).toISOString(), notifier: null, told: [], error: "no notifier answered", failing_since: new Date(t - 600_000).toISOString() }, now), "Alerts are not reaching the admins, failing since 12 min ago: no notifier answered");
});
