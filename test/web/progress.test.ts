import { test } from "node:test";
import assert from "node:assert/strict";
import { newRecord, type NodeRecord } from "../../src/protocol/provision-record.js";
import { eta, masterStats, percentile, progress, stageStats, throughput } from "../../src/web/progress.js";

// Throughput, ETA, per-stage and per-master figures from provisioning records (pure).

const NOW = Date.parse("2026-03-01T12:30:30.000Z");
const MIN = 60_000;
const rec = (identity: string, status: NodeRecord["status"], extra: Partial<NodeRecord> = {}): NodeRecord => ({ ...newRecord(identity, NOW - 4 * 3600_000), status, ...extra });

test("percentile: nearest rank", () => {
  assert.equal(percentile([], 50), undefined);
  assert.equal(percentile([7], 95), 7);
  const xs = Array.from({ length: 100 }, (_, i) => i + 1);
  assert.equal(percentile(xs, 50), 50);
  assert.equal(percentile(xs, 95), 95);
  assert.equal(percentile([1, 2, 3, 4], 50), 2);
  assert.equal(percentile([1, 2, 3, 4], 100), 4);
});

test("throughput: done and failed per minute over the span, aligned to minutes, the last bucket holding now", () => {
  const recs = [
    rec("a", "done", { finishedAt: NOW - 10_000 }), // this minute
    rec("b", "done", { finishedAt: NOW - 20_000 }), // this minute (12:30:10)
    rec("c", "failed", { finishedAt: NOW - 45_000 }), // 12:29:45: the minute before
    rec("d", "done", { finishedAt: NOW - 3 * 3600_000 + 40_000 }), // 09:31:10, in the first bucket (09:31, 180 minutes ending with this one)
    rec("d2", "done", { finishedAt: NOW - 3 * 3600_000 + 10_000 }), // 09:30:40, just before it
    rec("e", "done", { finishedAt: NOW - 4 * 3600_000 }), // outside the span
    rec("f", "in_progress", { finishedAt: NOW - 5000 }), // not finished
    rec("g", "pending"),
  ];
  const t = throughput(recs, NOW);
  assert.equal(t.buckets.length, 180);
  assert.equal(t.bucket_ms, MIN);
  assert.equal(t.since % MIN, 0);
  const last = t.buckets.at(-1)!;
  assert.ok(last.start <= NOW && NOW < last.start + MIN);
  assert.deepEqual([last.done, last.failed], [2, 0]);
  assert.deepEqual([t.buckets.at(-2)!.done, t.buckets.at(-2)!.failed], [0, 1]);
  assert.equal(t.buckets.reduce((n, b) => n + b.done + b.failed, 0), 4);
  assert.equal(t.buckets[0]!.start, t.since);
  assert.equal(t.buckets[0]!.done, 1);
});

test("eta without stage times: what is left over the rate nodes finished in the last 15 minutes", () => {
  const recs: NodeRecord[] = [];
  for (let i = 0; i < 30; i++) recs.push(rec(`d${i}`, i % 10 === 0 ? "failed" : "done", { finishedAt: NOW - (i + 1) * 25_000 })); // 30 within 12.5 min
  recs.push(rec("old", "done", { finishedAt: NOW - 20 * MIN }));
  for (let i = 0; i < 40; i++) recs.push(rec(`p${i}`, "pending"));
  for (let i = 0; i < 20; i++) recs.push(rec(`w${i}`, "in_progress"));
  const e = eta(recs, NOW);
  assert.deepEqual([e.pending, e.in_progress, e.window_s], [40, 20, 900]);
  assert.equal(e.rate_per_min, 2); // 30 in 15 minutes
  assert.equal(e.eta_s, 30 * 60); // 60 left at 2 a minute
  assert.equal(e.method, "rate");
  assert.deepEqual(eta([rec("p", "pending")], NOW), { pending: 1, in_progress: 0, rate_per_min: null, eta_s: null, window_s: 900, method: "none", concurrency: null, per_node_s: null, gone: 0 });
  assert.equal(eta([rec("d", "done", { finishedAt: NOW - MIN })], NOW).eta_s, 0, "nothing left");
});

