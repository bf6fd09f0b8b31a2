import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import type { NatsConnection } from "@nats-io/transport-node";
import { applyLimit } from "../../src/client/limit.js";
import { decodeRequest } from "../../src/protocol/envelope.js";
import { cleanEnv, connectNats, examplesDir, record, runCli, spawnMuster, startBroker, startMusterServer, tempDir, type Broker, type CliResult, type MusterProcess, type TestServer } from "../support/collective.js";

// The `muster` command line against an emulated fleet (`muster emulate --fleet`) and one real
// server with the example external agent, all on one nats-server.

const tmp = tempDir("cli");
const configDir = join(tmp.path, "config");
process.env.MUSTER_CONFIG_DIR = configDir;

const fleet = {
  nodes: [
    { identity: "web1.de.example", facts: { country: "de", role: "web", cpus: 4 }, classes: ["web", "base"] },
    { identity: "web2.de.example", facts: { country: "de", role: "web", cpus: 8 }, classes: ["web", "base"] },
    { identity: "web3.us.example", facts: { country: "us", role: "web", cpus: 2 }, classes: ["web", "base"] },
    { identity: "db1.de.example", facts: { country: "de", role: "db", cpus: 16 }, classes: ["db", "base"] },
    { identity: "db2.us.example", facts: { country: "us", role: "db", cpus: 16 }, classes: ["db", "base"] },
    { identity: "cache1.fr.example", facts: { country: "fr", role: "cache", cpus: 2 }, classes: ["cache", "base"] },
  ],
};
const ECHO = "echo.example.net";
const emulated = fleet.nodes.map((n) => n.identity).sort();
const everyone = [...emulated, ECHO].sort();
const echoDDL = join(examplesDir, "agents", "echo.json");

let broker: Broker;
let emu: MusterProcess;
let server: TestServer;
let nc: NatsConnection;
let env: NodeJS.ProcessEnv;

before(async () => {
  broker = await startBroker();
  env = cleanEnv(configDir, { MUSTER_BROKER: broker.url });
  const fleetFile = join(tmp.path, "fleet.yaml");
  writeFileSync(fleetFile, toYaml(fleet));
  emu = spawnMuster(["emulate", "--fleet", fleetFile], { env, cwd: tmp.path });
  const [, srv] = await Promise.all([
    emu.waitForLine(/ready/, 20_000),
    startMusterServer({ identity: ECHO, broker: broker.url, facts: { country: "nl", role: "tools", cpus: 1 }, classes: ["tools"], config: { agents: { directory: join(examplesDir, "agents") }, registration: { interval: 0 } } }, { dir: tmp.path, env }),
  ]);
  server = srv;
  nc = await connectNats(broker.url);
});

after(async () => {
  await Promise.all([emu?.stop(), server?.stop()]);
  await nc?.drain().catch(() => undefined);
  await broker?.dispose();
  tmp.remove();
});

function muster(...args: string[]): Promise<CliResult> {
  return runCli(args, { env, cwd: tmp.path });
}

function lines(s: string): string[] {
  return s.split("\n").filter(Boolean);
}

function json<T = unknown>(r: CliResult): T {
  try {
    return JSON.parse(r.stdout) as T;
  } catch {
    throw new Error(`not JSON (exit ${r.code}):\n${r.stdout}\nstderr: ${r.stderr}`);
  }
}

interface RpcJson {
  replies: { sender: string; statuscode: number; statusmsg: string; data: Record<string, unknown> }[];
  aggregates: unknown[];
  stats: { discovered: number; responded: number; ok: number; failed: number; noResponse: string[] };
}

const senders = (r: RpcJson) => r.replies.map((x) => x.sender).sort();

describe("find", () => {
  test("prints every identity, sorted, one per line; --json prints an array", async () => {
    const r = await muster("find");
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, everyone.map((n) => `${n}\n`).join(""));
    const j = await muster("find", "--json");
    assert.deepEqual(json(j), everyone);
  });

  test("filters: -F -C -I -A -W -S", async () => {
    const cases: [string[], string[]][] = [
      [["-F", "country=de"], ["db1.de.example", "web1.de.example", "web2.de.example"]],
      [["-F", "cpus>=8", "-F", "role=web"], ["web2.de.example"]],
      [["-C", "db"], ["db1.de.example", "db2.us.example"]],
      [["--wc", "/^cach/"], ["cache1.fr.example"]],
      [["-I", "web3.us.example", "-I", "/^db1/"], ["db1.de.example", "web3.us.example"]],
      [["-A", "echo"], [ECHO]],
      [["-W", "country=us web"], ["web3.us.example"]],
      [["-S", "(country=fr or country=nl) and not tools"], ["cache1.fr.example"]],
      [["-S", "agent('echo').present=true"], [ECHO]],
    ];
    const results = await Promise.all(cases.map(([args]) => muster("find", ...args)));
    cases.forEach(([args, want], i) => {
      const r = results[i]!;
      assert.equal(r.code, 0, `find ${args.join(" ")}: ${r.stderr}`);
      assert.deepEqual(lines(r.stdout), want, `find ${args.join(" ")}`);
    });
  });

  test("nothing matching exits 1 with empty output", async () => {
    const r = await muster("find", "-F", "country=zz", "--dt", "0.5");
    assert.equal(r.code, 1);
    assert.equal(r.stdout, "");
    const j = await muster("find", "-F", "country=zz", "--dt", "0.5", "--json");
    assert.equal(j.code, 1);
    assert.deepEqual(json(j), []);
  });
});

