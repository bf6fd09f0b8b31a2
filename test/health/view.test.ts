import { test } from "node:test";
import assert from "node:assert/strict";
import { DEFAULT_HEALTH_POLICY, healthReport, nodesToAsk, type HealthInputs } from "../../src/health/model.js";
import { readView } from "../../src/health/read.js";
import { lostFromConsoles, lostToPublish, PUBLISH_LOST_MS, silentSeconds, ViewKeeper, watchedSeconds, type Blind } from "../../src/health/view.js";
import type { Heartbeat } from "../../src/protocol/heartbeat.js";
import type { LostStretch, ServiceRole } from "../../src/protocol/service.js";

// "I cannot see" is not "the node is gone" (src/health/view.ts): silence the observer could not
// watch counts against nobody, a degraded view says why, and a node silent while the observer
// watched is still reported. At a fixed clock, pure.

const T = Date.parse("2026-03-01T12:00:00Z");
const hb = (identity: string): Heartbeat => ({ identity, time: T, interval: 10, version: "1", phase: "serving", state: "up", status: {} });
const seen = (identity: string, at: number): HealthInputs => ({ identity, beat: { heartbeat: hb(identity), at } });

test("watched time: blind stretches are taken out once, however they overlap, and only within [from, now]", () => {
  assert.equal(watchedSeconds(T, T + 30_000, []), 30);
  assert.equal(watchedSeconds(T, T + 30_000, [{ from: T + 10_000, to: T + 20_000, why: "" }]), 20);
  assert.equal(watchedSeconds(T, T + 30_000, [{ from: T + 10_000, why: "" }]), 10, "an open stretch runs to now");
  const overlapping: Blind[] = [{ from: T + 5_000, to: T + 15_000, why: "" }, { from: T + 10_000, to: T + 20_000, why: "" }, { from: T - 50_000, to: T + 2_000, why: "" }];
  assert.equal(watchedSeconds(T, T + 30_000, overlapping), 30 - 15 - 2);
  assert.equal(watchedSeconds(T, T + 30_000, [{ from: T + 40_000, why: "" }]), 30, "a stretch after now counts nothing");
});

test("a degraded view marks nobody unreachable for the silence it could not see, and says why and since when", () => {
  // the watch stopped delivering at T+5: every node's beat then looks 40 s old at T+40
  const inputs = [seen("a", T), seen("b", T + 3000), seen("dead-before", T - 60_000)];
  const blind: Blind[] = [{ from: T + 5000, why: "the heartbeat watch is 35 s behind the store (its probe has not come back)" }];
  const r = healthReport(inputs, DEFAULT_HEALTH_POLICY, T + 40_000, { blind, freshAsOf: T + 5000 });
  assert.equal(r.view.degraded, true);
  assert.match(r.view.why!, /behind the store/);
  assert.equal(r.view.since, new Date(T + 5000).toISOString());
  assert.equal(r.view.fresh_s_ago, 35);
  assert.deepEqual(r.nodes.map((n) => [n.identity, n.reachable]), [["dead-before", false], ["a", true], ["b", true]], "only the node silent before the view went blind is unreachable");
  // the view back (the stretch closed at T+45): the beats the store kept came in; one that really died in the window is reported at once
  const closed: Blind[] = [{ ...blind[0]!, to: T + 45_000 }];
  const after = healthReport([seen("a", T + 44_000), seen("b", T + 44_000), seen("died-in-window", T + 6000)], DEFAULT_HEALTH_POLICY, T + 46_000, { blind: closed, freshAsOf: T + 46_000 });
  assert.equal(after.view.degraded, false);
  assert.deepEqual(after.nodes.filter((n) => !n.reachable).map((n) => n.identity), ["died-in-window"]);
  // a stretch when the store itself may have lost heartbeats never counts as silence: the same node is reported 25 s of watched time later
  const lost: Blind[] = [{ ...closed[0]!, lost: true }];
  assert.equal(healthReport([seen("died-in-window", T + 6000)], DEFAULT_HEALTH_POLICY, T + 60_000, { blind: lost }).nodes[0]!.reachable, true);
  assert.equal(healthReport([seen("died-in-window", T + 6000)], DEFAULT_HEALTH_POLICY, T + 71_000, { blind: lost }).nodes[0]!.reachable, false);
});

