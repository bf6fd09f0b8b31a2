import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { coreAgentFactories } from "../../src/agents/builtin.js";
import { MusterClient } from "../../src/client/client.js";
import type { AgentDDL } from "../../src/ddl/types.js";
import { startEmulator, type RunningEmulator } from "../../src/emulator/emulator.js";
import { MusterError } from "../../src/errors.js";
import { silentLogger } from "../../src/log.js";
import type { NodeEvent } from "../../src/protocol/events.js";
import type { LifecycleEvent } from "../../src/protocol/lifecycle.js";
import { Status } from "../../src/protocol/status.js";
import { defineAgent } from "../../src/agent/agent.js";
import { connectNats, eventually, tempDir } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";

// What the client offers its callers so that none of them needs the raw connection: event and
// lifecycle subscriptions, KV buckets, discovery sources by name, and outputs typed by the DDL.
// Against a real nats-server (JetStream on) and emulated nodes hosting a test agent.

const tmp = tempDir("client-api");
process.env.MUSTER_CONFIG_DIR = join(tmp.path, "config");

const gaugeDDL = {
  metadata: { name: "gauge", description: "A test agent with typed outputs", version: "1.0.0", timeout: 5 },
  actions: {
    read: {
      description: "Reads the gauge; honest=false answers with outputs of the wrong types",
      input: { honest: { prompt: "Honest", description: "Answer as the DDL says", type: "boolean", optional: false } },
      output: {
        level: { description: "Level", display_as: "Level", type: "integer" },
        label: { description: "Label", display_as: "Label", type: "string" },
        extra: { description: "Extra", display_as: "Extra", type: "hash" },
        count: { description: "Count", display_as: "Count", type: "integer", default: 0 },
      },
    },
    announce: {
      description: "Publishes the event gauge.announced",
      input: {},
      output: { announced: { description: "Done", display_as: "Announced", type: "boolean" } },
    },
  },
} as const satisfies AgentDDL;

const gauge = () =>
  defineAgent({
    ddl: gaugeDDL,
    actions: {
      read: (input) => (input.honest ? { level: 3, label: "three", extra: { unit: "bar" } } : { level: "three", label: 3, extra: [1], count: 2 }),
      announce: (_input, ctx) => {
        ctx.emit("announced", { by: ctx.caller });
        return { announced: true };
      },
    },
  });

const nodes = ["g1.test", "g2.test"];
let nats: NatsHandle;
let serverNc: NatsConnection;
let raw: NatsConnection;
let emu: RunningEmulator;
let client: MusterClient;

const emulate = (identities: string[]) =>
  startEmulator({ nc: serverNc, nodes: identities.map((identity) => ({ identity, facts: {}, classes: [], agents: ["gauge"] })), collective: "muster", log: silentLogger, factories: { ...coreAgentFactories, gauge } });

before(async () => {
  nats = await startNats();
  serverNc = await connectNats(nats.url);
  raw = await connectNats(nats.url);
  emu = await emulate(nodes);
  client = await MusterClient.connect({ brokers: [nats.url], name: "client-api-test" });
});

after(async () => {
  await client?.close();
  await emu?.stop();
  await serverNc?.drain().catch(() => undefined);
  await raw?.drain().catch(() => undefined);
  await nats?.stop();
  tmp.remove();
});

test("typed outputs: a DDL-conforming reply is typed; one that is not fails with a reason naming the output", async () => {
  const g = client.agent(gaugeDDL);
  const ok = await g.call("read", { honest: true }, { nodes });
  assert.equal(ok.stats.ok, 2);
  const r = ok.replies[0]!;
  // compile-time: the fields carry their DDL types
  const level: number | null | undefined = r.data.level;
  const label: string | null | undefined = r.data.label;
  const count: number | null = r.data.count; // has a default: always present
  assert.equal(level, 3);
  assert.equal(label, "three");
  assert.equal(count, 0);
  assert.deepEqual(r.data.extra, { unit: "bar" });

  const seen: number[] = [];
  const bad = await g.call("read", { honest: false }, { nodes: ["g1.test"], onReply: (x) => seen.push(x.statuscode) });
  const b = bad.replies[0]!;
  assert.equal(b.statuscode, Status.UnknownError);
  assert.match(b.statusmsg, /does not match the gauge DDL: level must be an integer, got "three"; label must be a string, got 3; extra must be a hash \(JSON object\), got \[1\]/);
  assert.deepEqual(b.data, { count: 2 }, "the ill-typed outputs are left out, the good one stays");
  assert.deepEqual(seen, [Status.UnknownError], "onReply sees the checked reply");
  assert.equal(bad.stats.ok, 0);
  assert.equal(bad.stats.failed, 1);

  // the untyped call is unchanged: data as the node sent it
  const untyped = await client.call("gauge", "read", { honest: false }, { nodes: ["g1.test"] });
  assert.equal(untyped.replies[0]!.statuscode, Status.OK);
  assert.equal(untyped.replies[0]!.data.level, "three");
});

