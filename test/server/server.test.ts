import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import type { NatsConnection } from "@nats-io/transport-node";
import { MusterClient } from "../../src/client/client.js";
import { buildFilter, type FilterOptions } from "../../src/filter/index.js";
import { decodeJson } from "../../src/protocol/envelope.js";
import { generateSigningKey } from "../../src/protocol/signing.js";
import { Status } from "../../src/protocol/status.js";
import { cleanEnv, connectNats, eventually, record, runCli, spawnMuster, startBroker, startMusterServer, tempDir, type Broker, type Recorder, type TestServer } from "../support/collective.js";

// A real `muster server` process (facter off, facts and classes from files) on a real nats-server.

const tmp = tempDir("server");
process.env.MUSTER_CONFIG_DIR = join(tmp.path, "config");
const env = cleanEnv(process.env.MUSTER_CONFIG_DIR);

const N1 = {
  identity: "n1.example.net",
  facts: { country: "de", role: "web", cpus: 8, os: { family: "Debian", release: { major: "12" } }, tags: ["a", "b"] },
  classes: ["base", "apache", "apache::mod_ssl"],
};
const N2 = {
  identity: "n2.example.net",
  facts: { country: "us", role: "db", cpus: 2, os: { family: "RedHat", release: { major: "9" } } },
  classes: ["base", "postgresql"],
};

let broker: Broker;
let nc: NatsConnection;
let client: MusterClient;
let lifecycle: Recorder;
let registration: Recorder;
const servers: TestServer[] = [];

before(async () => {
  broker = await startBroker();
  nc = await connectNats(broker.url);
  lifecycle = record(nc, "muster.lifecycle.>");
  registration = record(nc, "muster.registration");
  await nc.flush();
  client = await MusterClient.connect({ nc });
  const [s1, s2] = await Promise.all([
    startMusterServer({ ...N1, broker: broker.url, config: { facts: { refresh_interval: 0.2 }, registration: { interval: 1, splay: false } } }, { dir: tmp.path, env }),
    startMusterServer({ ...N2, broker: broker.url, config: { registration: { interval: 0 }, max_message_bytes: 2 * 1024 * 1024 } }, { dir: tmp.path, env }),
  ]);
  servers.push(s1, s2);
});

after(async () => {
  await Promise.all(servers.map((s) => s.stop()));
  await client?.close();
  await nc?.drain().catch(() => undefined);
  await broker?.dispose();
  tmp.remove();
});

async function find(f: FilterOptions): Promise<string[]> {
  // no reply at all ends at the timeout; the first reply ends discovery after a short quiet window
  return client.discover({ filter: buildFilter(f), timeoutMs: 1500 });
}

async function call(identity: string, action: string, data: Record<string, unknown> = {}) {
  const r = await client.call("rpcutil", action, data, { nodes: [identity], timeoutMs: 5000 });
  assert.equal(r.replies.length, 1, `no reply from ${identity} to rpcutil#${action}`);
  return r.replies[0]!;
}

describe("discovery", () => {
  test("an empty filter finds every node", async () => {
    assert.deepEqual(await find({}), [N1.identity, N2.identity]);
  });

  test("by fact: equality, comparison, regex and dotted paths", async () => {
    assert.deepEqual(await find({ fact: ["country=de"] }), [N1.identity]);
    assert.deepEqual(await find({ fact: ["cpus>=4"] }), [N1.identity]);
    assert.deepEqual(await find({ fact: ["cpus<4"] }), [N2.identity]);
    assert.deepEqual(await find({ fact: ["country=~/^(de|us)$/"] }), [N1.identity, N2.identity]);
    assert.deepEqual(await find({ fact: ["os.family=RedHat"] }), [N2.identity]);
    assert.deepEqual(await find({ fact: ["country=fr"] }), []);
  });

  test("by class, exact and regex; several are ANDed", async () => {
    assert.deepEqual(await find({ class: ["apache"] }), [N1.identity]);
    assert.deepEqual(await find({ class: ["/^postgres/"] }), [N2.identity]);
    assert.deepEqual(await find({ class: ["base"] }), [N1.identity, N2.identity]);
    assert.deepEqual(await find({ class: ["base", "postgresql"] }), [N2.identity]);
  });

  test("by identity, exact and regex; several are ORed", async () => {
    assert.deepEqual(await find({ identity: [N2.identity] }), [N2.identity]);
    assert.deepEqual(await find({ identity: ["/^n1\\./"] }), [N1.identity]);
    assert.deepEqual(await find({ identity: [N1.identity, N2.identity] }), [N1.identity, N2.identity]);
  });

  test("by agent", async () => {
    assert.deepEqual(await find({ agent: ["rpcutil"] }), [N1.identity, N2.identity]);
    assert.deepEqual(await find({ agent: ["puppet_nope"] }), []);
  });

  test("by compound expression, with data plugins", async () => {
    assert.deepEqual(await find({ select: ["country=de and apache"] }), [N1.identity]);
    assert.deepEqual(await find({ select: ["not country=de"] }), [N2.identity]);
    assert.deepEqual(await find({ select: ["(country=us or cpus>4) and base"] }), [N1.identity, N2.identity]);
    assert.deepEqual(await find({ select: ["fact('os.family').value=Debian"] }), [N1.identity]);
    assert.deepEqual(await find({ select: ["agent('rpcutil').present=true and postgresql"] }), [N2.identity]);
  });

  test("kinds of filter are ANDed", async () => {
    assert.deepEqual(await find({ fact: ["country=de"], class: ["postgresql"] }), []);
    assert.deepEqual(await find({ fact: ["role=db"], identity: ["/example/"], agent: ["rpcutil"] }), [N2.identity]);
  });
});