test("a beat the store may have lost counts: silence runs from a lost stretch's end, not merely without its length", () => {
  // a node beats every 10 s; the store elects a leader from T+12 to T+15 and drops what is sent then
  // (its beat at T+13): the next comes at T+23 at best, and a late one at T+30 is no sign of death
  const election: Blind[] = [{ from: T + 12_000, to: T + 15_000, why: "refused", lost: true }];
  assert.equal(silentSeconds(T, T + 30_000, election, 25), 15);
  assert.equal(healthReport([seen("quiet-through-election", T)], DEFAULT_HEALTH_POLICY, T + 30_000, { blind: election }).nodes[0]!.reachable, true);
  assert.equal(healthReport([seen("quiet-through-election", T)], DEFAULT_HEALTH_POLICY, T + 41_000, { blind: election }).nodes[0]!.reachable, false, "still judged: 26 s after the stretch ended");
  // a stretch that ended before the last beat, one not lost (this view's own blindness), and one still open
  assert.equal(silentSeconds(T, T + 30_000, [{ from: T - 10_000, to: T - 5000, why: "", lost: true }], 25), 30);
  assert.equal(silentSeconds(T, T + 30_000, [{ from: T + 12_000, to: T + 15_000, why: "" }], 25), 27);
  assert.equal(silentSeconds(T, T + 30_000, [{ from: T + 20_000, why: "", lost: true }], 25), 0);
  assert.equal(healthReport([seen("old", T - 60_000)], DEFAULT_HEALTH_POLICY, T + 30_000, { blind: election }).nodes[0]!.reachable, false, "a node dead long before the stretch is still dead after it");
});

test("quiet across a lost stretch, a node is asked: one that does not answer is unreachable then, not 25 s after the stretch; one that answers is reachable, seen when it answered; one being asked is not judged yet", () => {
  // the store elects from T+5 to T+20; node "dead" lost its power at T+1 (its last beat at T), "alive" had its beats dropped
  const election: Blind[] = [{ from: T + 5000, to: T + 20_000, why: "refused", lost: true }];
  const now = T + 27_000;
  const fleet = [seen("dead", T), seen("alive", T), seen("fresh", T + 20_000), { ...seen("stopped", T), beat: { heartbeat: { ...hb("stopped"), state: "stopping" as const }, at: T } }];
  // by the stretch rule both are reachable for 18 s more; by the watched silence both are past 25 s: only asking tells them apart
  assert.deepEqual(healthReport(fleet, DEFAULT_HEALTH_POLICY, now, { blind: election }).nodes.filter((n) => !n.reachable).map((n) => n.identity), ["stopped"]);
  assert.deepEqual(nodesToAsk(fleet, DEFAULT_HEALTH_POLICY, now, { blind: election }), ["alive", "dead"], "the quiet ones, not the one that beat, nor the one that said it stopped");
  const asked = fleet.map((i) => (i.identity === "dead" ? { ...i, asked: { at: now, answered: false } } : i.identity === "alive" ? { ...i, asked: { at: now, answered: true } } : i));
  const r = healthReport(asked, DEFAULT_HEALTH_POLICY, now + 4000, { blind: election });
  const dead = r.nodes.find((n) => n.identity === "dead")!;
  assert.equal(dead.reachable, false);
  assert.match(dead.problems[0]!.why, /^no heartbeat for 31 s \(one is due every 10 s; unreachable after 25 s\); it did not answer a ping$/);
  const alive = r.nodes.find((n) => n.identity === "alive")!;
  assert.equal(alive.reachable, true);
  assert.equal(alive.last_seen, new Date(now).toISOString(), "an answer is as good as a beat");
  // asked within the last 10 s: not again; later, yes; an ask that failed (no answer known) judges nobody
  assert.deepEqual(nodesToAsk(asked, DEFAULT_HEALTH_POLICY, now + 4000, { blind: election }), []);
  assert.deepEqual(nodesToAsk(asked, DEFAULT_HEALTH_POLICY, now + 11_000, { blind: election }), ["dead"]);
  const failed = healthReport([{ ...seen("dead", T), asked: { at: now, answered: false, error: "no broker" } }], DEFAULT_HEALTH_POLICY, now + 4000, { blind: election });
  assert.equal(failed.nodes[0]!.reachable, true, "a failed ask says nothing of the node");
  // without a lost stretch the silence judges alone; the ask only adds what it found
  const plain = healthReport([{ ...seen("dead", T), asked: { at: now, answered: false } }], DEFAULT_HEALTH_POLICY, now);
  assert.match(plain.nodes[0]!.problems[0]!.why, /; it did not answer a ping$/);
  assert.equal(healthReport([{ ...seen("back", T), asked: { at: now, answered: true } }], DEFAULT_HEALTH_POLICY, now).nodes[0]!.reachable, true, "quiet past its limit, but it answered");
  // an ask from before its last beat is stale: the beat judges
  assert.equal(healthReport([{ ...seen("x", T + 20_000), asked: { at: T + 10_000, answered: false } }], DEFAULT_HEALTH_POLICY, now, { blind: election }).nodes[0]!.reachable, true);
  // asked ahead (the console, 4 s before the limit): at 22 s quiet it is asked; no answer judges nobody before 25 s
  const early = [seen("dead", T)];
  assert.deepEqual(nodesToAsk(early, DEFAULT_HEALTH_POLICY, T + 22_000, {}, 10_000, 4), ["dead"]);
  assert.deepEqual(nodesToAsk(early, DEFAULT_HEALTH_POLICY, T + 20_000, {}, 10_000, 4), []);
  // never more than a fifth of the limit ahead: with a 3 s limit, a node 1 s quiet is not asked
  const everySecond = [{ ...seen("dead", T), beat: { heartbeat: { ...hb("dead"), interval: 1 }, at: T } }];
  assert.deepEqual(nodesToAsk(everySecond, { ...DEFAULT_HEALTH_POLICY, unreachableAfterS: 3 }, T + 1000, {}, 10_000, 4), []);
  assert.deepEqual(nodesToAsk(everySecond, { ...DEFAULT_HEALTH_POLICY, unreachableAfterS: 3 }, T + 2500, {}, 10_000, 4), ["dead"]);
  // the caller's own lead, uncapped (`muster health`: every limit that falls within its 5 s ask)
  assert.deepEqual(nodesToAsk(everySecond, { ...DEFAULT_HEALTH_POLICY, unreachableAfterS: 3 }, T + 1000, {}, 0, () => 5), ["dead"]);
  assert.deepEqual(nodesToAsk(early, DEFAULT_HEALTH_POLICY, T + 19_000, {}, 0, () => 5), []);
  assert.deepEqual(nodesToAsk(early, DEFAULT_HEALTH_POLICY, T + 21_000, {}, 0, () => 5), ["dead"]);
  const askedEarly = [{ ...seen("dead", T), asked: { at: T + 22_000, answered: false } }];
  assert.equal(healthReport(askedEarly, DEFAULT_HEALTH_POLICY, T + 24_000).nodes[0]!.reachable, true, "24 s quiet: not yet past its limit");
  assert.equal(healthReport(askedEarly, DEFAULT_HEALTH_POLICY, T + 26_000).nodes[0]!.reachable, false);
  // while the ask is under way the node is not judged: a failover's dropped beats do not flash it unreachable
  assert.equal(healthReport([{ ...seen("dead", T), asked: { at: now, answered: false, pending: true } }], DEFAULT_HEALTH_POLICY, now + 2000).nodes[0]!.reachable, true);
  // a view blind now asks nobody (nobody is judged)
  assert.deepEqual(nodesToAsk(fleet, DEFAULT_HEALTH_POLICY, now, { blind: [{ from: T + 22_000, why: "reconnecting" }] }), []);
});

