import { test } from "node:test";
import assert from "node:assert/strict";
import { describeMeta, membersOutsideMeta, metaRemedy, parseMetaView } from "../../src/broker/meta-group.js";

// Reading JetStream's meta group from each member's /jsz (broker/meta-group.ts), as the lab's site
// does when an R3 stream is refused placement; real members' bodies are read in server-config.test.ts.

/** A /jsz body as nats-server writes it: the leader alone lists its peers under replicas. */
const jsz = (leader: string | undefined, size: number, peers?: string[]) =>
  JSON.stringify({ server_id: "NABC", config: { store_dir: "/var/lib/nats/jetstream" }, meta_cluster: { name: "muster", ...(leader ? { leader } : {}), cluster_size: size, pending: 0, ...(peers ? { replicas: peers.map((name) => ({ name, current: true, active: 1000, peer: "x" })) } : {}) } });

test("a member the leader does not count is left out; the others are not", () => {
  const views = [parseMetaView("nats1", jsz("nats1", 3, ["nats2"])), parseMetaView("nats2", jsz("nats1", 3)), parseMetaView("nats3", jsz(undefined, 3))];
  assert.deepEqual(membersOutsideMeta(views), ["nats3"]);
  assert.equal(describeMeta(views), "nats1 leads, expects 3, peers nats2; nats2: leader nats1, expects 3; nats3: no leader, expects 3");
});

test("a member leading a group of its own besides: the leader counting the most peers is the one judged by", () => {
  const views = [parseMetaView("nats1", jsz("nats1", 3, [])), parseMetaView("nats2", jsz("nats3", 3)), parseMetaView("nats3", jsz("nats3", 3, ["nats2"]))];
  assert.deepEqual(membersOutsideMeta(views), ["nats1"]);
});

test("nothing to judge by: no leader, or the leader silent, leaves nobody out", () => {
  assert.deepEqual(membersOutsideMeta([parseMetaView("nats1", jsz(undefined, 3)), parseMetaView("nats2", jsz(undefined, 3))]), []);
  const silent = { server: "nats1", error: "monitoring port silent (ECONNREFUSED)" };
  assert.deepEqual(membersOutsideMeta([silent, parseMetaView("nats2", jsz("nats1", 3))]), []);
  assert.deepEqual(membersOutsideMeta([parseMetaView("nats1", jsz("nats1", 3, ["nats2", "nats3"])), parseMetaView("nats2", jsz("nats1", 3)), parseMetaView("nats3", jsz("nats1", 3))]), []);
});

test("bodies that are not /jsz's give an error, never a throw", () => {
  assert.match(parseMetaView("nats1", "<html>").error!, /not JSON/);
  assert.match(parseMetaView("nats1", "null").error!, /no meta_cluster/);
  assert.match(parseMetaView("nats1", JSON.stringify({ server_id: "x" })).error!, /clustered mode not running/);
  const odd = parseMetaView("nats1", JSON.stringify({ meta_cluster: { leader: 7, cluster_size: "3", replicas: [{ name: 1 }, null, { name: "nats2" }] } }));
  assert.deepEqual(odd, { server: "nats1", peers: ["nats2"] });
  assert.equal(describeMeta([{ server: "nats1", error: "monitoring port silent (timeout)" }]), "nats1: monitoring port silent (timeout)");
});

test("the remedy: first restart the members left out, then the leader, then nobody (the logs are the operator's)", () => {
  const views = [parseMetaView("nats1", jsz("nats2", 3)), parseMetaView("nats2", jsz("nats2", 3, ["nats1"])), parseMetaView("nats3", jsz(undefined, 3))];
  assert.deepEqual(metaRemedy(views, 0), { restart: ["nats3"], out: ["nats3"] });
  assert.deepEqual(metaRemedy(views, 1), { restart: ["nats2"], out: ["nats3"] });
  assert.deepEqual(metaRemedy(views, 2), { restart: [], out: ["nats3"] });
  const whole = [parseMetaView("nats1", jsz("nats2", 3)), parseMetaView("nats2", jsz("nats2", 3, ["nats1", "nats3"])), parseMetaView("nats3", jsz("nats2", 3))];
  assert.deepEqual(metaRemedy(whole, 0), { restart: [], out: [] });
});
