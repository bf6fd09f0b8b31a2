import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { headers as natsHeaders, type NatsConnection, type Msg, type Subscription } from "@nats-io/transport-node";
import { MusterClient } from "../../src/client/client.js";
import { startEmulator, type RunningEmulator } from "../../src/emulator/emulator.js";
import type { FleetNode } from "../../src/emulator/fleet.js";
import { SimulatedCA, simulatedFactories } from "../../src/emulator/simulated.js";
import { spawnMuster, type MusterProcess } from "../../src/lab/processes.js";
import { silentLogger } from "../../src/log.js";
import { decodeRequest, encodeReply } from "../../src/protocol/envelope.js";
import { encodeLifecycleEvent, lifecycleEvent, lifecycleSubject } from "../../src/protocol/lifecycle.js";
import { generateSigningKey, signMessage, type SigningKey } from "../../src/protocol/signing.js";
import { Status } from "../../src/protocol/status.js";
import { PROOF_HEADER, TARGET_HEADER } from "../../src/protocol/targets.js";
import { REPLY_PROTOCOL, type Reply } from "../../src/protocol/types.js";
import { type NodeRecord } from "../../src/protocol/provision-record.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { DEFAULT_NODE_KEYS_BUCKET } from "../../src/protocol/buckets.js";
import { nodeKeyName, parseNodeKeyEntry } from "../../src/protocol/node-keys.js";
import { connectNats, eventually, runCli } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";
import { writeSimulatedProvisionerConfig } from "../support/provisioner.js";

// Issue 13, as an attacker would try it: forged startup events, replies from an impostor holding
// another key or with a flipped signature, and a directed request replayed onto another node's
// subject. Each is refused and logged, and the honest node still provisions afterwards.

let dir: string;
let nats: NatsHandle;
let nc: NatsConnection;
let infra: RunningEmulator;
let honest: RunningEmulator | undefined;
let client: MusterClient;
let store: ProvisionState;
let prov: MusterProcess;
const ca = new SimulatedCA();
const failing = new Set<string>();
const A = "wait-a.test";
const B = "wait-b.test";
const C = "wait-c.test";
const keys = new Map([A, B, C].map((id) => [id, generateSigningKey(id).key]));
const attacker = generateSigningKey("mallory").key;
const factories = simulatedFactories(ca, { puppetRunMs: [5, 20], csrMs: 2, fail: (id) => failing.has(id) });
const waiting = (id: string, i: number): FleetNode => ({ identity: id, facts: { ipaddress: `127.2.1.${i + 1}`, country: "de" }, classes: [], agents: ["provision"] });

function startHonest(): Promise<RunningEmulator> {
  return startEmulator({ nc, nodes: [A, B, C].map(waiting), collective: "muster", log: silentLogger, factories, nodeKey: (id) => keys.get(id)! });
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "muster-authn-"));
  process.env.MUSTER_CONFIG_DIR = join(dir, "keys");
  nats = await startNats({});
  nc = await connectNats(nats.url);
  infra = await startEmulator({
    nc,
    nodes: [
      { identity: "master-de.test", facts: { ipaddress: "127.3.1.1", country: "de" }, classes: [], agents: ["puppetca"] },
      { identity: "notifier.test", facts: {}, classes: [], agents: ["notify"] },
    ],
    collective: "muster",
    log: silentLogger,
    factories,
  });
  failing.add(A).add(B);
  honest = await startHonest();
  client = await MusterClient.connect({ brokers: [nats.url], collective: "muster" });
  store = await ProvisionState.open(client, "muster_provision");
  const cfg = writeSimulatedProvisionerConfig(dir, "prov", { broker: nats.url, concurrency: 4, retries: { attempts: 2, backoff: 0.05, max_backoff: 0.1 } });
  prov = spawnMuster(["provisioner", "--config", cfg, "--foreground"], { logFile: join(dir, "prov.out"), env: { ...process.env } });
});

