import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import { MusterClient } from "../../src/client/client.js";
import { startEmulator, type RunningEmulator } from "../../src/emulator/emulator.js";
import { generateFleet } from "../../src/emulator/fleet.js";
import { silentLogger } from "../../src/log.js";
import { DEFAULT_NODE_KEYS_BUCKET } from "../../src/protocol/buckets.js";
import { decodeRequest, encodeReply } from "../../src/protocol/envelope.js";
import { encodeNodeEvent } from "../../src/protocol/events.js";
import { encodeNodeKeyEntry, nodeKeyName } from "../../src/protocol/node-keys.js";
import { generateSigningKey, signMessage, type SigningKey } from "../../src/protocol/signing.js";
import { Status } from "../../src/protocol/status.js";
import { REPLY_PROTOCOL, type Reply } from "../../src/protocol/types.js";
import { connectNats, runCli } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";

// The client verifies every reply of a call, on a real broker with JetStream: a bad signature or a
// key other than the directory's is dropped and reported; a sender the directory does not know is
// kept and flagged. Small calls verify inline; once 64 replies are awaited, one large call's or
// many small calls' together (a provisioner's), on the worker pool.

let dir: string;
let nats: NatsHandle;
let nc: NatsConnection;
let emu: RunningEmulator;
const fleet = generateFleet(80);
const ids = fleet.map((n) => n.identity).sort();
const keys = new Map(ids.map((id) => [id, generateSigningKey(id).key]));
const mallory = generateSigningKey("mallory").key;
const few = ids.slice(0, 3);

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "muster-verify-"));
  process.env.MUSTER_CONFIG_DIR = join(dir, "config");
  nats = await startNats({});
  nc = await connectNats(nats.url);
  emu = await startEmulator({ nc, nodes: fleet, collective: "muster", log: silentLogger, nodeKey: (id) => keys.get(id)! });
});

