import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { authorizationConfig } from "../../src/broker/auth.js";
import { openTimedOut, retryTransient } from "../../src/broker/bucket.js";
import { describeMeta, membersOutsideMeta } from "../../src/broker/meta-group.js";
import { metaViews } from "../../src/lab/site/reach.js";
import { brokerConfigProblem, brokerServerConfig, BROKER_PATHS } from "../../src/broker/server-config.js";
import { ensureCA, issueCert } from "../../src/security/pki.js";
import { freePort } from "../support/index.js";
import { runCli, tempDir } from "../support/collective.js";

// `muster broker config` is what a site's brokers run (docs/deploy.md#3-the-broker, and the lab's
// nats1..3.lab machines): three real nats-servers started from its text form a cluster whose
// routes are TLS, whose clients are mapped to users by certificate, and whose JetStream keeps a
// stream with three replicas that survives one member going away.

const tmp = tempDir("broker-config");
const members: ChildProcess[] = [];
let ncs: NatsConnection[] = [];

after(async () => {
  await Promise.all(ncs.map((nc) => nc.close().catch(() => undefined)));
  for (const m of members) m.kill("SIGKILL");
  tmp.remove();
});

test("bad options are refused with what they should be", () => {
  assert.match(brokerConfigProblem({ serverName: "nats 1" }) ?? "", /letters, digits/);
  assert.match(brokerConfigProblem({ serverName: "n1", routes: ["nats://x:6222", "nats-route://y:6222"] }) ?? "", /nats-route:\/\/HOST:PORT/);
  assert.match(brokerConfigProblem({ serverName: "n1", routes: ["nats-route://x:6222"] }) ?? "", /at least two members/);
  assert.match(brokerConfigProblem({ serverName: "n1", maxFileStore: "lots" }) ?? "", /a size/);
  assert.equal(brokerConfigProblem({ serverName: "n1", routes: ["nats-route://a:1", "nats-route://b:2"], maxFileStore: "10GB" }), undefined);
  // sync_interval: always or a duration nats-server reads; anything else is refused saying what
  for (const bad of ["sometimes", "0s", "1", "1 s", "always;"]) assert.match(brokerConfigProblem({ serverName: "n1", syncInterval: bad }) ?? "", /always, or a duration/, bad);
  assert.match(brokerServerConfig({ serverName: "n1", syncInterval: "always" }), /\n {2}sync_interval: always\n/);
  assert.match(brokerServerConfig({ serverName: "n1", syncInterval: "1s" }), /\n {2}sync_interval: "1s"\n/);
  assert.doesNotMatch(brokerServerConfig({ serverName: "n1" }), /sync_interval/);
  assert.throws(() => brokerServerConfig({ serverName: "-x" }), /letters, digits/);
});

test("the CLI prints the config, and refuses a bad route with exit 64 and nothing on stdout", async () => {
  const ok = await runCli(["broker", "config", "--name", "nats1", "--route", "nats-route://nats1.example.net:6222", "--route", "nats-route://nats2.example.net:6222"], { env: process.env });
  assert.equal(ok.code, 0, ok.stderr);
  assert.equal(ok.stdout, brokerServerConfig({ serverName: "nats1", routes: ["nats-route://nats1.example.net:6222", "nats-route://nats2.example.net:6222"] }));
  const bad = await runCli(["broker", "config", "--name", "nats1", "--route", "tcp://x:1"], { env: process.env });
  assert.equal(bad.code, 64);
  assert.equal(bad.stdout, "");
  assert.match(bad.stderr, /nats-route:\/\/HOST:PORT/);
});

let admin: { ca: string; cert: string; key: string };
let clientPorts: number[] = [];

