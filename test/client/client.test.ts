import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { rpcutilDDL } from "../../src/agents/rpcutil/ddl.js";
import { MusterClient } from "../../src/client/client.js";
import { collectReplies } from "../../src/client/collector.js";
import { FlatfileSource } from "../../src/client/discovery/flatfile.js";
import { applyLimit, parseLimit } from "../../src/client/limit.js";
import { startEmulator, type RunningEmulator } from "../../src/emulator/emulator.js";
import { generateFleet } from "../../src/emulator/fleet.js";
import { RpcError, MusterError } from "../../src/errors.js";
import { buildFilter } from "../../src/filter/index.js";
import { silentLogger } from "../../src/log.js";
import { decodeRequest, encodeReply } from "../../src/protocol/envelope.js";
import { Status } from "../../src/protocol/status.js";
import { REPLY_PROTOCOL } from "../../src/protocol/types.js";
import { connectNats, record, startBroker, tempDir, type Broker } from "../support/collective.js";

// The client API against an in-process emulated fleet on a real nats-server.

const tmp = tempDir("client");
process.env.MUSTER_CONFIG_DIR = join(tmp.path, "config");

const fleet = generateFleet(12);
const ids = fleet.map((n) => n.identity).sort();

let broker: Broker;
let serverNc: NatsConnection;
let nc: NatsConnection;
let emu: RunningEmulator;
let client: MusterClient;

before(async () => {
  broker = await startBroker();
  serverNc = await connectNats(broker.url);
  emu = await startEmulator({ nc: serverNc, nodes: fleet, collective: "muster", log: silentLogger });
  nc = await connectNats(broker.url);
  client = await MusterClient.connect({ nc });
});

after(async () => {
  await client?.close();
  await emu?.stop();
  await serverNc?.drain().catch(() => undefined);
  await nc?.drain().catch(() => undefined);
  await broker?.dispose();
  tmp.remove();
});

test("discover returns the matching identities, sorted, and reports each as found", async () => {
  const found: string[] = [];
  assert.deepEqual(await client.discover({ timeoutMs: 5000, onFound: (id) => found.push(id) }), ids);
  assert.deepEqual(found.sort(), ids);
  const web = fleet.filter((n) => n.facts.role === "web").map((n) => n.identity).sort();
  assert.deepEqual(await client.discover({ filter: buildFilter({ class: ["web"] }), timeoutMs: 5000 }), web);
  assert.deepEqual(await client.discover({ filter: buildFilter({ fact: ["country=zz"] }), timeoutMs: 500 }), []);
});

// A timeout of ten minutes, and the test's deadline of two: waiting it out is a hang, caught there.
test("discovery ends after a quiet window once replies stop, not at the timeout", { timeout: 120_000 }, async () => {
  assert.deepEqual(await client.discover({ timeoutMs: 600_000, idleMs: 200 }), ids);
});

test("call discovers, addresses every node directly and summarises", async () => {
  const discovered: string[][] = [];
  const seen: string[] = [];
  const r = await client.call("rpcutil", "get_fact", { fact: "country" }, { filter: buildFilter({ fact: ["country=/^(de|us)$/"] }), onDiscovered: (n) => discovered.push(n), onReply: (x) => seen.push(x.sender) });
  const want = fleet.filter((n) => ["de", "us"].includes(n.facts.country as string)).map((n) => n.identity).sort();
  assert.deepEqual(discovered, [want]);
  assert.deepEqual(r.discovered, want);
  assert.deepEqual(r.replies.map((x) => x.sender).sort(), want);
  assert.deepEqual(seen.sort(), want);
  assert.equal(r.stats.discovered, want.length);
  assert.equal(r.stats.responded, want.length);
  assert.equal(r.stats.ok, want.length);
  assert.equal(r.stats.failed, 0);
  assert.deepEqual(r.stats.noResponse, []);
  for (const x of r.replies) assert.equal(x.data.value, fleet.find((n) => n.identity === x.sender)!.facts.country);
});

