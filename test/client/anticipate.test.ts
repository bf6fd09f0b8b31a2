import { after, before, test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import { MusterClient } from "../../src/client/client.js";
import { decodeRequest, encodeReply } from "../../src/protocol/envelope.js";
import { subjects } from "../../src/protocol/subjects.js";
import { REPLY_PROTOCOL } from "../../src/protocol/types.js";
import { connectNats, startBroker, tempDir, type Broker } from "../support/collective.js";

// Discovery that knows which nodes to expect (DiscoverOptions.anticipate, issue 29) ends as soon as
// they all answered, and never at the cost of a node: an expected node that answers late, past the
// idle window but within the discovery timeout, is waited for; a node outside the expectation that
// answered makes the idle window end discovery, as without one. The "nodes" here are bare NATS
// subscribers on a real nats-server; each answers when the test says so. The client's clock is the
// test's (node:test's mock timers for setTimeout and Date, and performance.now read from them): time
// passes only when the test moves it, so what is asserted is the same on an idle machine and on a
// loaded one (how fast discovery ends is measured in bench/cli-start.ts).

const tmp = tempDir("anticipate");
process.env.MUSTER_CONFIG_DIR = join(tmp.path, "config");

let broker: Broker;
let nodesNc: NatsConnection;
let clientNc: NatsConnection;
let client: MusterClient;
let collective = 0;

before(async () => {
  broker = await startBroker();
  nodesNc = await connectNats(broker.url);
  clientNc = await connectNats(broker.url);
  client = await MusterClient.connect({ nc: clientNc, collective: "c0" });
});

after(async () => {
  await client?.close();
  // the client's connection is the test's (a client handed one leaves it open): left open, it would
  // try to reconnect for half a minute after the broker is gone
  await clientNc?.drain().catch(() => undefined);
  await nodesNc?.drain().catch(() => undefined);
  await broker?.dispose();
  tmp.remove();
});

const IDLE = 100;

interface Fleet {
  /** Starts a discovery; `found` lists each node as the client takes its reply. */
  discover(o: { timeoutMs: number; idleMs: number; anticipate?: string[] }): Discovery;
}

interface Discovery {
  /** The identities once discovery ended, else undefined. */
  ended(): Promise<string[] | undefined>;
  /** These nodes answer the discovery request now; resolves once the client has taken every reply (or discovery has ended: then it takes none). */
  answer(...nodes: string[]): Promise<void>;
}

/**
 * Nodes of a fresh collective that answer a discovery request only when told to; the test's clock
 * from here on (mock timers, reset when the test ends).
 */
async function fleet(t: TestContext): Promise<Fleet> {
  const name = `c${++collective}`;
  let request: ((m: Msg) => void) | undefined;
  const sub: Subscription = nodesNc.subscribe(subjects.broadcast(name, "discovery"), { callback: (_e, m) => request?.(m) });
  await nodesNc.flush();
  t.after(() => sub.unsubscribe());
  t.mock.timers.enable({ apis: ["setTimeout", "Date"], now: Date.now() });
  t.mock.method(performance, "now", () => Date.now());
  const c = client.withCollective(name);
  return {
    discover(o) {
      const arrived = new Promise<Msg>((resolve) => (request = resolve));
      const waiting = new Map<string, () => void>();
      let result: string[] | undefined;
      const done = c.discover({ ...o, onFound: (id) => waiting.get(id)?.() }).then((r) => (result = r));
      return {
        async ended() {
          await new Promise((r) => setImmediate(r)); // what the last tick set off has run
          return result;
        },
        async answer(...nodes) {
          const msg = await arrived;
          const req = decodeRequest(msg.data);
          const taken = nodes.map((id) => new Promise<void>((resolve) => waiting.set(id, resolve)));
          for (const sender of nodes) nodesNc.publish(msg.reply!, encodeReply({ protocol: REPLY_PROTOCOL, requestid: req.id, sender, agent: "discovery", action: "ping", time: Date.now(), statuscode: 0, statusmsg: "OK", data: {} }));
          await Promise.race([Promise.all(taken), done]);
        },
      };
    },
  };
}

test("an expected node that answers after the idle window, within the timeout, is found", async (t) => {
  const f = await fleet(t);
  const tick = (ms: number) => t.mock.timers.tick(ms);
  // The control: the idle window alone ends discovery before the late two answer.
  const control = f.discover({ timeoutMs: 10_000, idleMs: IDLE });
  await control.answer("a", "b", "c");
  tick(IDLE - 1);
  assert.equal(await control.ended(), undefined, "not before the idle window is up");
  tick(1);
  assert.deepEqual(await control.ended(), ["a", "b", "c"]);
  // Expecting them, discovery waits for them.
  const d = f.discover({ timeoutMs: 10_000, idleMs: IDLE, anticipate: ["a", "b", "c", "d", "e"] });
  await d.answer("a", "b", "c");
  tick(6 * IDLE);
  await d.answer("d");
  tick(3 * IDLE);
  assert.equal(await d.ended(), undefined, "e is expected and has not answered");
  await d.answer("e");
  tick(20); // the settle time after the last expected node
  assert.deepEqual(await d.ended(), ["a", "b", "c", "d", "e"]);
});

test("a fleet slow to answer at all: the idle window stretches to the time the first reply took, and a silence past it still ends discovery", async (t) => {
  const f = await fleet(t);
  const tick = (ms: number) => t.mock.timers.tick(ms);
  // a answers after 5 idle windows, b 3 windows after a: a fixed window would end between them
  // (on a loaded machine a node of three was dropped so). late never answers in time.
  const slow = f.discover({ timeoutMs: 60 * IDLE, idleMs: IDLE });
  tick(5 * IDLE);
  await slow.answer("a");
  tick(3 * IDLE);
  assert.equal(await slow.ended(), undefined, "3 windows after a: the window is a's 5");
  await slow.answer("b");
  tick(5 * IDLE - 1);
  assert.equal(await slow.ended(), undefined);
  tick(1);
  assert.deepEqual(await slow.ended(), ["a", "b"], "5 windows of silence after b end it");
  // The stretch is the first reply's time, no more: after a first reply at 2 windows, 2 of silence end it.
  const bounded = f.discover({ timeoutMs: 60 * IDLE, idleMs: IDLE });
  tick(2 * IDLE);
  await bounded.answer("a");
  tick(2 * IDLE);
  assert.deepEqual(await bounded.ended(), ["a"]);
});

test("nodes outside the expectation are found: before the last expected one, and within the idle window after it", async (t) => {
  const f = await fleet(t);
  const tick = (ms: number) => t.mock.timers.tick(ms);
  // x answers at once (the expectation is stale); b, expected, answers late; y, unexpected, answers
  // after b within the idle window: the idle window, not the expectation, ends this discovery.
  const d = f.discover({ timeoutMs: 10_000, idleMs: IDLE, anticipate: ["a", "b"] });
  await d.answer("a", "x");
  tick(6 * IDLE);
  assert.equal(await d.ended(), undefined, "b is expected: no silence ends it before b answered");
  await d.answer("b");
  tick(IDLE / 2);
  await d.answer("y");
  tick(IDLE - 1);
  assert.equal(await d.ended(), undefined, "the idle window runs from y");
  tick(1);
  assert.deepEqual(await d.ended(), ["a", "b", "x", "y"]);
});

test("an expected node that is gone holds discovery until the timeout, which returns every node that answered", async (t) => {
  const f = await fleet(t);
  const tick = (ms: number) => t.mock.timers.tick(ms);
  const d = f.discover({ timeoutMs: 8 * IDLE, idleMs: IDLE, anticipate: ["a", "b", "gone"] });
  await d.answer("a");
  tick(3 * IDLE);
  await d.answer("b");
  tick(5 * IDLE - 1);
  assert.equal(await d.ended(), undefined, "gone is expected: held until the timeout");
  tick(1);
  assert.deepEqual(await d.ended(), ["a", "b"]);
});

test("when every expected node answered and no other, discovery ends without waiting out the idle window", async (t) => {
  const f = await fleet(t);
  const tick = (ms: number) => t.mock.timers.tick(ms);
  // An idle window of a minute: only the settle time after the last expected node passes.
  const d = f.discover({ timeoutMs: 120_000, idleMs: 60_000, anticipate: ["a", "b", "c"] });
  await d.answer("a", "b");
  tick(IDLE);
  await d.answer("c");
  tick(19);
  assert.equal(await d.ended(), undefined, "within the settle time");
  tick(1);
  assert.deepEqual(await d.ended(), ["a", "b", "c"]);
});
