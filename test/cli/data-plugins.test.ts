import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import type { AgentFactory } from "../../src/agent/catalogue.js";
import { coreAgentFactories } from "../../src/agents/builtin.js";
import { startEmulator, type RunningEmulator } from "../../src/emulator/emulator.js";
import { silentLogger } from "../../src/log.js";
import { defineAgent, type Agent } from "../../src/agent/agent.js";
import { cleanEnv, connectNats, record, runCli, tempDir, type Recorder } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";

// `-S` data plugin calls checked by the client before anything is sent, on every discovery path,
// and a plugin only some nodes have (one the client knows from a DDL in its ddl_directories).

const dir = tempDir("dataplugins-cli");
let nats: NatsHandle;
let nc: NatsConnection;
let emu: RunningEmulator;
let env: NodeJS.ProcessEnv;
let wire: Recorder;
let withDDL: string;
let without: string;

// An agent of the user's own with a data plugin `rack()`, hosted by one node of two.
const rackAgent: AgentFactory = (d) =>
  defineAgent({
    ddl: { metadata: { name: "rack", description: "racks", version: "1.0", timeout: 5 }, actions: { where: { description: "where", input: {}, output: {} } } },
    actions: { where: () => ({}) },
    dataPlugins: [{ name: "rack", description: "where the node is racked", query: () => ({ row: d.identity.startsWith("a") ? 3 : 4, slot: 1 }) }],
  }) as unknown as Agent;

before(async () => {
  env = cleanEnv(join(dir.path, "keys"));
  process.env.MUSTER_CONFIG_DIR = join(dir.path, "keys");
  nats = await startNats({});
  nc = await connectNats(nats.url);
  emu = await startEmulator({
    nc,
    collective: "muster",
    log: silentLogger,
    factories: { ...coreAgentFactories, rack: rackAgent },
    nodes: [
      { identity: "a.racked.test", facts: {}, classes: [], agents: ["rack"] },
      { identity: "b.racked.test", facts: {}, classes: [], agents: ["rack"] },
      { identity: "plain.test", facts: {}, classes: [], agents: [] },
    ],
  });
  mkdirSync(join(dir.path, "ddl", "data"), { recursive: true });
  writeFileSync(join(dir.path, "ddl", "data", "rack.json"), JSON.stringify({ metadata: { name: "rack", description: "where the node is racked" }, output: { row: { description: "Row", type: "integer" }, slot: { description: "Slot", type: "integer" } } }));
  withDDL = join(dir.path, "with-ddl.yaml");
  writeFileSync(withDDL, `brokers: ["${nats.url}"]\nddl_directories: ["${join(dir.path, "ddl")}"]\n`);
  without = join(dir.path, "without.yaml");
  writeFileSync(without, `brokers: ["${nats.url}"]\n`);
  wire = record(nc, ">"); // everything anyone publishes
});

after(async () => {
  wire?.stop();
  await emu?.stop();
  await nc?.drain();
  await nats?.stop();
  dir.remove();
});

/** Runs a command that must be refused before it publishes anything. */
async function refusedUnsent(args: string[]): Promise<string> {
  await nc.flush();
  const before = wire.messages.length;
  const r = await runCli(args, { env });
  await nc.flush(); // anything the command published has reached us by now
  assert.equal(r.code, 1, `exit ${r.code}: ${r.stderr}`);
  assert.equal(r.stdout, "");
  // the emulated nodes' own heartbeats (their keys of the alive and runs buckets) go on meanwhile
  assert.deepEqual(wire.messages.slice(before).map((m) => m.subject).filter((s) => !s.startsWith("$KV.muster_alive.") && !s.startsWith("$KV.muster_puppet_runs.")), [], "nothing was sent");
  return r.stderr;
}

test("find: an unknown data plugin is refused naming the known ones; nothing is sent", async () => {
  const err = await refusedUnsent(["find", "--config", without, "-S", "nosuchplugin('x').y=1"]);
  assert.match(err, /^muster: -S: unknown data plugin 'nosuchplugin' \(known data plugins: agent, fact, provision, puppet; declare another as data\/NAME\.json in a ddl_directories entry of the client config\) at column 1\n {2}nosuchplugin\('x'\)\.y=1\n {2}\^\n$/);
});

test("an unknown field of a known plugin is refused naming its fields, on the broadcast, registry and RPC paths", async () => {
  for (const args of [
    ["find", "--config", without],
    ["find", "--config", without, "--dm", "registry"],
    ["ping", "--config", without],
    ["rpc", "rpcutil", "ping", "--config", without],
    ["registry", "query", "--config", without],
  ]) {
    const err = await refusedUnsent([...args, "-S", "provision().nosuch=1"]);
    assert.match(err, /-S: provision\(\) has no field 'nosuch' \(its fields: locked, disabled\) at column 13/, args.join(" "));
  }
  const registry = await refusedUnsent(["find", "--config", without, "--dm", "registry", "-S", "nosuchplugin('x').y=1"]);
  assert.match(registry, /unknown data plugin 'nosuchplugin'/, "the unknown plugin is named, not the registry's limits");
});

test("a plugin only some nodes have: usable once the client has its DDL, refused without it", async () => {
  const sent = wire.messages.length;
  const found = await runCli(["find", "--config", withDDL, "-S", "rack().row=3"], { env });
  assert.equal(found.code, 0, found.stderr);
  await nc.flush();
  assert.ok(wire.messages.slice(sent).some((m) => m.subject === "muster.broadcast.agent.discovery"), "the recorder sees what a command sends");
  assert.equal(found.stdout, "a.racked.test\n", "the node without the plugin does not match");
  const not = await runCli(["find", "--config", withDDL, "-S", "not rack().row=3"], { env });
  assert.equal(not.stdout, "b.racked.test\nplain.test\n");
  const field = await refusedUnsent(["find", "--config", withDDL, "-S", "rack().aisle=3"]);
  assert.match(field, /rack\(\) has no field 'aisle' \(its fields: row, slot\)/);
  const unknown = await refusedUnsent(["find", "--config", without, "-S", "rack().row=3"]);
  assert.match(unknown, /unknown data plugin 'rack'/);
  const registry = await refusedUnsent(["find", "--config", withDDL, "--dm", "registry", "-S", "rack().row=3"]);
  assert.match(registry, /the data plugin rack\(\) runs on the node.*use broadcast discovery/, "known, but the registry cannot answer it");
});