describe("rpcutil", () => {
  test("ping answers with the node's time", async () => {
    const t0 = Date.now();
    const r = await call(N1.identity, "ping");
    assert.equal(r.statuscode, Status.OK);
    assert.equal(r.sender, N1.identity);
    assert.ok(typeof r.data.pong === "number" && r.data.pong >= t0 && r.data.pong <= Date.now(), `pong ${String(r.data.pong)}: the node's clock (this machine's) while the call ran`);
  });

  test("inventory lists agents, facts, classes, collectives and data plugins", async () => {
    const r = await call(N1.identity, "inventory");
    assert.equal(r.statuscode, Status.OK);
    assert.deepEqual(r.data.agents, ["discovery", "rpcutil"]);
    assert.deepEqual(r.data.classes, [...N1.classes].sort());
    assert.equal((r.data.facts as Record<string, unknown>).country, "de");
    assert.deepEqual(r.data.collectives, ["muster"]);
    assert.equal(r.data.main_collective, "muster");
    assert.deepEqual(r.data.data_plugins, ["agent", "fact"]);
    assert.equal(typeof r.data.version, "string");
  });

  test("get_fact reaches into structured facts with a dotted path; a missing fact is null", async () => {
    assert.deepEqual((await call(N1.identity, "get_fact", { fact: "os.release.major" })).data, { fact: "os.release.major", value: "12" });
    assert.deepEqual((await call(N1.identity, "get_fact", { fact: "tags" })).data.value, ["a", "b"]);
    assert.equal((await call(N1.identity, "get_fact", { fact: "no.such.fact" })).data.value, null);
  });

  test("get_fact finds only the node's own facts, not properties every object inherits", async () => {
    for (const fact of ["constructor", "toString", "__proto__", "os.constructor", "hasOwnProperty"]) {
      const r = await call(N1.identity, "get_fact", { fact });
      assert.equal(r.statuscode, Status.OK);
      assert.deepEqual(r.data, { fact, value: null }, `get_fact ${fact}`);
    }
  });

  test("get_fact refuses an input its DDL does not allow, before the action runs", async () => {
    const missing = await call(N1.identity, "get_fact", {});
    assert.equal(missing.statuscode, Status.MissingData);
    const invalid = await call(N1.identity, "get_fact", { fact: "a b; rm -rf" });
    assert.equal(invalid.statuscode, Status.InvalidData);
  });

  test("get_facts returns several values", async () => {
    const r = await call(N2.identity, "get_facts", { facts: "country, os.family,nope" });
    assert.deepEqual(r.data.values, { country: "us", "os.family": "RedHat", nope: null });
  });

  test("agent_inventory describes every loaded agent", async () => {
    const r = await call(N1.identity, "agent_inventory");
    const agents = r.data.agents as { agent: string; version: string; timeout: number }[];
    assert.deepEqual(agents.map((a) => a.agent).sort(), ["discovery", "rpcutil"]);
    assert.ok(agents.every((a) => typeof a.version === "string" && a.timeout > 0));
  });

  test("daemon_stats counts the requests this node handled", async () => {
    const before = (await call(N2.identity, "daemon_stats")).data as Record<string, number>;
    await call(N2.identity, "ping");
    await call(N2.identity, "get_fact", { fact: "bad fact!" });
    const now = (await call(N2.identity, "daemon_stats")).data as Record<string, number>;
    assert.equal(now.total! - before.total!, 3);
    assert.equal(now.validated! - before.validated!, 3);
    assert.equal(now.passed! - before.passed!, 3);
    assert.equal(now.replies! - before.replies!, 3); // the first daemon_stats, ping, get_fact
    assert.equal(now.invalid_input! - before.invalid_input!, 1);
    assert.ok(now.uptime! >= 0 && now.rss! > 0 && now.starttime! <= Date.now());
    assert.deepEqual(now.agents, ["discovery", "rpcutil"]);
  });

  test("collective_info names the collectives", async () => {
    assert.deepEqual((await call(N1.identity, "collective_info")).data, { collectives: ["muster"], main_collective: "muster" });
  });

  test("get_data queries the fact and agent data plugins, and refuses unknown ones", async () => {
    assert.deepEqual((await call(N1.identity, "get_data", { source: "fact", query: "os.family" })).data, { data: { value: "Debian" } });
    assert.deepEqual((await call(N1.identity, "get_data", { source: "fact", query: "nope" })).data, { data: null });
    const agent = (await call(N1.identity, "get_data", { source: "agent", query: "rpcutil" })).data.data as Record<string, unknown>;
    assert.equal(agent.present, true);
    assert.equal(agent.version, "1.0.0");
    assert.equal(((await call(N1.identity, "get_data", { source: "agent", query: "nope" })).data.data as Record<string, unknown>).present, false);
    const unknown = await call(N1.identity, "get_data", { source: "nosuch" });
    assert.equal(unknown.statuscode, Status.InvalidData);
    assert.match(unknown.statusmsg, /agent, fact/);
  });

  test("an unknown action and an unknown agent get status 2 on a direct request", async () => {
    const r = await client.call("rpcutil", "nope", {}, { nodes: [N1.identity], timeoutMs: 5000 });
    assert.equal(r.replies[0]?.statuscode, Status.UnknownAction);
    const a = await client.call("nosuchagent", "x", {}, { nodes: [N1.identity], timeoutMs: 5000 });
    assert.equal(a.replies[0]?.statuscode, Status.UnknownAction);
  });

  test("a direct request whose filter the node does not match is answered with status 1", async () => {
    const r = await client.call("rpcutil", "ping", {}, { nodes: [N1.identity], filter: buildFilter({ fact: ["country=us"] }), timeoutMs: 5000 });
    assert.equal(r.replies[0]?.statuscode, Status.Aborted);
    assert.match(r.replies[0]!.statusmsg, /does not match/);
  });
});