test("eta from stage durations and concurrency: a node 10 s from done is 10 s away, whatever finished in the last 15 minutes; gone nodes hold no slot", () => {
  // the finding: one node 10 s from done, 1 node finished in the window, said "about 4 min at 0.3 nodes/min"
  const stageTimes = (start: number) => ({ lock: { start, end: start + 1000 }, bootstrap: { start: start + 1000, end: start + 6000 }, production: { start: start + 6000, end: start + 11_000 } });
  const done = Array.from({ length: 5 }, (_, i) => rec(`d${i}`, "done", { stage: "notify", finishedAt: NOW - 20 * MIN, stageTimes: stageTimes(NOW - 30 * MIN) }));
  const running = rec("w", "in_progress", { stage: "bootstrap", current: "production", stageTimes: { lock: { start: NOW - 7000, end: NOW - 6000 }, bootstrap: { start: NOW - 6000, end: NOW - 1000 }, production: { start: NOW - 1000 } } });
  const recent = rec("r", "done", { finishedAt: NOW - MIN });
  const stats = stageStats([...done, running, recent]);
  const e = eta([...done, running, recent], NOW, undefined, stats);
  assert.equal(e.method, "stages");
  assert.equal(e.eta_s, 4, "production's usual 5 s, 1 s of it run");
  assert.equal(e.per_node_s, 11);
  // two pending nodes behind it, one slot: 4 s + 2 whole rounds of 11 s
  const more = [...done, running, rec("p1", "pending"), rec("p2", "pending")];
  assert.equal(eta(more, NOW, undefined, stats).eta_s, 26);
  // a gone node is not waited for
  const gone = rec("g", "in_progress", { current: "bootstrap", gone: { since: NOW - 5000, reason: "no answer" } });
  const withGone = eta([...done, running, gone], NOW, undefined, stats);
  assert.deepEqual([withGone.eta_s, withGone.gone, withGone.in_progress], [4, 1, 1]);
});

test("stageStats and masterStats: p50/p95 where stages completed, counts in flight", () => {
  const recs: NodeRecord[] = [];
  for (let i = 1; i <= 20; i++) {
    recs.push(rec(`n${i}`, "done", { master: i % 2 ? "m1" : "m2", startedAt: NOW - 100 * i * 1000, finishedAt: NOW, stageTimes: { lock: { start: 0, end: 100 }, bootstrap: { start: 1000, end: 1000 + i * 1000 } } }));
  }
  recs.push(rec("busy1", "in_progress", { master: "m1", current: "bootstrap", stageTimes: { lock: { start: 0, end: 300 }, bootstrap: { start: 1000 } } }));
  recs.push(rec("busy2", "in_progress", { current: "lock", stageTimes: { lock: { start: 0 } } }));
  recs.push(rec("bad", "failed", { master: "m2", current: "sign_csr", stageTimes: { sign_csr: { start: 5 } } }));
  recs.push(rec("wait", "pending"));
  const st = stageStats(recs);
  assert.deepEqual(st.map((s) => s.stage), ["lock", "bootstrap"], "in the provisioner's order; sign_csr never completed and has no one on it");
  assert.deepEqual(st[0], { stage: "lock", samples: 21, p50_ms: 100, p95_ms: 100, in_flight: 1 });
  assert.deepEqual(st[1], { stage: "bootstrap", samples: 20, p50_ms: 10_000, p95_ms: 19_000, in_flight: 1 });
  const ms = masterStats(recs);
  assert.deepEqual(ms, [
    { master: "m1", in_flight: 1, done: 10, failed: 0, p50_ms: 900_000, p95_ms: 1_900_000 },
    { master: "m2", in_flight: 0, done: 10, failed: 1, p50_ms: 1_000_000, p95_ms: 2_000_000 },
    { master: "", in_flight: 1, done: 0, failed: 0, p50_ms: null, p95_ms: null },
  ]);
  const p = progress(recs, NOW, 1);
  assert.equal(p.throughput.buckets.length, 60);
  assert.equal(p.now, NOW);
});
