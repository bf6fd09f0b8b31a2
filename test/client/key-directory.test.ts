import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { bucketsOn, type Bucket, type BucketWatch } from "../../src/broker/bucket.js";
import { Verification } from "../../src/client/client.js";
import { KeyDirectory, readKeyDirectory } from "../../src/client/key-directory.js";
import { encodeNodeKeyEntry, nodeKeyName } from "../../src/protocol/node-keys.js";
import { generateSigningKey } from "../../src/protocol/signing.js";
import { connectNats, eventually } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";

// The client's node-key directory read (client/key-directory.ts) against a real nats-server: a read
// within its limit follows the bucket; one that outlives it leaves no watch (consumer) behind.

let nats: NatsHandle;
let nc: NatsConnection;
let bucket: Bucket;
const NAME = "muster_node_keys_test";

before(async () => {
  nats = await startNats({});
  nc = await connectNats(nats.url);
  bucket = await bucketsOn(nc).bucket(NAME, { create: { history: 1 } });
  const id = "node1.example.net";
  await bucket.put(nodeKeyName(id), encodeNodeKeyEntry({ identity: id, pubkey: generateSigningKey(id).key.publicKey, source: "pinned", time: Date.now(), by: id }));
});

after(async () => {
  await nc?.drain();
  await nats?.stop();
});

const consumers = async () => (await (await jetstreamManager(nc)).streams.info(`KV_${NAME}`)).state.consumer_count;

/** The real bucket, noting each watch it hands out and whether that watch was stopped. */
function noting(b: Bucket) {
  const watches: { stopped: boolean }[] = [];
  const wrapped: Bucket = Object.create(b) as Bucket;
  wrapped.watch = async (opts) => {
    const w: BucketWatch = await b.watch(opts);
    const note = { stopped: false };
    watches.push(note);
    const stop = w.stop.bind(w);
    w.stop = () => ((note.stopped = true), stop());
    return w;
  };
  return { wrapped, watches };
}

test("a read within its limit holds the bucket's keys and follows it; closed, its consumer goes", async () => {
  const { wrapped, watches } = noting(bucket);
  const dir = await readKeyDirectory(async () => wrapped, NAME, 5000);
  assert.equal(dir.unavailable, undefined);
  assert.equal(dir.size, 1);
  assert.ok(dir.get("node1.example.net"));
  assert.equal(await consumers(), 1, "the directory's watch");
  dir.close();
  assert.equal(watches[0]?.stopped, true);
  await eventually(async () => ((await consumers()) === 0 ? true : undefined), 15_000, "the watch's consumer removed");
});

test("a read that outlives its limit: an unavailable directory saying so, and its watch stopped when it lands", async () => {
  const { wrapped, watches } = noting(bucket);
  // the bucket opens only after the limit is past, as a broker under load answers
  const dir = await readKeyDirectory(() => new Promise((r) => setTimeout(() => r(wrapped), 200)), NAME, 20);
  assert.match(dir.unavailable ?? "", /timed out after 20 ms/);
  await eventually(async () => (watches[0]?.stopped ? true : undefined), 10_000, "the late watch stopped");
  assert.equal(watches.length, 1);
  await eventually(async () => ((await consumers()) === 0 ? true : undefined), 15_000, "no consumer left on the bucket");
});

test("no bucket, or one that cannot be read: an unavailable directory naming why", async () => {
  assert.match((await readKeyDirectory(async () => undefined, NAME, 1000)).unavailable ?? "", /no key directory \(bucket muster_node_keys_test\)/);
  assert.match((await readKeyDirectory(() => Promise.reject(new Error("permissions violation")), NAME, 1000)).unavailable ?? "", /cannot read the key directory .*permissions violation/);
});

test("a client looks for an unavailable directory again once at a time, however many replies ask meanwhile", async () => {
  let loads = 0;
  let finish: ((d: KeyDirectory) => void) | undefined;
  const v = new Verification(true, () => (loads++, new Promise<KeyDirectory>((r) => (finish = r))), 0);
  const first = v.directory();
  for (let i = 0; i < 100; i++) v.directory(); // a burst of replies before the first look ends
  assert.equal(loads, 1);
  finish!(new KeyDirectory("no key directory (bucket muster_node_keys) on this broker"));
  assert.match((await first).unavailable ?? "", /no key directory/);
  // past the retry interval (0 here): the next reply starts one new look, the burst after it none
  const during = v.directory();
  for (let i = 0; i < 100; i++) assert.equal((v.directory() as KeyDirectory).unavailable, (during as KeyDirectory).unavailable, "the directory there is, while the look runs");
  assert.equal(loads, 2);
  const { wrapped, watches } = noting(bucket);
  finish!(await readKeyDirectory(async () => wrapped, NAME, 5000));
  await eventually(async () => ((v.directory() as KeyDirectory).size === 1 ? true : undefined), 5000, "the directory found on the second look");
  assert.equal(loads, 2);
  // closed: the directory's watch goes with the client
  await v.close();
  assert.equal(watches[0]?.stopped, true);
  await eventually(async () => ((await consumers()) === 0 ? true : undefined), 15_000, "no consumer left on the bucket");
});
