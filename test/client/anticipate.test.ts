import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { MusterClient } from "../../src/client/client.js";
import { decodeRequest, encodeReply } from "../../src/protocol/envelope.js";
import { subjects } from "../../src/protocol/subjects.js";
import { REPLY_PROTOCOL } from "../../src/protocol/types.js";
import { connectNats, startBroker, tempDir, type Broker } from "../support/collective.js";

// Discovery that knows which nodes to expect (DiscoverOptions.anticipate, issue 29) ends as soon as
// they all answered, and never at the cost of a node: an expected node that answers late, past the
// idle window but within the discovery timeout, is waited for; a node outside the expectation that
// answered makes the idle window end discovery, as without one. The "nodes" here are bare NATS
// subscribers on a real nats-server that answer discovery after the delay each is given: late
// repliers are the scenario itself.

const tmp = tempDir("anticipate");
process.env.MUSTER_CONFIG_DIR = join(tmp.path, "config");

let broker: Broker;
let nodesNc: NatsConnection;
let client: MusterClient;
let collective = 0;

before(async () => {
  broker = await startBroker();
  nodesNc = await connectNats(broker.url);
  client = await MusterClient.connect({ nc: await connectNats(broker.url), collective: "c0" });
});

after(async () => {
  await client?.close();
  await nodesNc?.drain().catch(() => undefined);
  await broker?.dispose();
  tmp.remove();
});

/** Nodes that answer each discovery request `delays[identity]` ms after it arrives; a client for their collective. */
async function fleet(delays: Record<string, number>): Promise<{ client: MusterClient; sub: Subscription }> {
  const name = `c${++collective}`;
  const sub = nodesNc.subscribe(subjects.broadcast(name, "discovery"), {
    callback: (_err, msg) => {
      const req = decodeRequest(msg.data);
      for (const [sender, ms] of Object.entries(delays)) {
        const reply = encodeReply({ protocol: REPLY_PROTOCOL, requestid: req.id, sender, agent: "discovery", action: "ping", time: Date.now(), statuscode: 0, statusmsg: "OK", data: {} });
        // a late one may come after its test, even after the file's connection closed: it goes nowhere
        setTimeout(() => {
          if (!nodesNc.isClosed() && !nodesNc.isDraining()) nodesNc.publish(msg.reply!, reply);
        }, ms);
      }
    },
  });
  await nodesNc.flush();
  return { client: client.withCollective(name), sub };
}

const IDLE = 100;

test("an expected node that answers after the idle window, within the timeout, is found", async () => {
  const { client: c, sub } = await fleet({ a: 0, b: 0, c: 0, d: 6 * IDLE, e: 9 * IDLE });
  try {
    // The control: the idle window alone ends discovery before the late two answer.
    assert.deepEqual(await c.discover({ timeoutMs: 10_000, idleMs: IDLE }), ["a", "b", "c"]);
    // Expecting them, discovery waits for them.
    assert.deepEqual(await c.discover({ timeoutMs: 10_000, idleMs: IDLE, anticipate: ["a", "b", "c", "d", "e"] }), ["a", "b", "c", "d", "e"]);
  } finally {
    sub.unsubscribe();
  }
});

test("a fleet slow to answer at all: the idle window stretches to the time the first reply took, and a silence past it still ends discovery", async () => {
  // a answers after 5 idle windows, b 3 windows after a: a fixed window would end between them
  // (on a loaded machine a node of three was dropped so). late comes after a long silence.
  const slow = await fleet({ a: 5 * IDLE, b: 8 * IDLE, late: 30 * IDLE });
  try {
    assert.deepEqual(await slow.client.discover({ timeoutMs: 60 * IDLE, idleMs: IDLE }), ["a", "b"]);
  } finally {
    slow.sub.unsubscribe();
  }
  // The stretch is the first reply's time, no more: a silence of 15 windows after a first reply at 2 ends it.
  const bounded = await fleet({ a: 2 * IDLE, b: 17 * IDLE });
  try {
    assert.deepEqual(await bounded.client.discover({ timeoutMs: 60 * IDLE, idleMs: IDLE }), ["a"]);
  } finally {
    bounded.sub.unsubscribe();
  }
});

test("nodes outside the expectation are found: before the last expected one, and within the idle window after it", async () => {
  // x answers at once (the expectation is stale); b, expected, answers late; y, unexpected, answers
  // after b within the idle window: the idle window, not the expectation, ends this discovery.
  const { client: c, sub } = await fleet({ a: 0, x: 0, b: 6 * IDLE, y: 6 * IDLE + IDLE / 2 });
  try {
    assert.deepEqual(await c.discover({ timeoutMs: 10_000, idleMs: IDLE, anticipate: ["a", "b"] }), ["a", "b", "x", "y"]);
  } finally {
    sub.unsubscribe();
  }
});

test("an expected node that is gone holds discovery until the timeout, which returns every node that answered", async () => {
  const { client: c, sub } = await fleet({ a: 0, b: 3 * IDLE });
  try {
    assert.deepEqual(await c.discover({ timeoutMs: 8 * IDLE, idleMs: IDLE, anticipate: ["a", "b", "gone"] }), ["a", "b"]);
  } finally {
    sub.unsubscribe();
  }
});

test("when every expected node answered and no other, discovery ends without waiting out the idle window", { timeout: 20_000 }, async () => {
  // An idle window of a minute: waiting it out would fail this test at its deadline.
  const { client: c, sub } = await fleet({ a: 0, b: 0, c: IDLE });
  try {
    const found: string[] = [];
    assert.deepEqual(await c.discover({ timeoutMs: 120_000, idleMs: 60_000, anticipate: ["a", "b", "c"], onFound: (n) => found.push(n) }), ["a", "b", "c"]);
    assert.deepEqual(found.sort(), ["a", "b", "c"]);
  } finally {
    sub.unsubscribe();
  }
});