test("silence is judged only up to the last moment the observer knows it saw (judgeUntil)", () => {
  const r = healthReport([seen("a", T)], DEFAULT_HEALTH_POLICY, T + 27_000, { judgeUntil: T + 24_000 });
  assert.equal(r.nodes[0]!.reachable, true, "27 s of wall time, 24 s of it seen: not yet past 25 s");
  assert.equal(healthReport([seen("a", T)], DEFAULT_HEALTH_POLICY, T + 27_000).nodes[0]!.reachable, false);
});

test("the view keeper: current while its probes come back, blind from the last one when they stop, closed by the next", () => {
  const k = new ViewKeeper({ lagMs: 6000, keepMs: 3_600_000 });
  // before any probe is stored: only the connection counts
  assert.deepEqual(k.tick(T, true).blind, []);
  assert.equal(k.tick(T + 1000, false).blind[0]?.why, "not connected to the broker: reconnecting");
  assert.equal(k.tick(T + 2000, true).blind[0]?.to, T + 2000);
  k.put("alive");
  k.seen("alive", T + 3000);
  let v = k.tick(T + 4000, true);
  assert.equal(v.judgeUntil, T + 3000);
  assert.equal(v.blind.filter((b) => b.to === undefined).length, 0);
  // probes stored but not coming back: behind, from the last one seen
  v = k.tick(T + 10_000, true);
  const open = v.blind.find((b) => b.to === undefined)!;
  assert.equal(open.from, T + 3000);
  assert.equal(open.lost, undefined, "a watch behind loses nothing");
  assert.match(open.why, /the watch on alive is 7 s behind/);
  // the store refusing probes says so
  k.put("alive", "no responders available for request");
  const refused = k.tick(T + 12_000, true).blind.find((b) => b.to === undefined)!;
  assert.match(refused.why, /the alive store does not take writes: no responders/);
  assert.equal(refused.lost, true, "the store refusing writes: heartbeats may be lost");
  assert.match(k.tick(T + 13_000, false).blind.find((b) => b.to === undefined)!.why, /not connected/);
  // a probe back: closed at its time
  k.put("alive");
  k.seen("alive", T + 20_000);
  v = k.tick(T + 20_500, true);
  assert.equal(v.blind.find((b) => b.from === T + 3000)?.to, T + 20_000);
  assert.equal(v.blind.filter((b) => b.to === undefined).length, 0);
});

