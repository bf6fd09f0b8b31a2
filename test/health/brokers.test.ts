import { test } from "node:test";
import assert from "node:assert/strict";
import { brokerVerdicts, nameFromUrl, type MemberLook } from "../../src/health/brokers.js";

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