// The same deadline: a call that waited for its ten-minute timeout would hang the test.
test("a directed call completes as soon as every node answered, and names the ones that did not", { timeout: 120_000 }, async () => {
  const ok = await client.call("rpcutil", "ping", {}, { nodes: ids.slice(0, 3), timeoutMs: 600_000 });
  assert.equal(ok.stats.responded, 3);
  const partial = await client.call("rpcutil", "ping", {}, { nodes: [ids[0]!, "ghost.example.net"], timeoutMs: 1000 });
  assert.equal(partial.stats.responded, 1);
  assert.deepEqual(partial.stats.noResponse, ["ghost.example.net"]);
});

test("failed replies are counted as failed", async () => {
  const r = await client.call("rpcutil", "get_data", { source: "nosuch" }, { nodes: ids.slice(0, 2), timeoutMs: 5000 });
  assert.equal(r.stats.ok, 0);
  assert.equal(r.stats.failed, 2);
  assert.ok(r.replies.every((x) => x.statuscode === Status.InvalidData));
});

test("--batch: nodes are addressed in batches, each batch its own request", async () => {
  const rec = record(nc, "muster.node.>");
  await nc.flush();
  const r = await client.call("rpcutil", "ping", {}, { nodes: ids.slice(0, 5), batch: 2, batchSleepMs: 50, timeoutMs: 5000 });
  await nc.flush();
  rec.stop();
  assert.equal(r.stats.ok, 5);
  const byId = new Map<string, string[]>();
  for (const m of rec.messages) {
    const req = decodeRequest(m.data);
    byId.set(req.id, [...(byId.get(req.id) ?? []), m.subject.slice("muster.node.".length)]);
  }
  assert.deepEqual([...byId.values()].map((s) => s.sort()), [ids.slice(0, 2), ids.slice(2, 4), ids.slice(4, 5)]);
});

test("--limit keeps the first N, N%, or a seeded random selection that reproduces", async () => {
  const first = await client.call("rpcutil", "ping", {}, { limit: parseLimit("3"), discovery: { timeoutMs: 5000 } });
  assert.deepEqual(first.replies.map((x) => x.sender).sort(), ids.slice(0, 3));
  assert.equal(first.stats.discovered, 3);
  const pct = await client.call("rpcutil", "ping", {}, { limit: parseLimit("25%"), discovery: { timeoutMs: 5000 } });
  assert.equal(pct.replies.length, 3); // 25% of 12
  const seeded = parseLimit("4", "random", 42);
  const a = await client.call("rpcutil", "ping", {}, { limit: seeded, discovery: { timeoutMs: 5000 } });
  const b = await client.call("rpcutil", "ping", {}, { limit: seeded, discovery: { timeoutMs: 5000 } });
  const pick = (r: typeof a) => r.replies.map((x) => x.sender).sort();
  assert.deepEqual(pick(a), pick(b));
  assert.deepEqual(pick(a), applyLimit(ids, seeded));
  assert.notDeepEqual(pick(a), ids.slice(0, 4), "seed 42 happens to pick the first four; choose another seed");
  assert.throws(() => parseLimit("0"), MusterError);
  assert.throws(() => parseLimit("150%"), MusterError);
  assert.throws(() => parseLimit("ten"), MusterError);
});

test("flatfile discovery reads identities and applies identity filters only", async () => {
  const file = join(tmp.path, "nodes.txt");
  writeFileSync(file, `# our nodes\n${ids[1]}\n\n${ids[0]}  # first\n${ids[1]}\nghost.example.net\n`);
  const source = new FlatfileSource(file);
  assert.deepEqual(await client.discover({ source }), [ids[0], ids[1], "ghost.example.net"].sort());
  assert.deepEqual(await client.discover({ source, filter: buildFilter({ identity: ["/^ghost/"] }) }), ["ghost.example.net"]);
  writeFileSync(file, "not an identity!\n");
  await assert.rejects(client.discover({ source }), /nodes\.txt:1/);
});

