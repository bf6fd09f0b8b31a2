import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { ServiceBeacon } from "../src/beacon.js";
import { bucketsOn, type Bucket } from "../src/broker/bucket.js";
import { ServiceStore } from "../src/health/stores.js";
import { silentLogger } from "../src/log.js";
import { DEFAULT_SERVICES_BUCKET } from "../src/protocol/buckets.js";
import { parseServiceBeat, serviceKey, type LostStretch } from "../src/protocol/service.js";
import { startNats, type NatsHandle } from "./support/index.js";
import { connectNats, eventually } from "./support/collective.js";

// A service's beacon (src/beacon.ts) into a real services bucket: one beat at start, then one an
// interval later, or at once when asked (the console's stretch of refused writes just closed, which
// `muster health` reads from that beat).

let nats: NatsHandle;
let nc: NatsConnection;
let bucket: Bucket;

before(async () => {
  nats = await startNats({ jetstream: true });
  nc = await connectNats(nats.url);
  await ServiceStore.open(bucketsOn(nc), { create: true });
  bucket = await bucketsOn(nc).bucket(DEFAULT_SERVICES_BUCKET);
});

after(async () => {
  await nc?.drain().catch(() => undefined);
  await nats?.stop();
});

const key = serviceKey("console", "console.test");
const stored = async () => {
  const e = await bucket.get(key);
  if (!e) return undefined;
  const r = parseServiceBeat(e.value, key);
  assert.ok(r.ok, "the beat parses");
  return { revision: e.revision, lost: r.beat.lost ?? [] };
};

test("beatNow writes the beat at once, not an interval later, and beats asked for while one is in flight come after it", async () => {
  let lost: LostStretch[] = [];
  let calls = 0;
  let hold: Promise<void> | undefined;
  const beacon = new ServiceBeacon(bucketsOn(nc), {
    role: "console",
    name: "console.test",
    version: "1",
    intervalS: 3600, // the next beat by the clock is an hour away
    status: async () => {
      calls++;
      await hold;
      return { checks: [], lost };
    },
    log: silentLogger,
  });
  beacon.beatNow(); // not started: nothing
  assert.equal(calls, 0);
  beacon.start();
  try {
    const first = await eventually(stored, 10_000, "the first beat");
    assert.deepEqual(first.lost, []);
    lost = [{ from: Date.now() - 5000, to: Date.now(), why: "refused" }];
    beacon.beatNow();
    const second = await eventually(async () => {
      const s = await stored();
      return s && s.revision > first.revision ? s : undefined;
    }, 10_000, "a beat at once carrying the closed stretch");
    assert.deepEqual(second.lost, lost);
    // three asks while one beat is in flight: one more beat after it, not three, not none
    let release!: () => void;
    hold = new Promise((r) => (release = r));
    beacon.beatNow();
    const callsBefore = calls;
    beacon.beatNow();
    beacon.beatNow();
    beacon.beatNow();
    assert.equal(calls, callsBefore, "no second beat while one is in flight");
    release();
    hold = undefined;
    const third = await eventually(async () => {
      const s = await stored();
      return s && s.revision >= second.revision + 2 ? s : undefined;
    }, 10_000, "the held beat and the one after it");
    assert.equal(calls, callsBefore + 1);
    assert.equal(third.revision, second.revision + 2);
  } finally {
    await beacon.stop();
  }
});
