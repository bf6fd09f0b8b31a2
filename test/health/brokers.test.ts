import { test } from "node:test";
import assert from "node:assert/strict";
import { brokerVerdicts, nameFromUrl, STUCK_COPY_MS, stuckCopies, type MemberLook } from "../../src/health/brokers.js";

// Broker members as the console sees them through their monitoring ports (src/health/brokers.ts),
// from /varz, /routez and /jsz bodies shaped as nats-server 2.9 and 2.10 answer (these were taken
// from a 3-member cluster, n3 killed): each member answers or not, routes to the others that
// answer, is counted by the meta group's leader, and holds current copies, as each stream's leader
// reports them (a follower's own report is not taken: it says the other follower is behind).

const varz = (name: string, id: string) => ({ server_id: id, server_name: name, version: "2.10.24", uptime: "1h2m", connections: 4 });
const routes = (...ids: string[]) => ({ routes: ids.map((remote_id) => ({ remote_id })) });
const jsz = (me: string, metaReplicas: { name: string; current: boolean }[] | undefined, streams: { name: string; leader: string; replicas: { name: string; current: boolean; lag?: number; active?: number }[] }[]) => ({
  meta_cluster: { name: "c", leader: "n2", cluster_size: 3, ...(metaReplicas ? { replicas: metaReplicas } : {}) },
  account_details: [{ name: "$G", stream_detail: streams.map((s) => ({ name: s.name, cluster: { name: "c", leader: s.leader, replicas: s.replicas } })) }],
  server_name: me,
});

test("a member killed: it does not answer; the others route to each other and are counted; its copies are behind as the leader says", () => {
  const looks: MemberLook[] = [
    { url: "http://nats1:8222", varz: varz("n1", "ID1"), routez: routes("ID2"), jsz: jsz("n1", undefined, [{ name: "KV_muster_provision", leader: "n2", replicas: [{ name: "n2", current: true }, { name: "n3", current: false, lag: 7 }] }]) },
    { url: "http://nats2:8222", varz: varz("n2", "ID2"), routez: routes("ID1"), jsz: jsz("n2", [{ name: "n1", current: true }, { name: "n3", current: false }], [{ name: "KV_muster_provision", leader: "n2", replicas: [{ name: "n1", current: true }, { name: "n3", current: false, lag: 7, active: 9_164_074_591 }] }]) },
    { url: "http://nats3:8222", knownName: "n3", error: "ECONNREFUSED" },
  ];
  const v = Object.fromEntries(brokerVerdicts(looks).map((x) => [x.name, x]));
  const st = (n: string) => Object.fromEntries(v[n]!.checks.map((c) => [c.name, c.status]));
  assert.deepEqual(st("n1"), { answers: "ok", routes: "ok", "meta group": "ok", streams: "ok" });
  assert.deepEqual(st("n2"), { answers: "ok", routes: "ok", "meta group": "ok", streams: "ok" });
  assert.match(v.n2!.checks.find((c) => c.name === "meta group")!.why, /leads it \(3 of 3 members counted\)/);
  assert.match(v.n2!.checks.find((c) => c.name === "streams")!.why, /1 replicated stream copy current, leads 1/);
  assert.equal(v.n3!.answers, false);
  assert.deepEqual(st("n3"), { answers: "fail", "meta group": "ok", streams: "fail" });
  assert.match(v.n3!.checks[0]!.why, /no answer on http:\/\/nats3:8222: ECONNREFUSED/);
  assert.match(v.n3!.checks.find((c) => c.name === "streams")!.why, /KV_muster_provision 7 operations behind, last heard 9 s ago \(leader n2\)/);
});

test("a missing route, a member the meta leader does not count, and a lagging copy each fail their check and say which", () => {
  const looks: MemberLook[] = [
    { url: "http://a:8222", varz: varz("n1", "ID1"), routez: routes("ID2"), jsz: jsz("n1", undefined, []) },
    { url: "http://b:8222", varz: varz("n2", "ID2"), routez: routes("ID1", "ID3"), jsz: jsz("n2", [{ name: "n1", current: true }], [{ name: "S", leader: "n2", replicas: [{ name: "n1", current: true }, { name: "n3", current: false, lag: 40 }] }]) },
    { url: "http://c:8222", varz: varz("n3", "ID3"), routez: routes("ID2"), jsz: jsz("n3", undefined, []) },
  ];
  const v = Object.fromEntries(brokerVerdicts(looks).map((x) => [x.name, x]));
  const check = (n: string, c: string) => v[n]!.checks.find((x) => x.name === c)!;
  assert.equal(check("n1", "routes").status, "fail");
  assert.match(check("n1", "routes").why, /no route to n3, which answers/);
  assert.equal(check("n3", "meta group").status, "fail");
  assert.match(check("n3", "meta group").why, /leader n2 does not count it/);
  assert.equal(check("n3", "streams").status, "fail");
  assert.match(check("n3", "streams").why, /1 of 1 copies not current: S 40 operations behind/);
});

test("garbage from a monitoring port never throws: what cannot be read is left unchecked, and names come from the URL", () => {
  const v = brokerVerdicts([{ url: "http://nats9.example.net:8222", varz: "not an object", routez: 42, jsz: { meta_cluster: [1] } }, { url: "http://127.0.0.1:8222", error: "timeout" }]);
  assert.equal(v[0]!.name, "nats9");
  assert.equal(v[1]!.name, "127.0.0.1_8222");
  assert.equal(nameFromUrl("not a url"), "broker");
  assert.equal(v[1]!.answers, false);
});

