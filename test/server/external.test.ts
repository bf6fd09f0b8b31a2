import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { MusterClient } from "../../src/client/client.js";
import { parseDDL } from "../../src/ddl/index.js";
import { buildFilter } from "../../src/filter/index.js";
import { Status } from "../../src/protocol/status.js";
import type { Reply } from "../../src/protocol/types.js";
import { cleanEnv, eventually, examplesDir, startBroker, startMusterServer, tempDir, type Broker, type TestServer } from "../support/collective.js";

// The example external agent (examples/agents/echo, Python) through a real server.

const tmp = tempDir("external");
process.env.MUSTER_CONFIG_DIR = join(tmp.path, "config");
const env = cleanEnv(process.env.MUSTER_CONFIG_DIR);
const ID = "ext.example.net";
const agentsDir = join(examplesDir, "agents");
const runLog = join(tmp.path, "echo-runs.log");
const ddl = parseDDL(JSON.parse(readFileSync(join(agentsDir, "echo.json"), "utf8")), "echo.json");

let broker: Broker;
let server: TestServer;
let client: MusterClient;

before(async () => {
  broker = await startBroker();
  server = await startMusterServer({ identity: ID, broker: broker.url, config: { agents: { directory: agentsDir }, plugins: { echo: { log: runLog } } } }, { dir: tmp.path, env });
  client = await MusterClient.connect({ brokers: [broker.url] });
});

after(async () => {
  await client?.close();
  await server?.stop();
  await broker?.dispose();
  tmp.remove();
});

/** Calls echo#action without client-side validation, so the server's own checks are what we see. */
async function echo(action: string, data: Record<string, unknown>): Promise<Reply> {
  const r = await client.call("echo", action, data, { nodes: [ID], timeoutMs: 60_000 });
  assert.equal(r.replies.length, 1, `no reply to echo#${action}`);
  return r.replies[0]!;
}

function runs(): { action: string; requestid: string }[] {
  if (!existsSync(runLog)) return [];
  return readFileSync(runLog, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { action: string; requestid: string });
}

test("the example DDL is valid and the server offers the agent", async () => {
  assert.equal(ddl.metadata.name, "echo");
  assert.deepEqual(await client.discover({ filter: buildFilter({ agent: ["echo"] }), timeoutMs: 3000 }), [ID]);
  const inv = await client.call("rpcutil", "agent_inventory", {}, { nodes: [ID], timeoutMs: 5000 });
  const agents = inv.replies[0]!.data.agents as { agent: string; version: string; timeout: number }[];
  assert.deepEqual(
    agents.find((a) => a.agent === "echo"),
    { agent: "echo", name: "echo", description: ddl.metadata.description, version: "1.0.0", timeout: 10, author: "muster", license: "Apache-2.0" },
  );
});

test("a valid request runs the executable and returns its data, DDL defaults applied", async () => {
  const r = await echo("echo", { message: "hello", count: 3, loud: true, ratio: 0.5, color: "red" });
  assert.equal(r.statuscode, Status.OK, r.statusmsg);
  assert.equal(r.data.message, "HELLO HELLO HELLO");
  assert.equal(r.data.identity, ID);
  assert.deepEqual(r.data.types, { message: "string", count: "number", loud: "boolean", ratio: "number", color: "string" });
  const d = await echo("echo", { message: "x" });
  assert.deepEqual(d.data.received, { message: "x", count: 1, loud: false });
  assert.ok(runs().some((x) => x.requestid === r.requestid));
});

test("the DDL is enforced before the executable runs", async () => {
  const before = runs().length;
  const cases: [Record<string, unknown>, number, RegExp][] = [
    [{}, Status.MissingData, /message/],
    [{ message: "x", count: "three" }, Status.InvalidData, /count/],
    [{ message: "x", loud: "yes" }, Status.InvalidData, /loud/],
    [{ message: "x", color: "purple" }, Status.InvalidData, /color/],
    [{ message: "x".repeat(2000) }, Status.InvalidData, /message/],
    [{ message: "x", extra: 1 }, Status.InvalidData, /extra/],
  ];
  for (const [data, status, reason] of cases) {
    const r = await echo("echo", data);
    assert.equal(r.statuscode, status, `${JSON.stringify(data).slice(0, 60)}: ${r.statusmsg}`);
    assert.match(r.statusmsg, reason);
  }
  const unknown = await echo("nosuchaction", {});
  assert.equal(unknown.statuscode, Status.UnknownAction);
  assert.equal(runs().length, before, "the executable ran for a request its DDL refuses");
});

test("an action running past the DDL timeout is aborted and its process killed", async () => {
  // Aborted and "timed out" is the timeout's reply: the sleep's own end would have answered OK.
  // (The example's timeout is 10 s, not 2: a Python agent starting on a loaded CI machine took over
  // 2 s, and the other actions here were aborted as if they had hung.)
  const r = await echo("sleep", { seconds: 30 });
  assert.equal(r.statuscode, Status.Aborted, r.statusmsg);
  assert.match(r.statusmsg, /timed out after 10s/);
  // the kill is sent with the reply; the process needs a moment to go
  const agentProcesses = () =>
    execFileSync("ps", ["-eo", "pid,ppid,stat,args"], { encoding: "utf8" })
      .split("\n")
      .filter((l) => l.includes(join(agentsDir, "echo")) && l.trim().split(/\s+/)[1] === String(server.child.pid) && !l.trim().split(/\s+/)[2]!.startsWith("Z"));
  await eventually(async () => (agentProcesses().length === 0 ? true : undefined), 5000, "the timed-out agent process to be killed");
  const ok = await echo("sleep", { seconds: 0.1 });
  assert.equal(ok.statuscode, Status.OK);
  assert.deepEqual(ok.data, { slept: 0.1 });
});

test("output that is not JSON is status 5", async () => {
  const r = await echo("garble", {});
  assert.equal(r.statuscode, Status.UnknownError);
  assert.match(r.statusmsg, /without a JSON reply/);
});

test("a non-zero statuscode from the agent is passed through with its message and data", async () => {
  for (const code of [1, 2, 3, 4, 5]) {
    const r = await echo("fail", { code, message: `disk ${code} is full` });
    assert.equal(r.statuscode, code);
    assert.equal(r.statusmsg, `disk ${code} is full`);
    assert.deepEqual(r.data, { detail: "as requested" });
  }
  const bogus = await echo("fail", { code: 42 });
  assert.equal(bogus.statuscode, Status.UnknownError);
  assert.match(bogus.statusmsg, /invalid statuscode 42/);
});
