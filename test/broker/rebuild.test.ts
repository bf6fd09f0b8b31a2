import { test } from "node:test";
import assert from "node:assert/strict";
import { membersOf, planRebuild, type StreamPeers } from "../../src/broker/rebuild.js";

// The plan of `muster broker stores --rebuild MEMBER` (broker/rebuild.ts); the rebuild itself runs
// against three real nats-servers in server-config.test.ts.

/** A stream whose leader is its first peer, or none (null: an election under way). */
const s = (name: string, replicas: number, peers: string[], leader: string | null = peers[0]!): StreamPeers => ({ name, replicas, peers, ...(leader ? { leader } : {}) });

test("a member's copy is rebuilt where it has one; its leadership is moved off it first", () => {
  const plan = planRebuild([s("KV_a", 3, ["nats1", "nats2", "nats3"]), s("KV_b", 3, ["nats2", "nats1", "nats3"])], "nats1");
  assert.deepEqual(plan, [
    { stream: "KV_a", action: "rebuild", stepDown: true },
    { stream: "KV_b", action: "rebuild", stepDown: false },
  ]);
});

test("nothing is done where it cannot be: no copy there, a single copy, a member short, no leader", () => {
  const plan = planRebuild([s("KV_c", 3, ["nats1", "nats3", "nats4"]), s("KV_d", 1, ["nats2"]), s("KV_e", 3, ["nats1", "nats2"]), s("KV_f", 3, ["nats2", "nats3", "nats1"], null)], "nats2");
  assert.deepEqual(
    plan.map((p) => [p.stream, p.action, p.action === "skip" ? p.why : ""]),
    [
      ["KV_c", "skip", "nats2 holds no copy"],
      ["KV_d", "skip", "a single copy: nothing to rebuild it from"],
      ["KV_e", "skip", "2 of 3 copies placed: the cluster is short of a member"],
      ["KV_f", "skip", "no leader: the stream has no quorum now"],
    ],
  );
});

test("the members are every server holding a copy of some stream, once each, sorted", () => {
  assert.deepEqual(membersOf([s("a", 3, ["nats3", "nats1", "nats2"]), s("b", 3, ["nats2", "nats4", "nats1"])]), ["nats1", "nats2", "nats3", "nats4"]);
  assert.deepEqual(membersOf([]), []);
});
