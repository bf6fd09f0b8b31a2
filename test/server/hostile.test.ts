import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { MusterClient } from "../../src/client/client.js";
import { buildRequest, targetHeaders } from "../../src/client/request.js";
import { BROADCAST_TARGET, targetTree } from "../../src/protocol/targets.js";
import { decodeReply } from "../../src/protocol/envelope.js";
import { generateSigningKey, signRequest, verifyMessage } from "../../src/protocol/signing.js";
import { Status } from "../../src/protocol/status.js";
import { emptyFilter, type Reply, type Request } from "../../src/protocol/types.js";
import { loadOrCreateSigningKey } from "../../src/security/keys.js";
import { cleanEnv, connectNats, eventually, startBroker, startMusterServer, tempDir, type Broker, type TestServer } from "../support/collective.js";

// THE HOSTILE INPUT TEST. Thousands of garbled, mistyped, oversized, unsigned, forged, stale,
// replayed and nonsensical messages on a running server's direct and broadcast subjects. The server
// must keep answering, count every one of them in the right daemon_stats counter, and answer the
// direct ones that carry a reply subject with the right status code.

const tmp = tempDir("hostile");
process.env.MUSTER_CONFIG_DIR = join(tmp.path, "config");
const env = cleanEnv(process.env.MUSTER_CONFIG_DIR);

const ID = "target.example.net";
const DIRECT = `muster.node.${ID}`;
const BCAST = "muster.broadcast.agent.rpcutil";
const BCAST_DISCOVERY = "muster.broadcast.agent.discovery";
const MAX_BYTES = 64 * 1024;
const SKEW = 5;

let broker: Broker;
let server: TestServer;
let nc: NatsConnection;
let client: MusterClient;
const trusted = loadOrCreateSigningKey();
const stranger = generateSigningKey("user=mallory").key;

before(async () => {
  broker = await startBroker(); // max_payload 4MB, above max_message_bytes, so oversized messages reach the server
  server = await startMusterServer(
    { identity: ID, broker: broker.url, facts: { country: "de" }, classes: ["web"], config: { max_message_bytes: MAX_BYTES, security: { max_clock_skew: SKEW } } },
    { dir: tmp.path, env },
  );
  nc = await connectNats(broker.url);
  client = await MusterClient.connect({ nc, key: trusted });
});

after(async () => {
  await server?.stop();
  await client?.close();
  await nc?.drain().catch(() => undefined);
  await broker?.dispose();
  tmp.remove();
});

const enc = new TextEncoder();
const json = (v: unknown) => enc.encode(JSON.stringify(v));

// Requests are signed for their target (protocol/targets.ts): `to` says whether the kinds below
// make their messages for the direct subject (signed for ID, sent with its headers) or broadcast.
let to: "direct" | "broadcast" = "broadcast";
const directTree = targetTree([ID]);
const directHeaders = () => targetHeaders(ID, directTree.proof(ID));
function forDirect<T>(make: () => T): T {
  to = "direct";
  try {
    return make();
  } finally {
    to = "broadcast";
  }
}

function signed(over: Partial<Request> = {}, key = trusted): Request {
  const base = buildRequest({ key, collective: "muster", agent: "rpcutil", action: "ping", data: {}, filter: emptyFilter(), ttl: 30, target: to === "direct" ? directTree.target : BROADCAST_TARGET });
  const { signature: _s, ...rest } = { ...base, ...over };
  return signRequest(rest, key);
}

type Counter = "total" | "validated" | "unvalidated" | "badsig" | "ttlexpired" | "replayed" | "badtarget" | "badfilter" | "filtered" | "passed" | "replies" | "unknown_agent" | "unknown_action" | "invalid_input" | "aborted" | "errors";
type Delta = Partial<Record<Counter, number>>;

interface Kind {
  name: string;
  make(i: number): Uint8Array;
  /** What one such message adds to daemon_stats, on the direct subject and on a broadcast subject. */
  direct: Delta;
  broadcast: Delta;
  /** The reply a direct message with a reply subject gets. */
  status: number;
  reason: RegExp;
}

/** Counted before the pipeline looks at the reply subject. */
const intakeCounters: Counter[] = ["total", "validated", "unvalidated", "badsig", "ttlexpired", "badfilter"];
const garbage: Delta = { total: 1, unvalidated: 1 };
const forged: Delta = { total: 1, badsig: 1 };
const stale: Delta = { total: 1, ttlexpired: 1 };