describe("message size", () => {
  test("max_message_bytes above the 1 MiB default lets bigger requests through, and still refuses beyond it", async () => {
    const pad = "x".repeat(1536 * 1024);
    // n2 allows 2 MiB: the request decodes and reaches DDL validation (ping takes no inputs)
    const big = await client.call("rpcutil", "ping", { pad }, { nodes: [N2.identity], timeoutMs: 10_000 });
    assert.equal(big.replies[0]?.statuscode, Status.InvalidData);
    assert.match(big.replies[0]!.statusmsg, /unknown input 'pad'/);
    // n1 has the default 1 MiB
    const refused = await client.call("rpcutil", "ping", { pad }, { nodes: [N1.identity], timeoutMs: 10_000 });
    assert.equal(refused.replies[0]?.statuscode, Status.InvalidData);
    assert.match(refused.replies[0]!.statusmsg, /exceeds the limit of 1048576/);
    const tooBig = await client.call("rpcutil", "ping", { pad: pad + pad }, { nodes: [N2.identity], timeoutMs: 10_000 });
    assert.match(tooBig.replies[0]!.statusmsg, /exceeds the limit of 2097152/);
  });
});

describe("metadata, registration and lifecycle", () => {
  test("a changed facts file is picked up on the next refresh", async () => {
    const s1 = servers[0]!;
    writeFileSync(s1.factsFile, toYaml({ ...N1.facts, country: "fr", added: "yes" }));
    try {
      await eventually(async () => ((await call(N1.identity, "get_fact", { fact: "added" })).data.value === "yes" ? true : undefined), 10_000, "new fact visible");
      assert.deepEqual(await find({ fact: ["country=fr"] }), [N1.identity]);
    } finally {
      writeFileSync(s1.factsFile, toYaml(N1.facts));
      await eventually(async () => ((await call(N1.identity, "get_fact", { fact: "country" })).data.value === "de" ? true : undefined), 10_000, "facts restored");
    }
  });

  test("registration messages carry the node's metadata on <collective>.registration", async () => {
    const m = await registration.waitFor((m) => (decodeJson(m.data) as { identity?: string }).identity === N1.identity, 10_000, "registration from n1");
    const body = decodeJson(m.data) as Record<string, unknown>;
    assert.deepEqual(body.classes, [...N1.classes].sort());
    assert.deepEqual(body.agents, ["discovery", "rpcutil"]);
    assert.deepEqual(body.collectives, ["muster"]);
    assert.equal((body.facts as Record<string, unknown>).role, "web");
    assert.equal(typeof body.time, "number");
    // registration interval 0 turns it off (n2)
    assert.ok(!registration.messages.some((m) => (decodeJson(m.data) as { identity?: string }).identity === N2.identity));
  });

  test("startup events are published on muster.lifecycle.startup.server", async () => {
    for (const s of [N1, N2]) {
      const m = await lifecycle.waitFor((m) => m.subject === "muster.lifecycle.startup.server" && (decodeJson(m.data) as { identity?: string }).identity === s.identity, 5000, `startup of ${s.identity}`);
      const ev = decodeJson(m.data) as Record<string, unknown>;
      assert.equal(ev.type, "startup");
      assert.equal(ev.component, "server");
      assert.deepEqual(ev.collectives, ["muster"]);
    }
  });

  test("SIGTERM stops a server cleanly: exit 0, a shutdown event, no more answers", async () => {
    const s3 = await startMusterServer({ identity: "n3.example.net", broker: broker.url, facts: { country: "nl" }, config: { collectives: ["muster", "eu"] } }, { dir: tmp.path, env });
    servers.push(s3);
    assert.deepEqual(await find({ identity: ["n3.example.net"] }), ["n3.example.net"]);
    // a sub-collective: only its members answer there
    const eu = await MusterClient.connect({ nc, collective: "eu" });
    assert.deepEqual(await eu.discover({ timeoutMs: 1500 }), ["n3.example.net"]);
    const info = await eu.call("rpcutil", "collective_info", {}, { nodes: ["n3.example.net"], timeoutMs: 5000 });
    assert.deepEqual(info.replies[0]?.data, { collectives: ["muster", "eu"], main_collective: "muster" });
    const { code, signal } = await s3.stop();
    assert.equal(signal, null, `server died of ${signal}: ${s3.stderr()}`);
    assert.equal(code, 0, s3.stderr());
    const m = await lifecycle.waitFor((m) => m.subject === "muster.lifecycle.shutdown.server" && (decodeJson(m.data) as { identity?: string }).identity === "n3.example.net", 5000, "shutdown of n3");
    assert.equal((decodeJson(m.data) as { type: string }).type, "shutdown");
    assert.deepEqual(await find({ identity: ["n3.example.net"] }), []);
    assert.doesNotMatch(s3.stderr(), /unexpected|unhandled|Error:/i);
  });
});

