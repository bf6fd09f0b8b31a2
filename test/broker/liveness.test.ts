import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { DEFAULT_HEALTH_POLICY } from "../../src/health/model.js";
import { heartbeatSubject } from "../../src/protocol/heartbeat.js";
import { cleanEnv, connectNats, eventually, startMusterServer, tempDir, type TestServer } from "../support/collective.js";
import { freePort, startNats } from "../support/index.js";
import type { NatsHandle } from "../../src/lab/nats.js";

// A broker that loses its power sends no reset (issue 36: a node on nats3 read as unreachable for
// 26 s while it served, because its heartbeats went into a socket nobody read until NATS's own pings
// gave up). Here a real two-member cluster; the member the node is on is frozen with SIGSTOP, which
// is what a power cut looks like from the node (its TCP peer accepts nothing and answers nothing),
// and a watcher on the other member sees the node's heartbeats.

const tmp = tempDir("liveness");
const IDENTITY = "web1.liveness.test";
const members: { nats: NatsHandle; monitor: number }[] = [];
let server: TestServer;
let nc: NatsConnection;
let frozen: number | undefined;

before(async () => {
  const ports = await Promise.all([freePort(), freePort(), freePort(), freePort()]);
  for (let i = 0; i < 2; i++) {
    const monitor = await freePort();
    const nats = await startNats({ jetstream: false, config: `server_name: m${i + 1}\nhttp: "127.0.0.1:${monitor}"\ncluster { name: liveness, listen: "127.0.0.1:${ports[i]}", routes: ["nats-route://127.0.0.1:${ports[1 - i]}"] }\n` });
    members.push({ nats, monitor });
  }
  server = await startMusterServer({ identity: IDENTITY, broker: members[0]!.nats.url, config: { brokers: members.map((m) => m.nats.url), registration: { interval: 0 }, heartbeat: { interval: 10, status: [] } } }, { dir: tmp.path, env: cleanEnv(tmp.path) });
});

after(async () => {
  if (frozen) process.kill(frozen, "SIGCONT");
  await server?.stop();
  await nc?.close().catch(() => undefined);
  for (const m of members) await m.nats.stop();
  tmp.remove();
});

/** The member whose /connz lists the node's connection. */
async function memberOfNode(): Promise<number | undefined> {
  for (const [i, m] of members.entries()) {
    if (m.nats.pid === frozen) continue;
    const res = await fetch(`http://127.0.0.1:${m.monitor}/connz`, { signal: AbortSignal.timeout(5000) });
    const body = (await res.json()) as { connections?: { name?: string }[] };
    if (body.connections?.some((c) => c.name === `muster-server:${IDENTITY}`)) return i;
  }
  return undefined;
}

test("a node whose broker stops answering (frozen, as a power cut leaves it) leaves it on its own probe, not NATS's pings, and beats on the other member", async (t) => {
  const on = await eventually(memberOfNode, 30_000, "the node's connection in a member's /connz");
  const other = members[1 - on]!;
  nc = await connectNats(other.nats.url);
  const arrived: number[] = [];
  nc.subscribe(heartbeatSubject(IDENTITY), { callback: () => void arrived.push(Date.now()) });
  await nc.flush();
  // a beat reaches the watcher through the routes first: the cluster works before the cut
  await eventually(async () => (arrived.length ? true : undefined), 30_000, "a heartbeat before the cut");
  frozen = members[on]!.nats.pid;
  process.kill(frozen, "SIGSTOP");
  const cutAt = Date.now();
  const lastBefore = arrived.at(-1)!;
  const n = arrived.length;
  // the probe's own words: what moved it was its broker not answering, not NATS's pings giving up
  // (those took 60-90 s, longer than health's threshold); deadlines that only catch a hang
  await eventually(async () => (/did not answer within \d+ s: moving to another/.test(server.stderr()) ? true : undefined), 120_000, "the node's log saying its broker did not answer");
  await eventually(async () => (arrived.length > n ? true : undefined), 120_000, "a heartbeat after the cut");
  assert.equal(await memberOfNode(), 1 - on, "the node is on the member that answers");
  // how long the node was silent is a figure, not a claim: docs/fleet.md quotes it
  t.diagnostic(`heartbeat gap across the cut: ${((arrived[n]! - lastBefore) / 1000).toFixed(1)} s; the first beat after it came ${((arrived[n]! - cutAt) / 1000).toFixed(1)} s after it (health calls a node unreachable after ${DEFAULT_HEALTH_POLICY.unreachableAfterS} s)`);
  process.kill(frozen, "SIGCONT");
  frozen = undefined;
});