const wrongTypes: Record<string, unknown>[] = [
  { ttl: "30" },
  { time: "yesterday" },
  { data: [1, 2] },
  { data: "x" },
  { filter: "country=de" },
  { id: 42 },
  { caller: null },
  { agent: ["rpcutil"] },
  { signature: { a: 1 } },
  { ttl: -5 },
  { ttl: 1e9 },
  { protocol: "mcollective/2" },
  { id: "x".repeat(1000) },
];

const kinds: Kind[] = [
  { name: "random bytes", make: () => randomBytes(1 + Math.floor(Math.random() * 512)), direct: garbage, broadcast: garbage, status: Status.InvalidData, reason: /invalid envelope|not/ },
  { name: "invalid UTF-8", make: (i) => new Uint8Array([0x7b, 0x22, 0xc3, 0x28, 0xff, 0xfe, i & 0xff, 0x7d]), direct: garbage, broadcast: garbage, status: Status.InvalidData, reason: /not UTF-8/ },
  { name: "JSON that is not an object", make: (i) => enc.encode(["null", "[]", "42", '"ping"', "true", "[{}]"][i % 6]!), direct: garbage, broadcast: garbage, status: Status.InvalidData, reason: /not a JSON object/ },
  { name: "truncated JSON", make: () => json(signed()).slice(0, 100), direct: garbage, broadcast: garbage, status: Status.InvalidData, reason: /not JSON/ },
  { name: "wrong field types", make: (i) => json({ ...signed(), ...wrongTypes[i % wrongTypes.length] }), direct: garbage, broadcast: garbage, status: Status.InvalidData, reason: /invalid envelope/ },
  { name: "oversized", make: () => json(signed({ data: { fact: "x".repeat(MAX_BYTES) } })), direct: garbage, broadcast: garbage, status: Status.InvalidData, reason: /exceeds the limit/ },
  { name: "deeply nested", make: () => enc.encode(`{"protocol":"muster/request/1","data":${"[".repeat(20_000)}${"]".repeat(20_000)}}`), direct: garbage, broadcast: garbage, status: Status.InvalidData, reason: /invalid envelope/ },
  { name: "bad signature", make: (i) => json({ ...signed({ agent: i % 2 ? "rpcutil" : "discovery" }), data: { tampered: i } }), direct: forged, broadcast: forged, status: Status.Aborted, reason: /signature does not verify/ },
  { name: "garbage signature", make: () => json({ ...signed(), signature: "!!!!" }), direct: forged, broadcast: forged, status: Status.Aborted, reason: /signature does not verify/ },
  { name: "untrusted key", make: () => json(signed({}, stranger)), direct: forged, broadcast: forged, status: Status.Aborted, reason: /not trusted/ },
  { name: "trusted key under another caller name", make: () => json(signed({ caller: `${trusted.name}-impostor` })), direct: forged, broadcast: forged, status: Status.Aborted, reason: /not trusted/ },
  { name: "expired", make: () => json(signed({ time: Date.now() - (30 + SKEW + 60) * 1000 })), direct: stale, broadcast: stale, status: Status.Aborted, reason: /expired/ },
  { name: "from the future", make: () => json(signed({ time: Date.now() + (SKEW + 60) * 1000 })), direct: stale, broadcast: stale, status: Status.Aborted, reason: /future/ },
  {
    name: "unknown agent",
    make: () => json(signed({ agent: "nosuchagent" })),
    direct: { total: 1, validated: 1, unknown_agent: 1, replies: 1 },
    broadcast: { total: 1, validated: 1 }, // on the rpcutil subject but naming another agent: dropped
    status: Status.UnknownAction,
    reason: /not available/,
  },
  {
    name: "wrong collective",
    make: () => json(signed({ collective: "elsewhere" })),
    direct: { total: 1, validated: 1 },
    broadcast: { total: 1, validated: 1 },
    status: Status.InvalidData,
    reason: /collective 'elsewhere'/,
  },
  {
    name: "unknown action",
    make: () => json(signed({ action: "rm_rf" })),
    direct: { total: 1, validated: 1, passed: 1, unknown_action: 1, replies: 1 },
    broadcast: { total: 1, validated: 1, passed: 1, unknown_action: 1, replies: 1 },
    status: Status.UnknownAction,
    reason: /unknown action/,
  },
  {
    name: "invalid input",
    make: (i) => json(signed({ action: "get_fact", data: { fact: i % 2 ? 42 : "$(reboot)" } })),
    direct: { total: 1, validated: 1, passed: 1, invalid_input: 1, replies: 1 },
    broadcast: { total: 1, validated: 1, passed: 1, invalid_input: 1, replies: 1 },
    status: Status.InvalidData,
    reason: /fact/,
  },
  {
    name: "missing input",
    make: () => json(signed({ action: "get_fact", data: {} })),
    direct: { total: 1, validated: 1, passed: 1, invalid_input: 1, replies: 1 },
    broadcast: { total: 1, validated: 1, passed: 1, invalid_input: 1, replies: 1 },
    status: Status.MissingData,
    reason: /fact/,
  },
  {
    name: "invalid filter",
    make: (i) =>
      json(
        signed({
          filter: [
            { ...emptyFilter(), compound: ["country=de and ("] },
            { ...emptyFilter(), fact: [{ fact: "x", operator: "<>", value: "1" }] },
            { ...emptyFilter(), class: [42] },
            { ...emptyFilter(), identity: ["/[/"] },
            { ...emptyFilter(), bogus: ["x"] },
          ][i % 5] as unknown as Request["filter"],
        }),
      ),
    direct: { total: 1, validated: 1, badfilter: 1 },
    broadcast: { total: 1, validated: 1, badfilter: 1 },
    status: Status.InvalidData,
    reason: /invalid filter/,
  },
];