before(async () => {
  const ca = ensureCA(join(tmp.path, "ca"), "/O=muster/CN=site CA");
  // members connect to each other with this certificate too: server and client use
  const server = issueCert(ca, { name: "server", subject: "/O=muster/OU=broker/CN=nats.test", ips: ["127.0.0.1"], dns: ["localhost"], usage: "both" });
  const ops = issueCert(ca, { name: "ops", subject: "/O=muster/OU=service/CN=ops", usage: "client" });
  admin = { ca: ca.cert, cert: ops.cert, key: ops.key };
  const users = authorizationConfig({ collectives: ["muster"], admins: ["CN=ops,OU=service,O=muster"] } as Parameters<typeof authorizationConfig>[0]);
  const ports = [] as number[];
  while (ports.length < 9) {
    const p = await freePort("127.0.0.1");
    if (!ports.includes(p)) ports.push(p);
  }
  clientPorts = ports.slice(0, 3);
  const routes = ports.slice(3, 6).map((p) => `nats-route://127.0.0.1:${p}`);
  for (let i = 0; i < 3; i++) {
    const dir = join(tmp.path, `nats${i + 1}`);
    const paths = { config: join(dir, "nats-server.conf"), cert: server.cert, key: server.key, clientsCa: ca.cert, ca: ca.cert, users: join(dir, "nats", "muster-users.conf"), store: join(dir, "js") };
    mkdirSync(join(dir, "nats"), { recursive: true });
    writeFileSync(paths.users, users);
    const text = brokerServerConfig({ serverName: `nats${i + 1}`, routes, listen: `127.0.0.1:${clientPorts[i]}`, monitor: `127.0.0.1:${ports[6 + i]}`, clusterListen: `127.0.0.1:${ports[3 + i]}`, maxFileStore: "4GB", paths });
    writeFileSync(paths.config, text);
    configs.push(paths.config);
    monitorPorts.push(ports[6 + i]!);
    startMember(i);
  }
});

const configs: string[] = [];
const monitorPorts: number[] = [];
function startMember(i: number): void {
  const m = spawn("nats-server", ["-c", configs[i]!], { stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  m.stderr!.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-2000)));
  m.once("exit", (code) => code && code !== 0 && process.stderr.write(`nats${i + 1} exited ${code}: ${err}\n`));
  members[i] = m;
}

/** The CLI as the admin, against the three members. */
function adminEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env, MUSTER_BROKER: clientPorts.map((p) => `tls://127.0.0.1:${p}`).join(","), MUSTER_TLS_CA: admin.ca, MUSTER_TLS_CERT: admin.cert, MUSTER_TLS_KEY: admin.key, MUSTER_CONFIG: join(tmp.path, "none.yaml") };
  writeFileSync(env.MUSTER_CONFIG, "collective: muster\n");
  return env;
}

/** A member's own copy of a stream: its last sequence, from its monitoring port. */
async function lastSeqOn(i: number, stream: string): Promise<number | undefined> {
  const res = await fetch(`http://127.0.0.1:${monitorPorts[i]}/jsz?streams=true`, { signal: AbortSignal.timeout(5000) });
  const j = (await res.json()) as { account_details?: { stream_detail?: { name: string; state: { last_seq: number } }[] }[] };
  return j.account_details?.flatMap((a) => a.stream_detail ?? []).find((x) => x.name === stream)?.state.last_seq;
}

async function connectAdmin(): Promise<NatsConnection> {
  const nc = await connect({ servers: clientPorts.map((p) => `tls://127.0.0.1:${p}`), tls: { caFile: admin.ca, certFile: admin.cert, keyFile: admin.key }, maxReconnectAttempts: -1, reconnectTimeWait: 200 });
  ncs.push(nc);
  return nc;
}