after(async () => {
  await prov?.stop("SIGKILL");
  await client?.close();
  await honest?.stop();
  await infra?.stop();
  await nc?.drain();
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const provLog = () => readFileSync(join(dir, "prov.log"), "utf8");
const waitForLog = (re: RegExp, what: string) => eventually(async () => (re.test(provLog()) ? true : undefined), 30_000, what);
const waitFor = (ids: string[], done: (r: NodeRecord) => boolean) => store.waitFor(ids, done, 60_000);

function startup(identity: string, key?: SigningKey, time = Date.now()): void {
  const e = lifecycleEvent("startup", { identity, component: "server", version: "0.0.0", collectives: ["muster"], time });
  nc.publish(lifecycleSubject(e), encodeLifecycleEvent(key ? signMessage(e, key) : e));
}

test("the first signed reply pins each waiting node's key in its record", async () => {
  const recs = await waitFor([A, B, C], (r) => r.status === "done" || r.status === "failed");
  assert.equal(recs.get(C)!.status, "done");
  assert.equal(recs.get(A)!.status, "failed");
  for (const id of [A, B, C]) assert.equal(recs.get(id)!.nodeKey, keys.get(id)!.publicKey, `${id}'s pinned key`);
});

test("a forged startup event (unsigned, another key, a replay of an old one) is refused and logged; the node's own is acted on", async () => {
  startup(A); // unsigned
  await waitForLog(new RegExp(`refused a startup event claiming to be from ${A}: it is unsigned`), "the unsigned startup refused");
  startup(A, attacker);
  await waitForLog(new RegExp(`refused a startup event claiming to be from ${A}: it is signed by ${attacker.publicKey.replace(/[+/]/g, "\\$&")}`), "the forged startup refused");
  startup(A, keys.get(A), Date.now() - 3_600_000); // an old genuine event, replayed
  await waitForLog(new RegExp(`refused a startup event claiming to be from ${A}: its time`), "the stale startup refused");
  assert.equal((await store.get(A))!.record.status, "failed", "no forged event made the provisioner retry the node");

  failing.delete(A);
  startup(A, keys.get(A));
  const recs = await waitFor([A], (r) => r.status === "done");
  assert.equal(recs.get(A)!.nodeKey, keys.get(A)!.publicKey);
});

/** A raw responder on B's subject: what a second process holding B's bootstrap credential could do. */
function impostor(answer: (m: Msg) => Uint8Array): Subscription[] {
  // it answers discovery as B too, so the provisioner finds "B" again after the retry
  const disco = nc.subscribe("muster.broadcast.agent.discovery", {
    callback: (_e, m) => {
      if (m.reply) m.respond(replyTo(m, attacker));
    },
  });
  return [disco, nc.subscribe(`muster.node.${B}`, {
    callback: (_e, m) => {
      if (m.reply) m.respond(answer(m));
    },
  })];
}
function replyTo(m: Msg, key: SigningKey, flip = false): Uint8Array {
  const req = decodeRequest(m.data);
  const r = signMessage<Reply>({ protocol: REPLY_PROTOCOL, requestid: req.id, sender: B, agent: req.agent, action: req.action, time: Date.now(), statuscode: Status.OK, statusmsg: "OK", data: { facts: { ipaddress: "127.9.9.9", country: "de" }, fingerprint: "AA:BB", certname: B, has_cert: false, submitted: true } }, key);
  if (flip) r.signature = Buffer.from(Buffer.from(r.signature, "base64").map((b, i) => (i === 5 ? b ^ 1 : b))).toString("base64");
  return encodeReply(r);
}

test("replies from another key or with a flipped signature are refused; B's certificate is never signed for them; then B provisions", async () => {
  const signingsBefore = ca.certs.get(B)?.signings ?? 0;
  await honest!.stop(); // B's genuine process is gone; impostors answer on its subject
  honest = undefined;
  for (const [name, answer] of [
    ["another key", (m: Msg) => replyTo(m, attacker)],
    ["a flipped signature", (m: Msg) => replyTo(m, keys.get(B)!, true)],
  ] as const) {
    const sub = impostor(answer);
    await nc.flush();
    const retry = await runCli(["provision", "retry", B, "--broker", nats.url], { env: process.env });
    assert.equal(retry.code, 0, retry.stderr);
    await waitForLog(name === "another key" ? new RegExp(`reply claiming to be from ${B}: it is signed by`) : new RegExp(`reply claiming to be from ${B}: it is unsigned or its signature does not verify`), `the reply with ${name} refused`);
    const rec = (await waitFor([B], (r) => r.status === "failed")).get(B)!;
    assert.match(rec.lastError!, /refused/);
    assert.equal(rec.nodeKey, keys.get(B)!.publicKey, "the pin did not move");
    for (const s of sub) s.unsubscribe();
  }
  assert.equal(ca.certs.get(B)?.signings ?? 0, signingsBefore, "no certificate signed while impostors answered");

  failing.delete(B);
  honest = await startHonest(); // its signed startup event makes the provisioner retry B
  const rec = (await waitFor([B], (r) => r.status === "done")).get(B)!;
  assert.equal(rec.nodeKey, keys.get(B)!.publicKey);
  // signed for B's own key (the simulated CA checks node_key as the real one does), and vouched for
  assert.equal(ca.certs.get(B)?.nodeKey, keys.get(B)!.publicKey);
  const entry = await eventually(async () => {
    const e = await (await client.bucket(DEFAULT_NODE_KEYS_BUCKET)).get(nodeKeyName(B));
    const p = e && parseNodeKeyEntry(e.value, e.key);
    return p && p.ok && p.entry.source === "certified" ? p.entry : undefined;
  }, 10_000, "B's directory entry certified");
  assert.equal(entry.pubkey, keys.get(B)!.publicKey);
  assert.equal(entry.fingerprint, rec.fingerprint);
});

test("a directed request captured on one node's subject and replayed onto another's is refused and counted", async () => {
  honest ??= await startHonest();
  // the provisioner's discovery (every second) reaches C's agents too: with it running, a cycle
  // between the two daemon_stats calls below counted as a replay that got through (run 26)
  await prov.stop();
  const captured: Msg[] = [];
  const tap = nc.subscribe(`muster.node.${A}`, {
    callback: (_e, m) => {
      captured.push(m);
    },
  });
  await nc.flush();
  const r = await client.call("rpcutil", "ping", {}, { nodes: [A], timeoutMs: 5000 });
  assert.equal(r.replies[0]?.statuscode, Status.OK);
  tap.unsubscribe();
  const copy = captured[0]!;
  const stats = async () => (await client.call("rpcutil", "daemon_stats", {}, { nodes: [C], timeoutMs: 5000 })).replies[0]!.data as Record<string, number>;
  const before = await stats();
  // as captured, and with its target header rewritten to the victim
  for (const target of [A, C]) {
    const h = natsHeaders();
    h.set(TARGET_HEADER, target);
    const proof = copy.headers?.get(PROOF_HEADER);
    if (proof) h.set(PROOF_HEADER, proof);
    const m = await nc.request(`muster.node.${C}`, copy.data, { timeout: 5000, headers: h });
    const reply = JSON.parse(new TextDecoder().decode(m.data)) as { statuscode: number; statusmsg: string };
    assert.equal(reply.statuscode, Status.Aborted);
    assert.match(reply.statusmsg, /not addressed to this subject/);
  }
  const afterStats = await stats();
  assert.equal(afterStats.badtarget! - before.badtarget!, 2);
  assert.equal(afterStats.passed! - before.passed!, 1, "only the daemon_stats call itself reached an agent");
});