describe("ping, facts, inventory", () => {
  test("ping lists every node with its time and a summary", async () => {
    const r = await muster("ping");
    assert.equal(r.code, 0, r.stderr);
    const replies = lines(r.stdout).filter((l) => /time=\d+\.\d+ ms$/.test(l));
    assert.deepEqual(replies.map((l) => l.split(/\s+/)[0]).sort(), everyone);
    assert.match(r.stdout, new RegExp(`${everyone.length} replies min: `));
    const j = json<{ node: string; ms: number }[]>(await muster("ping", "--json", "-C", "db"));
    assert.deepEqual(j.map((x) => x.node).sort(), ["db1.de.example", "db2.us.example"]);
    assert.ok(j.every((x) => typeof x.ms === "number"));
    const none = await muster("ping", "-C", "nosuchclass", "--dt", "0.5");
    assert.equal(none.code, 1);
  });

  test("facts reports how a fact's values are distributed", async () => {
    const r = await muster("facts", "country");
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /Report for fact: country/);
    assert.match(r.stdout, /de\s+found 3 times/);
    assert.match(r.stdout, /us\s+found 2 times/);
    assert.match(r.stdout, /fr\s+found 1 times/);
    const v = await muster("facts", "role", "-F", "country=us", "--verbose");
    assert.match(v.stdout, /db\s+found 1 times\n\s+db2\.us\.example/);
    assert.doesNotMatch(v.stdout, /de\.example/);
  });

  test("inventory shows one node's agents, classes and facts", async () => {
    const r = await muster("inventory", "db1.de.example");
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /Inventory for db1\.de\.example/);
    assert.match(r.stdout, /Agents:\n\s+discovery\n\s+rpcutil/);
    assert.match(r.stdout, /Classes:\n\s+base\n\s+db\n/);
    assert.match(r.stdout, /country => de/);
    const echo = await muster("inventory", ECHO);
    assert.match(echo.stdout, /Agents:\n\s+discovery\n\s+echo\n\s+rpcutil/);
    const ghost = await muster("inventory", "ghost.example");
    assert.equal(ghost.code, 1);
  });
});