describe("trust", () => {
  test("a node with configured keys trusts those callers and no longer the local user", async (t) => {
    const dir = join(tmp.path, "trusted");
    mkdirSync(dir, { recursive: true });
    const alice = generateSigningKey("user=alice").key;
    writeFileSync(join(dir, "user=alice.pub"), `${alice.publicKey}\n`);
    const srv = await startMusterServer({ identity: "guarded.example.net", broker: broker.url, config: { security: { trusted_keys_dir: dir } } }, { dir: tmp.path, env });
    t.after(() => srv.stop());
    const asAlice = await MusterClient.connect({ nc, key: alice });
    assert.equal((await asAlice.call("rpcutil", "ping", {}, { nodes: ["guarded.example.net"], timeoutMs: 5000 })).replies[0]?.statuscode, Status.OK);
    const asLocal = await client.call("rpcutil", "ping", {}, { nodes: ["guarded.example.net"], timeoutMs: 5000 });
    assert.equal(asLocal.replies[0]?.statuscode, Status.Aborted);
    assert.match(asLocal.replies[0]!.statusmsg, /not trusted/);
    // alice's key under another name is not alice
    const impostor = await MusterClient.connect({ nc, key: { ...alice, name: "user=root" } });
    assert.equal((await impostor.call("rpcutil", "ping", {}, { nodes: ["guarded.example.net"], timeoutMs: 5000 })).replies[0]?.statuscode, Status.Aborted);
  });

  test("a trusted key that is not a key stops the server with the file named", async () => {
    const dir = join(tmp.path, "badkeys");
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "user=bob.pub"), "not a key\n");
    const file = join(tmp.path, "badkeys.yaml");
    writeFileSync(file, toYaml({ brokers: [broker.url], facts: { facter: false }, security: { trusted_keys_dir: dir } }));
    const r = await runCli(["server", "--config", file], { env });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /trusted key 'user=bob' in .*user=bob\.pub is not an ed25519 public key/);
    assert.doesNotMatch(r.stderr, /unexpected error/);
  });
});