after(async () => {
  await emu?.stop();
  await nc?.drain();
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

function forged(m: Msg, sender: string, key: SigningKey, flip = false): Uint8Array {
  const req = decodeRequest(m.data);
  const r = signMessage<Reply>({ protocol: REPLY_PROTOCOL, requestid: req.id, sender, agent: req.agent, action: req.action, time: Date.now(), statuscode: Status.OK, statusmsg: "OK", data: { pong: 1 } }, key);
  if (flip) r.signature = Buffer.from(Buffer.from(r.signature, "base64").map((b, i) => (i === 7 ? b ^ 1 : b))).toString("base64");
  return encodeReply(r);
}

/** A second subscriber on `identity`'s subject answering in its name, before the real node can. */
function impostor(identity: string, answer: (m: Msg) => Uint8Array): Subscription {
  return nc.subscribe(`muster.node.${identity}`, { callback: (_e, m) => {
      if (m.reply) m.respond(answer(m));
    } });
}

async function withClient<T>(fn: (c: MusterClient) => Promise<T>): Promise<T> {
  const c = await MusterClient.connect({ brokers: [nats.url], collective: "muster" });
  try {
    return await fn(c);
  } finally {
    await c.close();
  }
}

test("without a key directory every signed reply is kept and listed as unverified; a flipped signature is dropped", async () => {
  for (const nodes of [few, ids]) {
    const sub = impostor("ghost.example.net", (m) => forged(m, "ghost.example.net", mallory, true));
    await nc.flush();
    const res = await withClient((c) => c.call("rpcutil", "ping", {}, { nodes: [...nodes, "ghost.example.net"], timeoutMs: 10_000 }));
    sub.unsubscribe();
    assert.equal(res.stats.ok, nodes.length);
    assert.deepEqual(res.unverified, [...nodes].sort());
    assert.equal(res.stats.verified, 0);
    assert.deepEqual(res.rejected, [{ sender: "ghost.example.net", reason: "its signature does not verify" }]);
    assert.deepEqual(res.stats.noResponse, ["ghost.example.net"]);
  }
});

test("with the directory: the pinned key's replies are verified; another key's answer is dropped and the real node's still counts", async () => {
  const c0 = await MusterClient.connect({ brokers: [nats.url], collective: "muster" });
  const kv = await c0.bucket(DEFAULT_NODE_KEYS_BUCKET, { create: { history: 1 } });
  for (const id of ids) await kv.put(nodeKeyName(id), encodeNodeKeyEntry({ identity: id, pubkey: keys.get(id)!.publicKey, source: "pinned", time: Date.now(), by: "test" }));
  await kv.put(nodeKeyName("garbage.example.net"), new TextEncoder().encode("{not json"));
  await c0.close();
  const victim = ids[1]!;
  for (const nodes of [few, ids]) {
    // the impostor answers at once, for the victim, signed by its own key: dropped; the victim's own reply arrives and counts
    const sub = impostor(victim, (m) => forged(m, victim, mallory));
    await nc.flush();
    const rejected: string[] = [];
    const res = await withClient((c) => c.call("rpcutil", "ping", {}, { nodes, timeoutMs: 10_000, onRejected: (r) => rejected.push(r.sender) }));
    sub.unsubscribe();
    assert.equal(res.stats.ok, nodes.length, "every node answered, the victim included");
    assert.equal(res.stats.verified, nodes.length);
    assert.deepEqual(res.unverified, []);
    assert.deepEqual(rejected, [victim]);
    assert.equal(res.rejected.length, 1);
    assert.match(res.rejected[0]!.reason, new RegExp(`signed by ${mallory.publicKey.replace(/[+/]/g, "\\$&")}, not by .* the key the directory names for ${victim}`));
  }
});

test("the CLI marks unverified replies, says so in the summary and in --json, and reports a dropped one on stderr", async () => {
  const env = { ...process.env, MUSTER_BROKER: nats.url, MUSTER_CONFIG_DIR: join(dir, "config") };
  const unknown = "unknown.example.net";
  const victim = ids[2]!;
  const sub = impostor(unknown, (m) => forged(m, unknown, mallory));
  const sub2 = impostor(victim, (m) => forged(m, victim, mallory));
  await nc.flush();
  try {
    const nodesFile = join(dir, "nodes.txt");
    writeFileSync(nodesFile, `${ids[0]}\n${unknown}\n${victim}\n`);
    const human = await runCli(["rpc", "rpcutil", "ping", "--nodes", nodesFile], { env });
    assert.equal(human.code, 0, human.stderr);
    assert.match(human.stdout, new RegExp(`^${unknown} \\(unverified\\)$`, "m"));
    assert.match(human.stdout, new RegExp(`^${ids[0]}$`, "m"));
    assert.match(human.stdout, /Unverified: 1 of 3 replies \(unverified\): no known key for their sender; 1 dropped: bad signature or wrong key/);
    assert.match(human.stderr, new RegExp(`muster: dropped a reply claiming to be from ${victim}: it is signed by`));
    writeFileSync(nodesFile, `${ids[0]}\n${unknown}\n`);
    const json = await runCli(["rpc", "rpcutil", "ping", "--nodes", nodesFile, "--json"], { env });
    const out = JSON.parse(json.stdout) as { replies: { sender: string; verified: boolean }[]; stats: { verified: number; unverified: number } };
    assert.deepEqual(Object.fromEntries(out.replies.map((r) => [r.sender, r.verified])), { [ids[0]!]: true, [unknown]: false });
    assert.equal(out.stats.unverified, 1);
  } finally {
    sub.unsubscribe();
    sub2.unsubscribe();
  }
});

test("events are checked as replies are: the directory's key is verified, a stranger's kept unverified, a forgery dropped; order kept", async () => {
  const c0 = await MusterClient.connect({ brokers: [nats.url], collective: "muster" });
  const kv = await c0.bucket(DEFAULT_NODE_KEYS_BUCKET, { create: { history: 1 } });
  const [a, b] = [ids[0]!, ids[1]!];
  for (const id of [a, b]) await kv.put(nodeKeyName(id), encodeNodeKeyEntry({ identity: id, pubkey: keys.get(id)!.publicKey, source: "certified", time: Date.now(), by: "test" }));
  await c0.close();
  const event = (identity: string, n: number, key?: SigningKey, flip = false) => {
    const e = { identity, agent: "puppet", event: "run_complete", time: Date.now(), data: { n } };
    if (!key) return encodeNodeEvent(e);
    const s = signMessage(e, key);
    if (flip) s.signature = Buffer.from(Buffer.from(s.signature, "base64").map((x, i) => (i === 3 ? x ^ 1 : x))).toString("base64");
    return encodeNodeEvent(s);
  };
  await withClient(async (c) => {
    const seen: Array<[string, number, boolean]> = [];
    const invalid: string[] = [];
    let all!: () => void;
    const six = new Promise<void>((r) => (all = r));
    const count = () => seen.length + invalid.length === 6 && all();
    const sub = c.onEvent(
      "puppet",
      "run_complete",
      (e, t) => (seen.push([e.identity, e.data.n as number, t.verified]), count()),
      { onInvalid: (r) => (invalid.push(r), count()) },
    );
    await sub.ready;
    // published at once after subscribing: the directory may still be loading, and order must hold
    nc.publish("muster.event.puppet.run_complete", event(a, 1, keys.get(a)));
    nc.publish("muster.event.puppet.run_complete", event(a, 2, mallory)); // another key than the directory's
    nc.publish("muster.event.puppet.run_complete", event(a, 3, keys.get(a), true)); // flipped signature
    nc.publish("muster.event.puppet.run_complete", event(b, 4)); // unsigned, for a node the directory knows
    nc.publish("muster.event.puppet.run_complete", event("stranger.example.net", 5, mallory)); // unknown to the directory
    nc.publish("muster.event.puppet.run_complete", event(b, 6, keys.get(b)));
    await six;
    sub.unsubscribe();
    assert.deepEqual(seen, [
      [a, 1, true],
      ["stranger.example.net", 5, false],
      [b, 6, true],
    ]);
    assert.equal(invalid.length, 3);
    assert.match(invalid[0]!, new RegExp(`claiming to be from ${a.replace(/\./g, "\\.")}: it is signed by .*, not by`));
    assert.match(invalid[1]!, /its signature does not verify/);
    assert.match(invalid[2]!, /it is unsigned, and the key directory names/);
    assert.equal(sub.invalid, 3);
  });
  // verify: false (display-only uses) passes everything, unverified
  await withClient(async (c) => {
    let got!: (verified: boolean) => void;
    const one = new Promise<boolean>((r) => (got = r));
    const sub = c.onEvent("puppet", "run_complete", (_e, t) => got(t.verified), { verify: false });
    await sub.ready;
    nc.publish("muster.event.puppet.run_complete", event(a, 7, mallory));
    assert.equal(await one, false);
    sub.unsubscribe();
  });
});

test("many single-node calls at once verify on the worker pool as one large call does, each reply once", async () => {
  await withClient(async (c) => {
    // three small calls alone: inline, no pool
    for (const n of few) assert.equal((await c.call("rpcutil", "ping", {}, { nodes: [n], timeoutMs: 3000 })).stats.responded, 1);
    assert.deepEqual(c.verifiedWhere, { inline: 3, workers: 0, threads: 0 });
    // every node at once, one call each (a provisioner at concurrency 80): the pool starts; replies
    // that arrive before its threads are up are checked inline. The pool's verdicts are inline's,
    // forgeries included (verify-pool.test.ts).
    const wave = async () => {
      const results = await Promise.all(ids.map((n) => c.call("rpcutil", "ping", {}, { nodes: [n], timeoutMs: 3000 })));
      assert.deepEqual(results.map((r) => r.replies.map((x) => x.sender)), ids.map((n) => [n]), "every node answered its own call, and was kept");
    };
    await wave();
    // the threads announce themselves to the pool, not to the client: polled, with a deadline
    for (const until = Date.now() + 10_000; c.verifiedWhere.threads === 0; await new Promise((r) => setTimeout(r, 20))) if (Date.now() > until) assert.fail(`the pool never started: ${JSON.stringify(c.verifiedWhere)}`);
    await wave();
    const where = c.verifiedWhere;
    assert.equal(where.inline + where.workers, few.length + 2 * ids.length, JSON.stringify(where));
    assert.ok(where.workers > 0, `the pool verified the second wave's replies: ${JSON.stringify(where)}`);
  });
});