describe("rpc", () => {
  test("calls an action and prints replies, aggregates and stats; --json for scripts", async () => {
    const r = await muster("rpc", "rpcutil", "get_fact", "fact=country", "-C", "web");
    assert.equal(r.code, 0, r.stderr);
    // no node-key directory on this broker: every reply is kept, marked and counted as unverified
    assert.match(r.stdout, /web1\.de\.example \(unverified\)\n\s+Fact: country\n\s+Value: de/);
    assert.match(r.stdout, /Unverified: 3 of 3 replies \(unverified\): no known key for their sender/);
    assert.match(r.stdout, /Summary of Value:/);
    assert.match(r.stdout, /Nodes: 3 \/ 3/);
    assert.match(r.stdout, /Pass \/ Fail: 3 \/ 0/);
    const j = json<RpcJson>(await muster("rpc", "rpcutil", "get_fact", "fact=cpus", "-F", "country=us", "--json"));
    assert.deepEqual(senders(j), ["db2.us.example", "web3.us.example"]);
    assert.deepEqual(j.replies.map((x) => x.data.value).sort(), [16, 2]);
    assert.equal(j.stats.ok, 2);
    assert.ok(j.aggregates.length > 0);
  });

  test("key=value inputs are converted to the DDL's types (--ddl FILE, or ddl_directories)", async () => {
    const j = json<RpcJson>(await muster("rpc", "echo", "echo", "message=hello world", "count=3", "loud=true", "ratio=0.5", "color=blue", "--ddl", echoDDL, "--json"));
    assert.equal(j.replies.length, 1);
    const d = j.replies[0]!.data;
    assert.deepEqual(d.received, { message: "hello world", count: 3, loud: true, ratio: 0.5, color: "blue" });
    assert.deepEqual(d.types, { message: "string", count: "number", loud: "boolean", ratio: "number", color: "string" });
    const cfg = join(tmp.path, "client.yaml");
    writeFileSync(cfg, toYaml({ ddl_directories: [join(examplesDir, "agents")] }));
    const viaConfig = json<RpcJson>(await muster("rpc", "echo", "echo", "message=x", "loud=false", "--config", cfg, "--json"));
    assert.deepEqual(viaConfig.replies[0]!.data.received, { message: "x", count: 1, loud: false });
  });

  test("an input that does not convert or validate is refused before anything is sent", async () => {
    const rec = record(nc, "muster.>");
    await nc.flush();
    const refused = await Promise.all([["count=three"], ["loud=maybe"], ["color=purple"], ["nosuchinput=1"]].map(async (args) => [args, await muster("rpc", "echo", "echo", "message=x", ...args, "--ddl", echoDDL)] as const));
    for (const [args, r] of refused) {
      assert.equal(r.code, 1, `${args.join(" ")}: ${r.stderr}`);
      assert.match(r.stderr, new RegExp(args[0]!.split("=")[0]!));
    }
    const missing = await muster("rpc", "echo", "echo", "--ddl", echoDDL);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /message/);
    await sentinel(rec);
  });

  test("--display ok|failed chooses which replies are printed", async () => {
    const nodes = join(tmp.path, "mixed.txt");
    writeFileSync(nodes, "web1.de.example\nweb3.us.example\n");
    // web3 does not match -F country=de: addressed directly, it answers with a failure
    const failed = await muster("rpc", "rpcutil", "ping", "--nodes", nodes, "-F", "country=de", "--display", "failed");
    assert.equal(failed.code, 2, failed.stderr);
    assert.match(failed.stdout, /web3\.us\.example\s*: .*does not match/);
    assert.doesNotMatch(failed.stdout, /^web1\.de\.example/m);
    const ok = await muster("rpc", "rpcutil", "ping", "--nodes", nodes, "-F", "country=de", "--display", "ok");
    assert.match(ok.stdout, /^web1\.de\.example \(unverified\)\n\s+Timestamp: \d+/m);
    assert.doesNotMatch(ok.stdout, /^web3\.us\.example/m);
    assert.match(ok.stdout, /Pass \/ Fail: 1 \/ 1/);
  });

  test("--batch N --batch-sleep S addresses the nodes N at a time", async () => {
    const rec = record(nc, "muster.node.>");
    await nc.flush();
    const r = await muster("rpc", "rpcutil", "ping", "-C", "base", "--batch", "2", "--batch-sleep", "0.1", "--json");
    assert.equal(r.code, 0, r.stderr);
    await nc.flush();
    rec.stop();
    assert.deepEqual(senders(json<RpcJson>(r)), emulated);
    const byRequest = new Map<string, string[]>();
    for (const m of rec.messages) {
      const id = decodeRequest(m.data).id;
      byRequest.set(id, [...(byRequest.get(id) ?? []), m.subject.slice("muster.node.".length)]);
    }
    assert.deepEqual([...byRequest.values()].map((v) => v.sort()), [emulated.slice(0, 2), emulated.slice(2, 4), emulated.slice(4, 6)]);
  });

  test("--limit N, N% and a seeded random selection that reproduces", async () => {
    const first = json<RpcJson>(await muster("rpc", "rpcutil", "ping", "-C", "base", "--limit", "2", "--json"));
    assert.deepEqual(senders(first), emulated.slice(0, 2));
    const pct = json<RpcJson>(await muster("rpc", "rpcutil", "ping", "-C", "base", "--limit", "50%", "--json"));
    assert.equal(pct.replies.length, 3);
    const seeded = ["rpc", "rpcutil", "ping", "-C", "base", "--limit", "3", "--limit-method", "random", "--limit-seed", "7", "--json"];
    const a = json<RpcJson>(await muster(...seeded));
    const b = json<RpcJson>(await muster(...seeded));
    assert.deepEqual(senders(a), senders(b));
    assert.deepEqual(senders(a), applyLimit(emulated, { count: 3, method: "random", seed: 7 }));
  });
});