test("three members form a JetStream cluster over TLS routes: an R3 bucket keeps its data with one member gone", async () => {
  const nc = await connectAdmin();
  const deadline = Date.now() + 30_000;
  // the meta leader is elected once the routes are up: until then a bucket cannot be made
  let kv;
  for (;;) {
    try {
      // the provisioner's state bucket, as an admin may write it (state_replicas: 3)
      kv = await new Kvm(nc).create("muster_provision", { replicas: 3 });
      break;
    } catch (e) {
      if (Date.now() > deadline) throw new Error(`no JetStream cluster after 30 s: ${(e as Error).message}`);
      await new Promise((r) => setTimeout(r, 250)); // a leader election announces itself nowhere a client can wait on
    }
  }
  for (let i = 0; i < 5; i++) await kv.put(`node${i}`, new TextEncoder().encode(String(i)));
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info("KV_muster_provision");
  assert.equal(info.config.num_replicas, 3);
  assert.equal((info.cluster?.replicas?.length ?? 0) + 1, 3, "a leader and two replicas");
  // the fleet's stores (heartbeats, Puppet runs, the key directory, runall history, audit) with three copies too, as
  // `muster broker stores --replicas 3` (or the console's store_replicas) makes them
  const env = adminEnv();
  const stores = await runCli(["broker", "stores", "--replicas", "3", "--json"], { env });
  assert.equal(stores.code, 0, stores.stderr);
  assert.equal((JSON.parse(stores.stdout) as { created: boolean }[]).filter((x) => x.created).length, 7, stores.stdout);
  for (const name of ["KV_muster_alive", "KV_muster_puppet_runs", "KV_muster_node_keys", "KV_muster_services", "MUSTER_RUNALL", "MUSTER_AUDIT", "MUSTER_ALERTS"]) assert.equal((await jsm.streams.info(name)).config.num_replicas, 3, name);
  // each member's /jsz as the lab's site reads it when the cluster refuses placement: one leader
  // that counts the other two, every member agreeing on it, nobody left out
  const views = await metaViews(monitorPorts.map((p, i) => ({ server: `nats${i + 1}`, monitor: `http://127.0.0.1:${p}/` })));
  const leader = views.find((v) => v.leader === v.server);
  assert.ok(leader, describeMeta(views));
  assert.deepEqual([...leader.peers!].sort(), ["nats1", "nats2", "nats3"].filter((s) => s !== leader.server), describeMeta(views));
  assert.deepEqual(views.map((v) => [v.leader, v.size]), views.map(() => [leader.server, 3]), describeMeta(views));
  assert.deepEqual(membersOutsideMeta(views), []);
  const bad = await runCli(["broker", "stores", "--replicas", "0"], { env });
  assert.equal(bad.code === 0, false);
  assert.match(bad.stderr, /a whole number from 1 to 5/);
  // one member goes: the bucket still takes writes and still has all of them
  members[0]!.kill("SIGKILL");
  // the client reconnects to another member, and a stream whose leader was on it elects another
  const until = Date.now() + 30_000;
  for (;;) {
    try {
      await kv.put("after", new TextEncoder().encode("x"));
      break;
    } catch (e) {
      if (Date.now() > until) throw new Error(`the bucket took no write within 30 s of losing a member: ${(e as Error).message}`);
    }
  }
  assert.equal((await retryTransient(() => jsm.streams.info("KV_muster_provision"), until - Date.now(), openTimedOut)).state.messages, 6);
  // a read is a direct get, which any member holding a copy answers; one still settling after the
  // loss stays silent and the request times out (seen once in CI), so it is asked again meanwhile
  assert.equal(new TextDecoder().decode((await retryTransient(() => kv.get("node3"), until - Date.now(), openTimedOut))?.value), "3");
});

const REPLICATED = ["KV_muster_alive", "KV_muster_node_keys", "KV_muster_provision", "KV_muster_puppet_runs", "KV_muster_services", "MUSTER_ALERTS", "MUSTER_AUDIT", "MUSTER_RUNALL"];

