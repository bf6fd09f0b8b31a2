import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import type { NatsConnection } from "@nats-io/transport-node";
import { MusterClient } from "../../src/client/client.js";
import { generateFleet } from "../../src/emulator/fleet.js";
import { buildFilter } from "../../src/filter/index.js";
import { decodeJson } from "../../src/protocol/envelope.js";
import { Status } from "../../src/protocol/status.js";
import { generateSigningKey } from "../../src/protocol/signing.js";
import { cleanEnv, connectNats, record, runCli, spawnMuster, startBroker, tempDir, type Broker } from "../support/collective.js";

// `muster emulate`: many virtual nodes in one process, each a full node pipeline.

const tmp = tempDir("emulate");
process.env.MUSTER_CONFIG_DIR = join(tmp.path, "config");
const env = cleanEnv(process.env.MUSTER_CONFIG_DIR);

let broker: Broker;
let nc: NatsConnection;
let client: MusterClient;

before(async () => {
  broker = await startBroker();
  nc = await connectNats(broker.url);
  client = await MusterClient.connect({ nc });
});

after(async () => {
  await client?.close();
  await nc?.drain().catch(() => undefined);
  await broker?.dispose();
  tmp.remove();
});

const fleet = {
  nodes: [
    { identity: "web1.de.example", facts: { country: "de", os: { family: "Debian" } }, classes: ["web", "base"] },
    { identity: "web2.us.example", facts: { country: "us", os: { family: "Debian" } }, classes: ["web", "base"] },
    { identity: "db1.de.example", facts: { country: "de", os: { family: "RedHat" } }, classes: ["db", "base"] },
  ],
};

test("--fleet FILE (YAML) hosts every node with its facts and classes, says ready, and stops on SIGTERM", async (t) => {
  const file = join(tmp.path, "fleet.yaml");
  writeFileSync(file, toYaml(fleet));
  const lifecycle = record(nc, "muster.lifecycle.>");
  await nc.flush();
  const emu = spawnMuster(["emulate", "--fleet", file, "--broker", broker.url], { env });
  t.after(() => emu.stop());
  const line = await emu.waitForLine(/ready/, 20_000);
  assert.match(line, /3 nodes/);
  assert.deepEqual(await client.discover({ timeoutMs: 3000 }), ["db1.de.example", "web1.de.example", "web2.us.example"]);
  assert.deepEqual(await client.discover({ filter: buildFilter({ fact: ["country=de"], class: ["web"] }), timeoutMs: 3000 }), ["web1.de.example"]);
  assert.deepEqual(await client.discover({ filter: buildFilter({ select: ["fact('os.family').value=RedHat"] }), timeoutMs: 3000 }), ["db1.de.example"]);
  const r = await client.call("rpcutil", "get_fact", { fact: "os.family" }, { nodes: ["web2.us.example", "db1.de.example"], timeoutMs: 5000 });
  assert.deepEqual(r.replies.map((x) => [x.sender, x.data.value]).sort(), [["db1.de.example", "RedHat"], ["web2.us.example", "Debian"]]);
  const inv = await client.call("rpcutil", "inventory", {}, { nodes: ["db1.de.example"], timeoutMs: 5000 });
  assert.deepEqual(inv.replies[0]!.data.classes, ["base", "db"]);

  const stopped = await emu.stop();
  assert.equal(stopped.code, 0, emu.stderr());
  for (const n of fleet.nodes) {
    await lifecycle.waitFor((m) => m.subject === "muster.lifecycle.shutdown.emulator" && (decodeJson(m.data) as { identity: string }).identity === n.identity, 5000, `shutdown of ${n.identity}`);
  }
  assert.ok(lifecycle.messages.some((m) => m.subject === "muster.lifecycle.startup.emulator"));
  lifecycle.stop();
  assert.deepEqual(await client.discover({ timeoutMs: 1000 }), []);
});