describe("configuration errors", () => {
  test("a config file with a bad key or value says which and exits 1", async () => {
    const file = join(tmp.path, "bad.yaml");
    writeFileSync(file, toYaml({ identity: "bad id with spaces", facts: { facter: "yes" }, colectives: ["x"] }));
    const r = await runCli(["server", "--config", file], { env });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /server config .*bad\.yaml is invalid/);
    assert.match(r.stderr, /identity/);
    assert.match(r.stderr, /facts\.facter/);
    assert.match(r.stderr, /colectives/);
    assert.doesNotMatch(r.stderr, /at .*\.js:\d+/, "a stack trace is not a clear error");
  });

  test("--identity overrides the file and obeys the same rules", async (t) => {
    const file = join(tmp.path, "plain.yaml");
    writeFileSync(file, toYaml({ brokers: [broker.url], facts: { facter: false }, log: { level: "warn" } }));
    const bad = await runCli(["server", "--config", file, "--identity", "bad id>"], { env });
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /identity: identity may hold/);
    const p = spawnMuster(["server", "--config", file, "--identity", "override.example.net"], { env });
    t.after(() => p.stop());
    await p.waitForLine(/override\.example\.net ready/, 20_000);
    assert.deepEqual(await find({ identity: ["override.example.net"] }), ["override.example.net"]);
    assert.equal((await p.stop()).code, 0);
  });

  test("a config file that is not YAML, or does not exist, exits 1 with the path", async () => {
    const file = join(tmp.path, "garbled.yaml");
    writeFileSync(file, "identity: [unclosed\n  : :");
    const r = await runCli(["server", "--config", file], { env });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /garbled\.yaml is not valid YAML/);
    const missing = await runCli(["server", "--config", join(tmp.path, "absent.yaml")], { env });
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /absent\.yaml does not exist/);
  });
});

describe("broker outages", () => {
  test("a server started before its broker connects once the broker comes up", async (t) => {
    const late = await startBroker({ start: false });
    let srv: TestServer | undefined;
    t.after(async () => {
      await srv?.stop();
      await late.dispose();
    });
    srv = await startMusterServer({ identity: "early.example.net", broker: late.url }, { dir: tmp.path, env, waitReady: false });
    // it keeps trying instead of giving up: still running while nothing listens
    await assert.rejects(srv.waitForLine(/ready/, 1500), /did not print/);
    assert.equal(srv.child.exitCode, null, srv.stderr());
    await late.start();
    await srv.waitForLine(/ready/, 20_000);
    const c = await MusterClient.connect({ brokers: [late.url] });
    t.after(() => c.close());
    const r = await c.call("rpcutil", "ping", {}, { nodes: ["early.example.net"], timeoutMs: 5000 });
    assert.equal(r.replies[0]?.statuscode, Status.OK);
  });

  test("after a broker restart on the same port the server answers again", async (t) => {
    const b = await startBroker();
    let srv: TestServer | undefined;
    t.after(async () => {
      await srv?.stop();
      await b.dispose();
    });
    srv = await startMusterServer({ identity: "survivor.example.net", broker: b.url }, { dir: tmp.path, env });
    const ping = async () => {
      const c = await MusterClient.connect({ brokers: [b.url] });
      try {
        const r = await c.call("rpcutil", "ping", {}, { nodes: ["survivor.example.net"], timeoutMs: 1000 });
        return r.replies[0]?.statuscode === Status.OK ? true : undefined;
      } finally {
        await c.close();
      }
    };
    assert.equal(await ping(), true);
    await b.stop();
    await b.start();
    await eventually(ping, 30_000, "server answering after the broker restart");
    assert.equal(srv.child.exitCode, null);
  });

  test("SIGTERM stops a server promptly even while its broker is down", async (t) => {
    const b = await startBroker();
    t.after(() => b.dispose());
    const srv = await startMusterServer({ identity: "orphan.example.net", broker: b.url }, { dir: tmp.path, env });
    t.after(() => srv.stop());
    await b.stop();
    // without a bound on the final flush/drain the server waits for the broker forever and is killed
    const { code, signal } = await srv.stop(8000);
    assert.equal(signal, null, `the server died of ${signal} instead of exiting on SIGTERM while disconnected: ${srv.stderr()}`);
    assert.equal(code, 0, srv.stderr());
  });
});
