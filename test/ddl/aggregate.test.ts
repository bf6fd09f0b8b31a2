import { test } from "node:test";
import assert from "node:assert/strict";
import { aggregateReplies, applyOutputDefaults, computeAggregate, formatAggregate } from "../../src/ddl/index.js";
import { sampleDDL } from "./sample.js";

const replies: Record<string, unknown>[] = [
  { os: "Debian", classes: ["base", "web"], load: 0.5, packages: 120, enabled: true },
  { os: "Debian", classes: ["base", "db"], load: 1.25, packages: 80, enabled: false },
  { os: "CentOS", classes: ["base"], load: "n/a", packages: "many", enabled: "yes" },
  { os: "Debian", classes: ["base", "web"], load: 2, packages: 100, enabled: true },
  {},
];

test("every declared aggregate is computed from real values", () => {
  const [os, classes, load, packages, enabled, ...rest] = aggregateReplies(sampleDDL, "status", replies);
  assert.equal(rest.length, 0);
  assert.deepEqual(os, { output: "os", displayAs: "Operating System", function: "summary", counts: [{ value: "Debian", count: 3 }, { value: "CentOS", count: 1 }] });
  assert.deepEqual(classes, {
    output: "classes",
    displayAs: "Classes",
    function: "summary",
    counts: [
      { value: "base", count: 4 },
      { value: "web", count: 2 },
      { value: "db", count: 1 },
    ],
  });
  assert.deepEqual(load, { output: "load", displayAs: "Load", format: "%.2f", function: "average", value: 1.25, count: 3 });
  assert.deepEqual(packages, { output: "packages", displayAs: "Packages", function: "sum", value: 300, count: 3 });
  assert.deepEqual(enabled, { output: "enabled", displayAs: "Enabled", function: "boolean_summary", true: 2, false: 1 });
});

test("terminal lines: summaries aligned, numbers formatted", () => {
  const lines = aggregateReplies(sampleDDL, "status", replies).map(formatAggregate);
  assert.deepEqual(lines, [
    ["Summary of Operating System:", "", "   Debian: 3", "   CentOS: 1"],
    ["Summary of Classes:", "", "   base: 4", "    web: 2", "     db: 1"],
    ["Average of Load: 1.25 (3 replies)"],
    ["Sum of Packages: 300 (3 replies)"],
    ["Summary of Enabled:", "", "    true: 2", "   false: 1"],
  ]);
});

test("no replies: empty summaries, null average, zero sum", () => {
  const lines = aggregateReplies(sampleDDL, "status", []).map(formatAggregate);
  assert.deepEqual(lines[0], ["Summary of Operating System:", "", "   (no values)"]);
  assert.deepEqual(lines[2], ["Average of Load: no numeric values"]);
  assert.deepEqual(lines[3], ["Sum of Packages: 0 (0 replies)"]);
  assert.deepEqual(aggregateReplies(sampleDDL, "configure", replies), [], "action without aggregates");
  assert.deepEqual(aggregateReplies(sampleDDL, "nope", replies), []);
});

test("sums avoid float noise; summaries keep 1 and \"1\" apart; ties sort by value", () => {
  const sum = computeAggregate({ function: "sum", output: "x" }, "X", [0.1, 0.2, Infinity, NaN, "3"]);
  assert.deepEqual(formatAggregate(sum), ["Sum of X: 0.3 (2 replies)"]);
  const avg = computeAggregate({ function: "average", output: "x" }, "X", [1, 2]);
  assert.deepEqual(formatAggregate(avg), ["Average of X: 1.50 (2 replies)"]);
  const one = computeAggregate({ function: "average", output: "x", format: "%d" }, "X", [4.9]);
  assert.deepEqual(formatAggregate(one), ["Average of X: 4 (1 reply)"]);
  const summary = computeAggregate({ function: "summary", output: "x" }, "X", [1, "1", "b", "a", 1, null, undefined]);
  assert.ok(summary.function === "summary");
  assert.deepEqual(summary.counts, [
    { value: 1, count: 2 },
    { value: "1", count: 1 },
    { value: "a", count: 1 },
    { value: "b", count: 1 },
  ]);
});

test("summary format applies to each value", () => {
  const r = computeAggregate({ function: "summary", output: "v", format: "v%s" }, "Version", ["1.0", "1.0", "2.0"]);
  assert.deepEqual(formatAggregate(r), ["Summary of Version:", "", "   v1.0: 2", "   v2.0: 1"]);
});

test("output defaults fill missing outputs only", () => {
  const out = applyOutputDefaults(sampleDDL, "status", { os: "Debian", load: 0.7, message: undefined, enabled: null });
  assert.deepEqual(out, { os: "Debian", load: 0.7, classes: [], message: "none", enabled: null });
  (out["classes"] as unknown[]).push("leak");
  assert.deepEqual(applyOutputDefaults(sampleDDL, "status", {})["classes"], [], "defaults are copied");
  const data = { result: "done" };
  const same = applyOutputDefaults(sampleDDL, "configure", data);
  assert.deepEqual(same, data);
  assert.notEqual(same, data);
  assert.deepEqual(applyOutputDefaults(sampleDDL, "nope", { a: 1 }), { a: 1 });
});