test("--count N generates N plausible nodes", async (t) => {
  const emu = spawnMuster(["emulate", "--count", "40", "--broker", broker.url, "--registration", "1"], { env });
  t.after(() => emu.stop());
  const reg = record(nc, "muster.registration");
  t.after(() => reg.stop());
  await emu.waitForLine(/ready/, 20_000);
  const expected = generateFleet(40);
  assert.deepEqual(await client.discover({ timeoutMs: 5000 }), expected.map((n) => n.identity).sort());
  const de = expected.filter((n) => n.facts.country === "de").map((n) => n.identity);
  assert.equal(de.length, 8);
  assert.deepEqual(await client.discover({ filter: buildFilter({ fact: ["country=de"] }), timeoutMs: 5000 }), de.sort());
  const r = await client.call("rpcutil", "ping", {}, { nodes: expected.map((n) => n.identity), timeoutMs: 10_000 });
  assert.equal(r.stats.ok, 40);
  // --registration N: every node registers
  const m = await reg.waitFor(() => true, 10_000, "a registration message");
  assert.ok(expected.some((n) => n.identity === (decodeJson(m.data) as { identity: string }).identity));
  assert.equal((await emu.stop()).code, 0);
});

test("emulated nodes trust only the invoking user's key by default", async (t) => {
  const file = join(tmp.path, "one.json");
  writeFileSync(file, JSON.stringify({ nodes: [{ identity: "solo.example" }] }));
  const emu = spawnMuster(["emulate", "--fleet", file, "--broker", broker.url], { env });
  t.after(() => emu.stop());
  await emu.waitForLine(/ready/, 20_000);
  const stranger = await MusterClient.connect({ nc, key: generateSigningKey("user=stranger").key });
  assert.deepEqual(await stranger.discover({ timeoutMs: 1000 }), []);
  const r = await stranger.call("rpcutil", "ping", {}, { nodes: ["solo.example"], timeoutMs: 5000 });
  assert.equal(r.replies[0]?.statuscode, Status.Aborted);
  assert.match(r.replies[0]!.statusmsg, /not trusted/);
  assert.deepEqual(await client.discover({ timeoutMs: 3000 }), ["solo.example"]);
});

test("bad fleets and bad arguments fail with a clear message", async () => {
  const dup = join(tmp.path, "dup.yaml");
  writeFileSync(dup, toYaml({ nodes: [{ identity: "a.example" }, { identity: "a.example" }] }));
  let r = await runCli(["emulate", "--fleet", dup, "--broker", broker.url], { env });
  assert.equal(r.code, 1);
  assert.match(r.stderr, /duplicate identity a\.example/);

  const badId = join(tmp.path, "badid.yaml");
  writeFileSync(badId, toYaml({ nodes: [{ identity: "no spaces allowed" }] }));
  r = await runCli(["emulate", "--fleet", badId, "--broker", broker.url], { env });
  assert.equal(r.code, 1);
  assert.match(r.stderr, /nodes\.0\.identity/);

  const unknownAgent = join(tmp.path, "agent.yaml");
  writeFileSync(unknownAgent, toYaml({ nodes: [{ identity: "a.example", agents: ["nosuchagent"] }] }));
  r = await runCli(["emulate", "--fleet", unknownAgent, "--broker", broker.url], { env });
  assert.equal(r.code, 1);
  assert.match(r.stderr, /unknown built-in agent 'nosuchagent'/);

  r = await runCli(["emulate", "--fleet", join(tmp.path, "absent.yaml"), "--broker", broker.url], { env });
  assert.equal(r.code, 1);
  assert.match(r.stderr, /absent\.yaml does not exist/);

  for (const args of [["--count", "3", "--fleet", dup], [], ["--count", "0"], ["--count", "many"]]) {
    r = await runCli(["emulate", ...args, "--broker", broker.url], { env });
    assert.equal(r.code, 64, `emulate ${args.join(" ")}: ${r.stderr}`);
  }
});