async function daemonStats(): Promise<Record<Counter, number>> {
  const r = await client.call("rpcutil", "daemon_stats", {}, { nodes: [ID], timeoutMs: 10_000 });
  assert.equal(r.replies[0]?.statuscode, Status.OK, "the server stopped answering daemon_stats");
  return r.replies[0]!.data as Record<Counter, number>;
}

function add(into: Delta, d: Delta, times = 1): void {
  for (const [k, v] of Object.entries(d) as [Counter, number][]) into[k] = (into[k] ?? 0) + v * times;
}

test("thousands of hostile messages: the server survives, counts each in the right place and answers direct ones with the right status", async () => {
  const before = await daemonStats();
  // `before` was taken inside its own handler: its request is already counted there, its reply is not
  const expected: Delta = { replies: 1 };
  const PER_KIND = 120;
  const inbox = `_INBOX.hostile.${Date.now()}`;

  // 1. the barrage: every kind on the direct subject and on both broadcast subjects, half with a reply subject
  let sent = 0;
  for (const kind of kinds) {
    const many = kind.name === "oversized" || kind.name === "deeply nested" ? 10 : PER_KIND;
    for (let i = 0; i < many; i++) {
      const reply = i % 2 ? inbox : undefined;
      nc.publish(DIRECT, forDirect(() => kind.make(i)), { reply, headers: directHeaders() });
      nc.publish(i % 3 ? BCAST : BCAST_DISCOVERY, kind.make(i), { reply });
      sent += 2;
      // Direct messages without a reply subject are refused or dropped before any agent runs: they
      // are counted, but nothing is dispatched and no reply counted.
      add(expected, reply ? kind.direct : pick(kind.direct, intakeCounters));
      const onDiscovery = !(i % 3);
      const b = onDiscovery && kind.broadcast.validated ? { total: 1, validated: 1 } : kind.broadcast; // a discovery-subject message naming rpcutil: agent mismatch, dropped
      add(expected, reply ? b : pick(b, intakeCounters));
    }
  }
  // a broadcast subject no agent of this node listens on: never reaches the server
  for (let i = 0; i < 200; i++) nc.publish("muster.broadcast.agent.nosuchagent", json(signed({ agent: "nosuchagent" })), { reply: inbox });

  // 2. replays: one good request, then the same bytes again and again
  const original = forDirect(() => json(signed({ id: `replay${Date.now()}` })));
  nc.publish(DIRECT, original, { reply: inbox, headers: directHeaders() });
  add(expected, { total: 1, validated: 1, passed: 1, replies: 1 });
  const REPLAYS = 300;
  for (let i = 0; i < REPLAYS; i++) nc.publish(DIRECT, original, { reply: i % 2 ? inbox : undefined, headers: directHeaders() });
  add(expected, { total: 1, replayed: 1 }, REPLAYS);
  sent += 1 + REPLAYS;
  await nc.flush();
  assert.ok(sent > 4000, `only ${sent} hostile messages`);

  // 3. a sample of each kind on the direct subject with its own reply subject: the right status code.
  // The server works through the barrage first, in order (each message decoded, its signature
  // checked): on a loaded machine that took longer than 10 s (run 23), so the deadline is a
  // hang-catcher's
  for (const kind of kinds) {
    for (let i = 0; i < 3; i++) {
      const m = await nc.request(DIRECT, forDirect(() => kind.make(i + 1)), { timeout: 120_000, headers: directHeaders() });
      const reply: Reply = decodeReply(m.data);
      assert.equal(reply.statuscode, kind.status, `${kind.name}: ${reply.statusmsg}`);
      assert.match(reply.statusmsg, kind.reason, kind.name);
      assert.equal(reply.sender, ID);
      assert.ok(verifyMessage(reply), `${kind.name}: the refusal is signed by the node`);
      add(expected, kind.direct);
    }
  }
  const replayReply = decodeReply((await nc.request(DIRECT, original, { timeout: 10_000, headers: directHeaders() })).data);
  assert.equal(replayReply.statuscode, Status.Aborted);
  assert.match(replayReply.statusmsg, /replay/);
  add(expected, { total: 1, replayed: 1 });

  // 4. still alive and answering
  const ping = await client.call("rpcutil", "ping", {}, { nodes: [ID], timeoutMs: 10_000 });
  assert.equal(ping.replies[0]?.statuscode, Status.OK);
  add(expected, { total: 1, validated: 1, passed: 1, replies: 1 });
  assert.deepEqual(await client.discover({ timeoutMs: 5000 }), [ID]);
  add(expected, { total: 1, validated: 1, passed: 1, replies: 1 });
  assert.equal(server.child.exitCode, null);

  // 5. exact counts: this call's own request is counted in total/validated/passed but not yet in replies
  add(expected, { total: 1, validated: 1, passed: 1 });
  const counters: Counter[] = ["total", "validated", "unvalidated", "badsig", "ttlexpired", "replayed", "badfilter", "filtered", "passed", "replies", "unknown_agent", "unknown_action", "invalid_input", "aborted", "errors"];
  const want = Object.fromEntries(counters.map((c) => [c, expected[c] ?? 0]));
  const got = await eventually(
    async () => {
      const now = await daemonStats();
      const delta = Object.fromEntries(counters.map((c) => [c, now[c] - before[c]]));
      // every later daemon_stats call adds one more of each: compare without those
      const extra = delta.total! - want.total!;
      if (extra < 0) return undefined;
      for (const c of ["total", "validated", "passed"] as const) delta[c]! -= extra;
      delta.replies! -= extra;
      return delta;
    },
    10_000,
    "daemon_stats catching up",
  );
  assert.deepEqual(got, want);
  assert.doesNotMatch(server.stderr(), /unhandled|uncaught|RangeError|TypeError/i);
});

test("a request captured on one node's direct subject cannot be replayed on a broadcast subject", async () => {
  const req = forDirect(() => signed({ id: `cross${Date.now()}` }));
  const first = decodeReply((await nc.request(DIRECT, json(req), { timeout: 5000, headers: directHeaders() })).data);
  assert.equal(first.statuscode, Status.OK);
  // the same bytes on broadcast would run on every node whose filter matches (the direct call's filter is empty)
  const replies: Reply[] = [];
  const inbox = `_INBOX.cross.${Date.now()}`;
  const sub = nc.subscribe(inbox, {
    callback: (_e, m) => {
      replies.push(decodeReply(m.data));
    },
  });
  const before = await daemonStats();
  nc.publish(BCAST, json(req), { reply: inbox });
  const after = await daemonStats();
  sub.unsubscribe();
  // refused twice over: its signed target is this node, and its id was seen directly
  assert.equal(after.badtarget - before.badtarget, 1, "the replay on broadcast was not refused");
  assert.deepEqual(replies, []);
});

function pick(d: Delta, keys: Counter[]): Delta {
  const out: Delta = {};
  for (const k of keys) if (d[k] !== undefined) out[k] = d[k];
  return out;
}