/** A member's look holding its own copy of one stream, at `seq`, the leader as it knows it, the replicas as the leader reports them. */
const withCopy = (me: string, id: string, seq: number, leader: string) => ({
  url: `http://${me}:8222`,
  varz: varz(me, id),
  routez: routes(...["ID1", "ID2", "ID3"].filter((x) => x !== id)),
  jsz: { meta_cluster: { name: "c", leader: "n1", cluster_size: 3 }, account_details: [{ name: "$G", stream_detail: [{ name: "KV_muster_provision", state: { last_seq: seq }, cluster: { name: "c", leader, replicas: ["n1", "n2", "n3"].filter((n) => n !== me && me === leader).map((name) => ({ name, current: true, lag: 0 })) } }] }] },
});

test("a copy that stays behind while its leader counts it current is called stuck after 30 s unmoved, and the streams check names the rebuild", () => {
  const look = (n2: number, n1 = 84) => [withCopy("n1", "ID1", n1, "n1"), withCopy("n2", "ID2", n2, "n1"), withCopy("n3", "ID3", n1, "n1")];
  const t0 = 1_000_000;
  let r = stuckCopies(look(44), t0, new Map());
  assert.deepEqual(r.stuck, [], "one look apart is the looks' own timing");
  r = stuckCopies(look(44), t0 + STUCK_COPY_MS - 1, r.marks);
  assert.deepEqual(r.stuck, []);
  // the leader's own lag says it is current: without the marks the member looks fine
  assert.equal(brokerVerdicts(look(44)).find((v) => v.name === "n2")!.checks.find((c) => c.name === "streams")!.status, "ok");
  r = stuckCopies(look(44), t0 + STUCK_COPY_MS, r.marks);
  assert.deepEqual(r.stuck, [{ member: "n2", stream: "KV_muster_provision", leader: "n1", seq: 44, leaderSeq: 84, since: t0, forS: 30 }]);
  const v = Object.fromEntries(brokerVerdicts(look(44), r.stuck).map((x) => [x.name, x]));
  const streams = v.n2!.checks.find((c) => c.name === "streams")!;
  assert.equal(streams.status, "fail");
  assert.match(streams.why, /KV_muster_provision: its copy has stayed at 44 for 30 s while its leader n1 is at 84/);
  assert.match(streams.why, /muster broker stores --rebuild n2/);
  assert.deepEqual(v.n2!.details.stuck, [{ stream: "KV_muster_provision", leader: "n1", seq: 44, leader_seq: 84, since: new Date(t0).toISOString(), for_s: 30 }]);
  assert.equal(v.n1!.checks.find((c) => c.name === "streams")!.status, "ok", "the leader and the other copy are fine");
  assert.equal(v.n3!.checks.find((c) => c.name === "streams")!.status, "ok");
  // rebuilt: it moves (no longer stuck, the clock starts again), then matches (forgotten)
  // the look times are given (a pure function of them): the mark restarts at the look that saw it move
  const moved = t0 + 2 * STUCK_COPY_MS;
  r = stuckCopies(look(70, 90), moved, r.marks);
  assert.deepEqual(r.stuck, [], "a copy that moves is catching up");
  assert.deepEqual([...r.marks.values()], [{ seq: 70, since: moved }]);
  r = stuckCopies(look(90, 90), moved + STUCK_COPY_MS, r.marks);
  assert.deepEqual(r.stuck, []);
  assert.equal(r.marks.size, 0);
});

test("a copy ahead of its leader's for 30 s is called stuck too: the leader's copy may lack writes", () => {
  const look = () => [withCopy("n1", "ID1", 44, "n1"), withCopy("n2", "ID2", 84, "n1"), withCopy("n3", "ID3", 44, "n1")];
  let r = stuckCopies(look(), 0, new Map());
  r = stuckCopies(look(), STUCK_COPY_MS + 5000, r.marks);
  assert.equal(r.stuck.length, 1);
  const why = brokerVerdicts(look(), r.stuck).find((x) => x.name === "n2")!.checks.find((c) => c.name === "streams")!.why;
  assert.match(why, /its copy is at 84, ahead of its leader n1 at 44, for 35 s/);
  assert.match(why, /Do not rebuild n2: compare the members' copies first/, "a rebuild would copy the leader's shorter copy over it");
  assert.doesNotMatch(why, /--rebuild/);
});

test("stuck copies from garbage: no state, a sequence that is not a number, no leader claiming itself, a member that does not answer: nothing stuck, nothing thrown", () => {
  const bad: MemberLook[] = [
    { url: "http://a:8222", varz: varz("n1", "ID1"), jsz: { account_details: [{ stream_detail: [{ name: "S", cluster: { leader: "n2" } }] }] } },
    { url: "http://b:8222", varz: varz("n2", "ID2"), jsz: { account_details: [{ stream_detail: [{ name: "S", state: { last_seq: "84" }, cluster: { leader: "n2" } }] }] } },
    { url: "http://c:8222", varz: varz("n3", "ID3"), jsz: { account_details: [{ stream_detail: [{ name: "S", state: { last_seq: 3 }, cluster: { leader: "n1" } }] }] } },
    { url: "http://d:8222", error: "ECONNREFUSED", varz: varz("n4", "ID4"), jsz: { account_details: [{ stream_detail: [{ name: "S", state: { last_seq: 1 }, cluster: { leader: "n4" } }] }] } },
    { url: "http://e:8222", varz: "x", jsz: 7 },
  ];
  let r = stuckCopies(bad, 0, new Map());
  r = stuckCopies(bad, 10 * STUCK_COPY_MS, r.marks);
  assert.deepEqual(r.stuck, []);
  assert.equal(r.marks.size, 0);
});