test("the typed agent client validates input before anything is sent", async () => {
  const rpcutil = client.agent(rpcutilDDL);
  const rec = record(nc, "muster.>");
  await nc.flush();
  await assert.rejects(rpcutil.call("get_fact", { fact: "bad fact!" }, { nodes: [ids[0]!] }), (e: unknown) => e instanceof RpcError && e.status === Status.InvalidData);
  await assert.rejects(rpcutil.call("get_fact", {} as { fact: string }, { nodes: [ids[0]!] }), (e: unknown) => e instanceof RpcError && e.status === Status.MissingData);
  await nc.flush();
  assert.equal(rec.messages.length, 0, "a request went out although its input was invalid");
  rec.stop();
  const r = await rpcutil.call("get_fact", { fact: "os.family" }, { nodes: [ids[0]!] });
  assert.equal(r.replies[0]?.data.value, "Debian");
});

test("the collector ignores garbage, strangers and duplicates on its inbox", async () => {
  const col = collectReplies(nc, { requestId: "r1", expect: new Set(["a", "b"]), timeoutMs: 10_000 });
  const reply = (sender: string, requestid = "r1") => encodeReply({ protocol: REPLY_PROTOCOL, requestid, sender, agent: "x", action: "y", time: 0, statuscode: 0, statusmsg: "OK", data: { sender } });
  nc.publish(col.inbox, new TextEncoder().encode("garbage"));
  nc.publish(col.inbox, new Uint8Array([0xff, 0xfe]));
  nc.publish(col.inbox, reply("a", "some-other-request"));
  nc.publish(col.inbox, reply("mallory"));
  nc.publish(col.inbox, reply("a"));
  nc.publish(col.inbox, encodeReply({ protocol: REPLY_PROTOCOL, requestid: "r1", sender: "a", agent: "x", action: "y", time: 0, statuscode: 5, statusmsg: "dup", data: {} }));
  nc.publish(col.inbox, reply("b"));
  col.start();
  const replies = await col.done;
  assert.deepEqual(replies.map((r) => [r.sender, r.statuscode]), [["a", 0], ["b", 0]]);
  assert.equal(col.ignored, 4);
});

test("with a check: a node's later answer is judged once (a forgery after the real one is still reported), a flood of copies no more", async () => {
  const judged: string[] = [];
  // the check keeps what says it is OK and drops the rest, as a signature check keeps or drops
  const col = collectReplies(nc, { requestId: "r2", expect: new Set(["a", "b"]), timeoutMs: 10_000, check: (_raw, r, done) => (judged.push(`${r.sender}:${r.statusmsg}`), done(r.statusmsg === "OK")) });
  const reply = (sender: string, statusmsg: string) => encodeReply({ protocol: REPLY_PROTOCOL, requestid: "r2", sender, agent: "x", action: "y", time: 0, statuscode: 0, statusmsg, data: {} });
  nc.publish(col.inbox, reply("a", "OK"));
  await nc.flush();
  for (let i = 0; i < 50; i++) nc.publish(col.inbox, reply("a", "forged"));
  await nc.flush();
  nc.publish(col.inbox, reply("b", "OK"));
  col.start();
  const replies = await col.done;
  assert.deepEqual(replies.map((r) => [r.sender, r.statusmsg]), [["a", "OK"], ["b", "OK"]]);
  assert.deepEqual(judged, ["a:OK", "a:forged", "b:OK"], "the real answer, one of the fifty forgeries after it, and b's");
});

test("a client built on a caller's connection leaves it open on close", async () => {
  const c = await MusterClient.connect({ nc });
  await c.close();
  assert.equal(nc.isClosed(), false);
  await assert.rejects(MusterClient.connect({ nc, collective: "bad.collective" }), /invalid collective/);
});

test("connecting to a broker that is not there fails fast with where it tried", async () => {
  const dead = await startBroker({ start: false });
  await assert.rejects(MusterClient.connect({ brokers: [dead.url] }), (e: unknown) => e instanceof MusterError && e.code === "MUSTER_BROKER_UNREACHABLE" && e.message.includes(dead.url));
  await dead.dispose();
});
