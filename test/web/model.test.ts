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
  assert.deepEqual(m.parseRoute(""), { view: "board", arg: undefined, params: {} });
  assert.deepEqual(m.parseRoute("#/node/web%3A1.example"), { view: "node", arg: "web:1.example", params: {} });
  assert.deepEqual(m.parseRoute("#/explorer?filter=country%3Dde%20and%20x&columns=os"), { view: "explorer", arg: undefined, params: { filter: "country=de and x", columns: "os" } });
});
