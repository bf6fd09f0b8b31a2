import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { bucketsOn, type Bucket } from "../../src/broker/bucket.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { connectNats, eventually } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";

// broker/bucket.ts against a real nats-server: what reads a bucket leaves no consumer behind. The
// library's ordered consumers outlive their readers by five minutes; a daemon that lists and watches
// often (the provisioner, every client's key directory) would pile them up on the broker.

let nats: NatsHandle;
let nc: NatsConnection;
let bucket: Bucket;
let empty: Bucket;

before(async () => {
  nats = await startNats({});
  nc = await connectNats(nats.url);
  const b = bucketsOn(nc);
  bucket = await b.bucket("reads", { create: { history: 5 } });
  empty = await b.bucket("reads_empty", { create: { history: 1 } });
  for (let i = 0; i < 50; i++) await bucket.put(`k${i}`, `v${i}`);
  await bucket.put("k1", "again");
  await bucket.delete("k2");
});

after(async () => {
  await nc?.drain();
  await nats?.stop();
});

const consumers = async (name: string) => (await (await jetstreamManager(nc)).streams.info(`KV_${name}`)).state.consumer_count;
const noneLeft = (name: string) => eventually(async () => ((await consumers(name)) === 0 ? true : undefined), 5000, `no consumer left on KV_${name}`);

test("keys lists each live key once (deleted ones not), and leaves no consumer; an empty bucket has none", async () => {
  const keys = await bucket.keys();
  assert.equal(keys.length, 49);
  assert.ok(keys.includes("k1") && !keys.includes("k2"));
  await noneLeft("reads");
  assert.deepEqual(await empty.keys(), []);
  await noneLeft("reads_empty");
});

test("values and history read what is there and leave no consumer", async () => {
  const v = await bucket.values();
  assert.equal(v.entries.length, 49);
  assert.equal(new TextDecoder().decode(v.entries.find((e) => e.key === "k1")!.value), "again");
  const h = await bucket.history("k1");
  assert.deepEqual(h.map((e) => new TextDecoder().decode(e.value)), ["v1", "again"]);
  await noneLeft("reads");
});

test("a watch, stopped, or left by its reader, takes its consumer with it", async () => {
  const w = await bucket.watch();
  assert.equal(await consumers("reads"), 1);
  w.stop();
  await noneLeft("reads");
  const w2 = await bucket.watch({ updatesOnly: true });
  const seen = (async () => {
    for await (const c of w2) if (c.kind === "entry") return c.entry.key; // the reader leaves the loop
    return undefined;
  })();
  await bucket.put("k3", "changed");
  assert.equal(await seen, "k3");
  await noneLeft("reads");
});

test("a bucket created with leaderReads asks the stream's leader for a key ($JS.API.STREAM.MSG.GET), never a replica's direct get; one without may ask any copy; the provisioning state's is the first", async () => {
  const watcher = await connectNats(nats.url);
  try {
    const asked: string[] = [];
    watcher.subscribe("$JS.API.STREAM.MSG.GET.>", { callback: (_e, m) => void asked.push(`leader ${m.subject.split(".").at(-1)}`) });
    watcher.subscribe("$JS.API.DIRECT.GET.>", { callback: (_e, m) => void asked.push(`direct ${m.subject.split(".")[4]}`) });
    await watcher.flush();
    const b = bucketsOn(nc);
    const leader = await b.bucket("reads_leader", { create: { history: 1, leaderReads: ProvisionState.bucketOptions.leaderReads } });
    const any = await b.bucket("reads_any", { create: { history: 1 } });
    await leader.put("k", "v");
    await any.put("k", "v");
    assert.equal(new TextDecoder().decode((await leader.get("k"))!.value), "v");
    assert.equal(new TextDecoder().decode((await any.get("k"))!.value), "v");
    await watcher.flush();
    await nc.flush();
    await eventually(async () => (asked.length >= 2 ? true : undefined), 5000, "both reads seen");
    assert.deepEqual(asked.sort(), ["direct KV_reads_any", "leader KV_reads_leader"]);
  } finally {
    await watcher.close();
  }
});

test("JetStream's 'temporarily unavailable' (its meta group without a leader) is asked again, as a timeout is; a refusal is not", async () => {
  const { isTransient, openTimedOut, retryTransient } = await import("../../src/broker/bucket.js");
  const unavailable = new Error("JetStream system temporarily unavailable");
  assert.equal(isTransient(unavailable), true);
  assert.equal(openTimedOut(unavailable), true);
  assert.equal(openTimedOut(new Error("permissions violation for publish")), false);
  let tries = 0;
  const got = await retryTransient(async () => {
    if (++tries < 3) throw unavailable;
    return "opened";
  }, 10_000, openTimedOut);
  assert.deepEqual([got, tries], ["opened", 3]);
});