test("onEvent: node events arrive parsed; garbled ones are dropped and told", async () => {
  const events: NodeEvent[] = [];
  const invalid: string[] = [];
  const sub = client.onEvent("gauge", "announced", (e) => events.push(e), { onInvalid: (reason) => invalid.push(reason) });
  try {
    await sub.ready;
    raw.publish("muster.event.gauge.announced", new TextEncoder().encode("{not json"));
    raw.publish("muster.event.gauge.announced", new TextEncoder().encode(JSON.stringify({ identity: "x", agent: "gauge", event: "announced", data: [] })));
    await client.agent(gaugeDDL).call("announce", {}, { nodes });
    await eventually(async () => (events.length === 2 && invalid.length === 2 ? true : undefined), 10_000, "two events and two refusals");
    assert.deepEqual(events.map((e) => e.identity).sort(), nodes);
    assert.equal(events[0]!.agent, "gauge");
    assert.equal(events[0]!.data.by, client.key.name);
    assert.match(invalid.join("\n"), /not UTF-8 JSON/);
    assert.match(invalid.join("\n"), /data must be a JSON object/);
    assert.equal(sub.invalid, 2);
  } finally {
    sub.unsubscribe();
  }
});

test("onLifecycle: startup and shutdown as one union type; hostile events refused with a reason", async () => {
  const events: LifecycleEvent[] = [];
  const invalid: { reason: string; subject: string }[] = [];
  const sub = client.onLifecycle((e) => events.push(e), { onInvalid: (reason, subject) => invalid.push({ reason, subject }) });
  try {
    await sub.ready;
    raw.publish("muster.lifecycle.startup.server", new TextEncoder().encode(JSON.stringify({ type: "startup", identity: "evil.>", component: "server", version: "1", collectives: ["muster"], time: 1 })));
    raw.publish("muster.lifecycle.shutdown.server", new TextEncoder().encode(JSON.stringify({ type: "startup", identity: "web1", component: "server", version: "1", collectives: ["muster"], time: 1 })));
    const extra = await emulate(["late.test"]);
    await eventually(async () => (events.some((e) => e.identity === "late.test" && e.type === "startup") ? true : undefined), 10_000, "startup of late.test");
    await extra.stop();
    await eventually(async () => (events.some((e) => e.identity === "late.test" && e.type === "shutdown") ? true : undefined), 10_000, "shutdown of late.test");
    const up = events.find((e) => e.type === "startup")!;
    assert.equal(up.component, "emulator");
    assert.deepEqual(up.collectives, ["muster"]);
    assert.equal(invalid.length, 2);
    assert.match(invalid[0]!.reason, /identity "evil.>" is not a valid identity/);
    assert.match(invalid[1]!.reason, /a startup event .* arrived on "muster.lifecycle.shutdown.server"/);
  } finally {
    sub.unsubscribe();
  }
  const only: LifecycleEvent[] = [];
  const shutdowns = client.onLifecycle((e) => only.push(e), { type: "shutdown" });
  try {
    await shutdowns.ready;
    const extra = await emulate(["later.test"]);
    await extra.stop();
    await eventually(async () => (only.length ? true : undefined), 10_000, "the shutdown event");
    assert.deepEqual(only.map((e) => `${e.type} ${e.identity}`), ["shutdown later.test"]);
  } finally {
    shutdowns.unsubscribe();
  }
});

test("bucket and bucketIfExists: a bucket created on request, opened when present, absent ones say so", async () => {
  assert.equal(await client.bucketIfExists("client_api_none"), undefined);
  const b = await client.bucket("client_api", { create: { history: 2 } });
  await b.put("k", new TextEncoder().encode("v"));
  const again = await client.bucketIfExists("client_api");
  assert.ok(again);
  assert.equal(new TextDecoder().decode((await again.get("k"))?.value), "v");
  await assert.rejects(client.bucket("client_api_none"), (e) => e instanceof MusterError && e.code === "MUSTER_BUCKET_NOT_FOUND" && /no KV bucket "client_api_none"/.test(e.message));
  assert.equal(await client.bucketIfExists("client_api_none"), undefined);
});

test("source: discovery methods by their --dm names", async () => {
  const file = join(tmp.path, "nodes.txt");
  writeFileSync(file, "g2.test\n# comment\ng1.test\n");
  assert.deepEqual(await client.discover({ source: await client.source({ method: "flatfile", file }) }), nodes);
  assert.deepEqual(await client.discover({ source: await client.source({ method: "file", file }) }), nodes);
  assert.deepEqual(await client.discover({ source: await client.source({ method: "mc" }), timeoutMs: 5000 }), nodes);
  const registry = await client.source({ method: "registry", bucket: "client_api_registry", via: "bucket" });
  assert.equal(registry.name, "registry");
  assert.equal((await client.source({ method: "puppetdb" })).name, "puppetdb");
  await assert.rejects(client.source({ method: "inventory" } as never), (e) => e instanceof MusterError && /unknown discovery method "inventory"; known: broadcast, mc, flatfile, file, registry, puppetdb/.test(e.message));
});
