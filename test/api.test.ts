import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { MusterClient, buildFilter, rpcutilDDL, Status, aggregateReplies, RpcError } from "../src/index.js";
import { startEmulator, type RunningEmulator } from "../src/emulator/emulator.js";
import { generateFleet } from "../src/emulator/fleet.js";
import { connectNats } from "./support/collective.js";
import { startNats, type NatsHandle } from "./support/index.js";
import { silentLogger } from "../src/log.js";

// The public API (src/index.ts) as a user's script sees it: typed calls, streaming, aggregates.

let dir: string;
let nats: NatsHandle;
let nc: NatsConnection;
let emu: RunningEmulator;
let client: MusterClient;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "muster-api-"));
  process.env.MUSTER_CONFIG_DIR = dir;
  nats = await startNats({});
  nc = await connectNats(nats.url);
  emu = await startEmulator({ nc, nodes: generateFleet(50), collective: "muster", log: silentLogger });
  client = await MusterClient.connect({ broker: nats.url });
});

after(async () => {
  await client?.close();
  await emu?.stop();
  await nc?.drain();
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test("typed agent client: discover by filter, call with DDL-checked input, aggregate", async () => {
  const nodes = await client.discover({ filter: buildFilter({ fact: ["country=de"] }) });
  assert.equal(nodes.length, 10);
  const res = await client.agent(rpcutilDDL).call("get_fact", { fact: "country" }, { nodes });
  assert.equal(res.stats.responded, 10);
  assert.ok(res.replies.every((r) => r.statuscode === Status.OK && r.data.value === "de"));
  const [summary] = aggregateReplies(rpcutilDDL, "get_fact", res.replies.map((r) => r.data));
  assert.deepEqual(summary && "counts" in summary ? summary.counts : undefined, [{ value: "de", count: 10 }]);
  // input the DDL rejects is refused before anything is sent
  await assert.rejects(client.agent(rpcutilDDL).call("get_fact", { fact: "bad fact!" }, { nodes }), (e) => e instanceof RpcError && e.status === Status.InvalidData);
});

test("stream yields replies as they arrive and returns the summary", async () => {
  const seen: string[] = [];
  const it = client.stream("rpcutil", "ping", {}, { filter: buildFilter({ select: ["role=web or role=db"] }) });
  let r = await it.next();
  while (!r.done) {
    seen.push(r.value.sender);
    r = await it.next();
  }
  const want = generateFleet(50).filter((n) => n.facts.role === "web" || n.facts.role === "db").length;
  assert.equal(seen.length, want);
  assert.equal(r.value.stats.responded, want);
  assert.equal(new Set(seen).size, want);
});

// A stream that waited for its ten-minute timeout after the break would hang the test past its deadline.
test("breaking out of a stream early stops waiting", { timeout: 120_000 }, async () => {
  let n = 0;
  for await (const _ of client.stream("rpcutil", "ping", {}, { timeoutMs: 600_000 })) if (++n === 3) break;
  assert.equal(n, 3);
});