test("two watches: the view is as fresh as the one furthest behind, and one stuck alone makes it degraded, naming which", () => {
  const k = new ViewKeeper({ lagMs: 6000, keepMs: 3_600_000 });
  k.put("alive");
  k.put("services");
  k.seen("alive", T);
  assert.equal(k.freshAsOf, undefined, "not current before every stored channel had a probe back");
  k.seen("services", T + 1000);
  assert.equal(k.freshAsOf, T);
  k.seen("alive", T + 20_000);
  const v = k.tick(T + 20_500, true);
  const open = v.blind.find((b) => b.to === undefined)!;
  assert.equal(open.from, T + 1000);
  assert.match(open.why, /the watch on services is 20 s behind/);
});

test("a read: its own probe proves the store current; without one, a store quiet for longer than a node takes to count as unreachable is not trusted", () => {
  const now = T + 100_000;
  assert.deepEqual(readView(true, T, 5, DEFAULT_HEALTH_POLICY, now), { blind: [], freshAsOf: now });
  assert.deepEqual(readView(false, now - 4000, 5, DEFAULT_HEALTH_POLICY, now), { blind: [], freshAsOf: now - 4000 });
  const quiet = readView(false, now - 60_000, 5, DEFAULT_HEALTH_POLICY, now);
  assert.equal(quiet.blind[0]!.from, now - 60_000);
  assert.match(quiet.blind[0]!.why, /no heartbeat from any node for 60 s/);
  assert.deepEqual(readView(false, 0, 0, DEFAULT_HEALTH_POLICY, now), { blind: [] });
});

test("a console publishes its lost stretches of the last half hour; a reader takes a fresh console's as its own, an open one ending now, and nobody else's", () => {
  const now = T + 3_600_000;
  const blind: Blind[] = [
    { from: now - PUBLISH_LOST_MS - 60_000, to: now - PUBLISH_LOST_MS - 1, why: "old", lost: true },
    { from: now - 120_000, to: now - 100_000, why: "behind", lost: false },
    { from: now - 90_000, to: now - 80_000, why: "refused", lost: true },
    { from: now - 5000, why: "refused now", lost: true },
  ];
  assert.deepEqual(lostToPublish(blind, now, 16), [
    { from: now - 90_000, to: now - 80_000, why: "refused" },
    { from: now - 5000, why: "refused now" },
  ]);
  assert.deepEqual(lostToPublish(blind, now, 1), [{ from: now - 5000, why: "refused now" }], "the newest when there are too many");
  const beat = (role: ServiceRole, state: "up" | "stopping", lost: LostStretch[]) => ({ role, name: "console.lab", interval: 10, state, lost });
  const published = lostToPublish(blind, now, 16);
  const taken = lostFromConsoles([{ beat: beat("console", "up", published), at: now - 5000 }], now);
  assert.deepEqual(
    taken.map((b) => [b.from, b.to, b.lost]),
    [
      [now - 90_000, now - 80_000, true],
      [now - 5000, now, true],
    ],
  );
  assert.match(taken[0]!.why, /^console\.lab saw the store refuse writes: refused$/);
  // a stale console (quiet past three intervals), a stopped one, and a service that is no console: nothing
  assert.deepEqual(lostFromConsoles([{ beat: beat("console", "up", published), at: now - 31_000 }], now), []);
  assert.deepEqual(lostFromConsoles([{ beat: beat("console", "stopping", published), at: now - 1000 }], now), []);
  assert.deepEqual(lostFromConsoles([{ beat: beat("provisioner", "up", published), at: now - 1000 }], now), []);
  // in a report: a node quiet 28 s through a 10 s stretch is reachable, without it not
  const quiet = seen("through-failover", now - 28_000);
  const lost = lostFromConsoles([{ beat: beat("console", "up", [{ from: now - 20_000, to: now - 10_000, why: "x" }]), at: now - 1000 }], now);
  assert.equal(healthReport([quiet], DEFAULT_HEALTH_POLICY, now, { blind: lost }).nodes[0]!.reachable, true);
  assert.equal(healthReport([quiet], DEFAULT_HEALTH_POLICY, now, {}).nodes[0]!.reachable, false);
});
