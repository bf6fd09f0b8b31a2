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
// within its limits follows the bucket; one that outlives them leaves no watch (consumer) behind.
// The limit is on silence: a read whose entries keep coming is waited for (50,000 keys take seconds).

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

test("a read whose bucket opens only after its limit: an unavailable directory saying so, and no watch made then", async () => {
  const { wrapped, watches } = noting(bucket);
  let opened = false;
  // the bucket opens only after the limit is past, as a broker under load answers
  const dir = await readKeyDirectory(() => new Promise((r) => setTimeout(() => ((opened = true), r(wrapped)), 200)), NAME, 20);
  assert.match(dir.unavailable ?? "", /timed out after 20 ms/);
  await eventually(async () => (opened ? true : undefined), 10_000, "the bucket opened");
  await new Promise((r) => setImmediate(r));
  assert.equal(watches.length, 0);
  assert.equal(await consumers(), 0, "no consumer on the bucket");
});

/**
 * A second bucket of `n` keys, watched through a wrapper that delays each change by `delayMs` and
 * goes silent after `stallAfter` entries (until stopped): a broker whose answers arrive slowly.
 */
async function slowBucket(name: string, n: number, delayMs: number, stallAfter = Infinity) {
  const b = await bucketsOn(nc).bucket(name, { create: { history: 1 } });
  for (let i = 0; i < n; i++) {
    const id = `slow${i}.example.net`;
    await b.put(nodeKeyName(id), encodeNodeKeyEntry({ identity: id, pubkey: generateSigningKey(id).key.publicKey, source: "pinned", time: Date.now(), by: id }));
  }
  const note = { stopped: false, delivered: 0 };
  const wrapped: Bucket = Object.create(b) as Bucket;
  wrapped.watch = async (opts) => {
    const w = await b.watch(opts);
    let wake: (() => void) | undefined;
    return {
      stop() {
        note.stopped = true;
        w.stop();
        wake?.();
      },
      async *[Symbol.asyncIterator]() {
        for await (const c of w) {
          if (note.delivered >= stallAfter) await new Promise<void>((r) => (wake = r));
          if (note.stopped) return;
          await new Promise((r) => setTimeout(r, delayMs));
          if (c.kind === "entry") note.delivered++;
          yield c;
        }
      },
    } satisfies BucketWatch;
  };
  const streamConsumers = async () => (await (await jetstreamManager(nc)).streams.info(`KV_${name}`)).state.consumer_count;
  return { wrapped, note, streamConsumers };
}

test("a read whose entries keep arriving is not given up, however long it takes in all", async () => {
  const { wrapped, note } = await slowBucket(`${NAME}_slow`, 8, 40);
  const t0 = performance.now();
  const dir = await readKeyDirectory(async () => wrapped, "slow", 150);
  assert.equal(dir.unavailable, undefined);
  assert.equal(dir.size, 8);
  assert.ok(performance.now() - t0 > 150, "the read took longer in all than its limit on silence (else this proves nothing)");
  dir.close();
  assert.equal(note.stopped, true);
});

test("a read that goes silent half-way is given up, says how far it got, and leaves no watch behind", async () => {
  const { wrapped, note, streamConsumers } = await slowBucket(`${NAME}_stall`, 5, 5, 2);
  const dir = await readKeyDirectory(async () => wrapped, "stall", 150);
  assert.match(dir.unavailable ?? "", /^reading the key directory stall timed out after 150 ms with nothing arriving \(2 entries read in \d+ ms\)$/);
  assert.equal(note.stopped, true);
  await eventually(async () => ((await streamConsumers()) === 0 ? true : undefined), 15_000, "no consumer left on the bucket");
});

test("a read that trickles on past its limit in all is given up too", async () => {
  const { wrapped, note } = await slowBucket(`${NAME}_trickle`, 20, 50);
  const dir = await readKeyDirectory(async () => wrapped, "trickle", 200, 300);
  assert.match(dir.unavailable ?? "", /timed out after 300 ms in all \(\d+ entries read/);
  assert.equal(note.stopped, true);
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

test("before a large call: a read that was given up is tried once more, and its replies wait for that; a directory with no bucket is not read again", async () => {
  const { wrapped } = noting(bucket);
  const found = await readKeyDirectory(async () => wrapped, NAME, 5000);
  const answers = [new KeyDirectory("reading the key directory x timed out after 5000 ms with nothing arriving (0 entries read in 5001 ms)", true), found];
  let loads = 0;
  const v = new Verification(true, async () => answers[loads++]!, 60_000);
  assert.equal(((await v.directory()) as KeyDirectory).timedOut, true, "the first read, given up");
  const settled = await v.settled();
  assert.equal(loads, 2);
  assert.equal(settled, found);
  assert.equal(v.directory(), found, "kept");
  await v.close();

  let absentLoads = 0;
  const absent = new Verification(true, async () => (absentLoads++, new KeyDirectory("no key directory (bucket x) on this broker")), 60_000);
  assert.match((await absent.settled()).unavailable ?? "", /no key directory/);
  assert.equal(absentLoads, 1, "no bucket: looked for again only after its minute");
  await absent.close();
});