describe("exit codes", () => {
  test("0 when every node answered OK", async () => {
    assert.equal((await muster("rpc", "rpcutil", "ping")).code, 0);
  });

  test("1 when discovery found nothing (and nothing is sent)", async () => {
    const r = await muster("rpc", "rpcutil", "ping", "-F", "country=zz", "--dt", "0.5");
    assert.equal(r.code, 1);
    assert.match(r.stderr, /did not discover any nodes/);
  });

  test("2 when some node failed", async () => {
    const r = await muster("rpc", "echo", "fail", "code=4", "message=disk full", "--ddl", echoDDL);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stdout, /echo\.example\.net\s*: disk full/);
  });

  test("2 when a flatfile names a node that does not answer beside one that does", async () => {
    const nodes = join(tmp.path, "partial.txt");
    writeFileSync(nodes, "web1.de.example\nghost.example\n");
    // a timeout only the ghost runs out: web1 answers within it whatever the load
    const r = await muster("rpc", "rpcutil", "ping", "--nodes", nodes, "--timeout", "10");
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stdout, /No response from:\n\s+ghost\.example/);
  });

  test("3 when nodes were discovered but none answered in time", async () => {
    const r = await muster("rpc", "echo", "sleep", "seconds=5", "--ddl", echoDDL, "--timeout", "1");
    assert.equal(r.code, 3, r.stdout + r.stderr);
  });

  test("4 when a flatfile names only nodes that do not exist", async () => {
    const nodes = join(tmp.path, "ghosts.txt");
    writeFileSync(nodes, "ghost1.example\nghost2.example\n");
    const r = await muster("rpc", "rpcutil", "ping", "--dm", "flatfile", "--nodes", nodes, "--timeout", "1");
    assert.equal(r.code, 4, r.stdout + r.stderr);
  });

  test("64 for usage errors", async () => {
    const cases = [
      ["rpc"],
      ["find", "--no-such-option"],
      ["rpc", "rpcutil", "ping", "--limit", "lots"],
      ["rpc", "rpcutil", "ping", "--batch", "0"],
      ["rpc", "rpcutil", "ping", "--display", "sometimes"],
      ["find", "--dm", "flatfile"],
      ["find", "--dt", "-1"],
      ["no-such-command"],
    ];
    const results = await Promise.all(cases.map((args) => muster(...args)));
    for (const [i, args] of cases.entries()) {
      const r = results[i]!;
      assert.equal(r.code, 64, `muster ${args.join(" ")} exited ${r.code}: ${r.stderr}`);
      assert.notEqual(r.stderr.trim(), "", `muster ${args.join(" ")} printed no reason`);
    }
  });

  test("an unknown agent or action exits 1 and says what is known", async () => {
    const agent = await muster("rpc", "nosuchagent", "go");
    assert.equal(agent.code, 1);
    assert.match(agent.stderr, /no DDL for agent 'nosuchagent'.*rpcutil/);
    const action = await muster("rpc", "rpcutil", "nosuchaction");
    assert.equal(action.code, 1);
    assert.match(action.stderr, /has no action 'nosuchaction'.*get_fact/);
  });
});

/** A node writing its heartbeat or a Puppet run to its own key (protocol/heartbeat.ts), not a command. */
const isNodeHeartbeat = (subject: string) => subject.startsWith("$KV.muster_alive.") || subject.startsWith("$KV.muster_puppet_runs.");

/** Publishes a marker and waits for it: every message published before it has been seen by then. */
async function sentinel(rec: ReturnType<typeof record>): Promise<void> {
  nc.publish("muster.test.sentinel", new TextEncoder().encode("done"));
  await rec.waitFor((m) => m.subject === "muster.test.sentinel", 5000, "the sentinel");
  rec.stop();
  // the emulated nodes' own heartbeats go on meanwhile, and so may a node's late reply to an earlier
  // test's call (the echo that sleeps past its caller's timeout answers its inbox seconds later):
  // replies are no command's. A command that published would show its request's subject.
  const others = rec.messages.filter((m) => m.subject !== "muster.test.sentinel" && !isNodeHeartbeat(m.subject) && !m.subject.startsWith("_INBOX.")).map((m) => m.subject);
  assert.deepEqual(others, [], "the command published although it failed before connecting");
}

describe("bad filters", () => {
  test("print the filter with a caret at the column, exit 1 and send nothing", async () => {
    const rec = record(nc, ">");
    await nc.flush();
    const cases: [string[], RegExp, number][] = [
      [["find", "-S", "country=de and ("], /-S: .* at column 17/, 17],
      [["rpc", "rpcutil", "ping", "-F", "country"], /-F: .* at column 8/, 8],
      [["ping", "-S", "country=de or or web"], /-S: .* at column \d+/, 15],
      [["facts", "role", "-I", "/[unclosed/"], /-I: /, 0],
    ];
    const results = await Promise.all(cases.map(([args]) => muster(...args)));
    for (const [i, [args, message, column]] of cases.entries()) {
      const r = results[i]!;
      assert.equal(r.code, 1, `muster ${args.join(" ")}: ${r.stderr}`);
      assert.match(r.stderr, message);
      if (column > 0) {
        const [, source, caret] = r.stderr.split("\n");
        assert.ok(source && caret, r.stderr);
        assert.equal(caret!.indexOf("^") - source!.search(/\S/), column - 1, `caret under column ${column}:\n${r.stderr}`);
      }
    }
    await sentinel(rec);
  });
});