test("a member back from a crash: `broker stores --rebuild` gives it a fresh copy of every replicated stream while writes go on", async () => {
  startMember(0); // killed above
  // back once its own monitoring port shows the state stream again (it has rejoined the cluster)
  for (const deadline = Date.now() + 30_000; (await lastSeqOn(0, "KV_muster_provision").catch(() => undefined)) === undefined; ) {
    if (Date.now() > deadline) assert.fail("nats1 did not rejoin within 30 s");
    await new Promise((res) => setTimeout(res, 250)); // a restarted member announces itself to no client
  }
  const nc = await connectAdmin();
  const kv = await new Kvm(nc).open("muster_provision");
  // writes go on throughout, as the provisioner's would
  let writing = true;
  let written = 0;
  const writer = (async () => {
    while (writing) {
      try {
        await kv.put(`w${written % 5}`, new TextEncoder().encode(String(written)));
        written++;
      } catch {
        await new Promise((r) => setTimeout(r, 100)); // a leader moving: the next put goes to the new one
      }
    }
  })();
  // nats1 is a member again once the cluster lists it: until then it is not among the peers
  const env = adminEnv();
  let r = await runCli(["broker", "stores", "--rebuild", "nats1", "--json"], { env });
  for (const deadline = Date.now() + 30_000; r.code !== 0 && /no replicated stream has a copy on "nats1"/.test(r.stderr) && Date.now() < deadline; ) r = await runCli(["broker", "stores", "--rebuild", "nats1", "--json"], { env });
  writing = false;
  await writer;
  assert.equal(r.code, 0, r.stderr);
  const done = JSON.parse(r.stdout) as { stream: string; outcome: string; detail: string }[];
  assert.deepEqual(done.filter((x) => x.outcome === "rebuilt").map((x) => x.stream), REPLICATED, r.stdout);
  for (const x of done) assert.match(x.detail, /3 copies \(.*nats1.*\), all current/);
  assert.match(r.stderr, /KV_muster_provision: taking nats1's copy out/, "it says what it does");
  assert.ok(written > 0);
  // nats1's own copy of the state holds every write: the same last sequence as the others'
  const jsm = await jetstreamManager(nc);
  // the rebuild may have moved the stream's leader: its info request can time out meanwhile (a CI run)
  const last = (await retryTransient(() => jsm.streams.info("KV_muster_provision"), 30_000, openTimedOut)).state.last_seq;
  for (let deadline = Date.now() + 15_000; ; ) {
    const seqs = await Promise.all([0, 1, 2].map((i) => lastSeqOn(i, "KV_muster_provision")));
    if (seqs.every((x) => x === last)) break;
    if (Date.now() > deadline) assert.fail(`every member's copy at ${last}: ${seqs.join(", ")}`);
    await new Promise((res) => setTimeout(res, 250)); // each copy applies on its own; none announces it
  }
  // a member no stream knows, or a stream that is not there: refused with what there is
  const bad = await runCli(["broker", "stores", "--rebuild", "nats9"], { env });
  assert.equal(bad.code === 0, false);
  assert.match(bad.stderr, /no replicated stream has a copy on "nats9"; the members are: nats1, nats2, nats3/);
  const badStream = await runCli(["broker", "stores", "--rebuild", "nats1", "--stream", "KV_nope"], { env });
  assert.match(badStream.stderr, /no replicated stream named KV_nope; they are: KV_muster_alive/);
  const alone = await runCli(["broker", "stores", "--stream", "KV_muster_alive"], { env });
  assert.equal(alone.code, 64);
  assert.match(alone.stderr, /--stream goes with --rebuild MEMBER/);
});

test("a client certificate the users do not name is refused", async () => {
  const ca = ensureCA(join(tmp.path, "ca"), "/O=muster/CN=site CA");
  const stranger = issueCert(ca, { name: "stranger", subject: "/O=muster/OU=service/CN=stranger", usage: "client" });
  await assert.rejects(
    connect({ servers: `tls://127.0.0.1:${clientPorts[1]}`, tls: { caFile: admin.ca, certFile: stranger.cert, keyFile: stranger.key }, maxReconnectAttempts: 0, timeout: 5000 }),
    /Authorization|authentication|permissions/i,
  );
});

test("BROKER_PATHS name Debian's files: the unit reads /etc/nats-server.conf", () => {
  assert.equal(BROKER_PATHS.config, "/etc/nats-server.conf");
  const text = brokerServerConfig({ serverName: "solo" });
  assert.ok(!/cluster/.test(text.replace(/^#.*$/gm, "")), "no cluster block for a single server");
  assert.match(text, /include "nats\/muster-users\.conf"/);
  assert.ok(readFileSync("/lib/systemd/system/nats-server.service", "utf8").includes("-c /etc/nats-server.conf"), "Debian's unit reads the path the config is written to");
});
