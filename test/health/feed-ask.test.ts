import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { bucketsOn } from "../../src/broker/bucket.js";
import { HealthFeed } from "../../src/health/feed.js";
import type { HealthReport } from "../../src/health/model.js";
import { AliveStore, PuppetRunStore, ServiceStore } from "../../src/health/stores.js";
import { silentLogger } from "../../src/log.js";
import { encodeHeartbeat, heartbeatSubject } from "../../src/protocol/heartbeat.js";
import { startNats, type NatsHandle } from "../support/index.js";
import { connectNats, eventually } from "../support/collective.js";

// The console's live health (health/feed.ts) asks the nodes quiet past their limit before it judges
// them, through the ask it is given (the console's: rpcutil ping), against real buckets: one that
// answers is reachable, one that does not is unreachable saying so, and a node is not asked again
// every tick.

let nats: NatsHandle;
let nc: NatsConnection;

before(async () => {
  nats = await startNats({ jetstream: true });
  nc = await connectNats(nats.url);
});

after(async () => {
  await nc?.drain().catch(() => undefined);
  await nats?.stop();
});

test("the console's feed asks nodes quiet past their limit: one that answers is reachable, seen then; one that does not is unreachable saying so; the one that answers never reads unreachable, not even while asked; the one judged keeps its judgement while asked again; neither is asked at every tick", async () => {
  const buckets = bucketsOn(nc);
  const [alive, services, runs] = await Promise.all([AliveStore.open(buckets, { create: true }), ServiceStore.open(buckets, { create: true }), PuppetRunStore.open(buckets, { create: true })]);
  const asks: { at: number; ids: string[] }[] = [];
  const feed = new HealthFeed(
    { ready: true, record: () => undefined, allRecords: () => [] },
    {
      policy: { unreachableAfterS: 3 },
      registered: async () => new Set<string>(),
      observer: "console@feed-ask.test",
      connected: () => true,
      tickMs: 250,
      askLeadMs: 1000,
      askNodes: async (ids) => {
        asks.push({ at: Date.now(), ids });
        await new Promise((r) => setTimeout(r, 1000)); // a ping's round trip and its wait for the silent (a real one waits up to 4 s)
        return { answered: new Map(ids.filter((id) => id === "answers.test").map((id) => [id, Date.now()])) };
      },
    },
    silentLogger,
  );
  try {
    await feed.start({ alive: async () => alive, services: async () => services, puppetRuns: async () => runs });
    const js = jetstream(nc);
    // one heartbeat each (interval 1), then silence: both past their limit 3 s later
    const beatAt = Date.now();
    for (const identity of ["answers.test", "gone.test"]) await js.publish(heartbeatSubject(identity), encodeHeartbeat({ identity, time: Date.now(), interval: 1, version: "test", phase: "serving", state: "up", status: {} }));
    // never unreachable before its ask came back: the ask answers for it; and gone.test, once
    // unreachable, never reads reachable again while it is asked again
    let flashed = false;
    let goneSeen = false;
    let goneBack = false;
    feed.on("tick", (x: HealthReport) => {
      if (x.nodes.some((n) => n.identity === "answers.test" && !n.reachable)) flashed = true;
      const g = x.nodes.find((n) => n.identity === "gone.test");
      if (g && !g.reachable) goneSeen = true;
      else if (g && goneSeen) goneBack = true;
    });
    const r = await eventually(async () => {
      const x: HealthReport = feed.report();
      const gone = x.nodes.find((n) => n.identity === "gone.test");
      return gone && !gone.reachable ? x : undefined;
    }, 30_000, "gone.test unreachable");
    assert.match(r.nodes.find((n) => n.identity === "gone.test")!.problems[0]!.why, /^no heartbeat for \d+ s \(one is due every 1 s; unreachable after 3 s\); it did not answer a ping$/);
    const answers = r.nodes.find((n) => n.identity === "answers.test")!;
    assert.equal(answers.reachable, true, "it answered");
    assert.equal(flashed, false, "answers.test was never reported unreachable, not even while it was being asked");
    // asked 1 s before its 3 s limit, so seen 2 s or more after its one beat: the ask's time, not the beat's
    assert.ok(Date.parse(answers.last_seen!) >= beatAt + 1900, `seen when it was asked, not at its beat: ${answers.last_seen} (beat ${new Date(beatAt).toISOString()})`);
    // two seconds of ticks (eight) later: no more asks than the first, the 10 s before a quiet node is asked again not yet up
    const n = asks.length;
    const t0 = Date.now();
    await eventually(async () => (Date.now() - t0 >= 2000 ? true : undefined), 5000, "two seconds of ticks");
    assert.equal(asks.length, n, `asked again within 10 s: ${JSON.stringify(asks)}`);
    assert.deepEqual(asks[0]!.ids, ["answers.test", "gone.test"]);
    // asked again once 10 s are up, its answer (none) back, and a tick after: unreachable throughout
    await eventually(async () => (asks.filter((a) => a.ids.includes("gone.test")).length >= 2 && Date.now() - asks.at(-1)!.at > 1500 ? true : undefined), 30_000, "gone.test asked a second time");
    assert.equal(goneBack, false, "gone.test read reachable while it was asked again");
    assert.equal(feed.report().nodes.find((n) => n.identity === "gone.test")?.reachable, false);
  } finally {
    feed.stop();
  }
});
