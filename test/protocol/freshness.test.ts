import { test } from "node:test";
import assert from "node:assert/strict";
import { checkFreshness, ReplayCache } from "../../src/protocol/freshness.js";
import { isValidAgentName, isValidCollective, isValidIdentity, subjects } from "../../src/protocol/subjects.js";

const policy = { maxClockSkew: 10 };
const now = 1_700_000_000_000;

test("a request inside its ttl is fresh", () => {
  assert.equal(checkFreshness(now, 60, now, policy), "ok");
  assert.equal(checkFreshness(now - 59_000, 60, now, policy), "ok");
});

test("a request past ttl plus skew has expired; within the skew it is still accepted", () => {
  assert.equal(checkFreshness(now - 60_000 - 10_000 - 1, 60, now, policy), "expired");
  assert.equal(checkFreshness(now - 60_000 - 10_000, 60, now, policy), "ok");
  assert.equal(checkFreshness(now - 65_000, 60, now, policy), "ok");
});

test("a request from the future beyond the skew is refused; within it, accepted", () => {
  assert.equal(checkFreshness(now + 10_001, 60, now, policy), "future");
  assert.equal(checkFreshness(now + 10_000, 60, now, policy), "ok");
  assert.equal(checkFreshness(now + 5_000, 60, now, policy), "ok");
  assert.equal(checkFreshness(now + 1, 60, now, { maxClockSkew: 0 }), "future");
});

test("the replay cache refuses a key it has seen and admits distinct keys", () => {
  const cache = new ReplayCache(policy);
  assert.equal(cache.admit("muster.node.a|id1", now, 60, now), true);
  assert.equal(cache.admit("muster.node.a|id1", now, 60, now + 1000), false);
  assert.equal(cache.admit("muster.node.b|id1", now, 60, now), true);
  assert.equal(cache.admit("muster.node.a|id2", now, 60, now), true);
  assert.equal(cache.size, 3);
});

test("the replay cache remembers an id for as long as the request could still pass the freshness check", () => {
  const cache = new ReplayCache(policy);
  cache.admit("k", now, 60, now);
  // the latest instant at which checkFreshness still says ok for this request
  const lastFresh = now + 60_000 + 10_000;
  assert.equal(checkFreshness(now, 60, lastFresh, policy), "ok");
  assert.equal(cache.admit("k", now, 60, lastFresh), false, "replay accepted while the request is still fresh");
});

test("the replay cache forgets ids once they have expired, so it does not grow forever", () => {
  const cache = new ReplayCache(policy, 1_000_000);
  for (let i = 0; i < 100; i++) cache.admit(`k${i}`, now, 1, now);
  assert.equal(cache.size, 100);
  const later = now + 1_000 + 2 * 10_000 + 10_001; // past every entry's horizon and the sweep interval
  cache.admit("fresh", later, 60, later);
  assert.equal(cache.size, 1);
});

test("the replay cache sweeps when full", () => {
  const cache = new ReplayCache(policy, 10);
  for (let i = 0; i < 10; i++) cache.admit(`k${i}`, now, 1, now);
  const later = now + 1_000 + 20_001;
  cache.admit("x", later, 60, later); // full: sweeps the expired entries before admitting
  assert.ok(cache.size <= 10);
  assert.equal(cache.admit("x", later, 60, later), false);
});

test("subjects are built in one place and validated names cannot inject tokens", () => {
  assert.equal(subjects.broadcast("muster", "rpcutil"), "muster.broadcast.agent.rpcutil");
  assert.equal(subjects.node("muster", "web1.example.net"), "muster.node.web1.example.net");
  assert.equal(subjects.identityOf("muster", "muster.node.web1.example.net"), "web1.example.net");
  assert.equal(subjects.identityOf("muster", "muster.broadcast.agent.x"), undefined);
  assert.equal(subjects.registration("prod"), "prod.registration");
  assert.equal(subjects.lifecycle("startup", "server"), "muster.lifecycle.startup.server");
  for (const bad of ["a.b", "a*", ">", "a b", ""]) assert.equal(isValidCollective(bad), false, bad);
  for (const bad of ["a*", "a>", "a b", ".a", "a.", "a..b", ""]) assert.equal(isValidIdentity(bad), false, bad);
  for (const bad of ["Rpc", "a.b", "1a", "a-b"]) assert.equal(isValidAgentName(bad), false, bad);
  assert.ok(isValidIdentity("web-1.example.net"));
});
