import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { MusterClient } from "../../src/client/client.js";
import { startEmulator, type RunningEmulator } from "../../src/emulator/emulator.js";
import type { FleetNode } from "../../src/emulator/fleet.js";
import { SimulatedCA, simulatedFactories } from "../../src/emulator/simulated.js";
import { spawnMuster, type MusterProcess } from "../../src/lab/processes.js";
import { silentLogger } from "../../src/log.js";
import { DEFAULT_NODE_KEYS_BUCKET } from "../../src/protocol/buckets.js";
import { encodeNodeKeyEntry, nodeKeyName } from "../../src/protocol/node-keys.js";
import { generateSigningKey } from "../../src/protocol/signing.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { connectNats, eventually } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";
import { writeSimulatedProvisionerConfig } from "../support/provisioner.js";

// Issue 35: a Puppet master's word signs and cleans certificates, so another process answering as
// the master must not be believed. With master.require_verified the provisioner acts on a master's
// reply only when the key directory names the key that signed it; a reply the client dropped (a key
// other than the directory's) is refused whatever the setting. The forger here is a whole master
// of its own (its own CA, its own key) answering under the real master's name, and the waiting
// nodes send it their CSRs: believed, it would take them to done on certificates it signed.

const MASTER = "master-de.test";
const W1 = "wait-1.test";
const W2 = "wait-2.test";
const W3 = "wait-3.test";
let dir: string;
let nats: NatsHandle;
let nc: NatsConnection;
let client: MusterClient;
let store: ProvisionState;
let prov: MusterProcess | undefined;
const started: RunningEmulator[] = [];
const realKey = generateSigningKey(MASTER).key;
const forgerKey = generateSigningKey(MASTER).key;
const realCA = new SimulatedCA();
const forgerCA = new SimulatedCA();
const sim = { puppetRunMs: [5, 20] as [number, number], csrMs: 2 };
const waiting = (id: string, i: number): FleetNode => ({ identity: id, facts: { ipaddress: `127.2.2.${i + 1}`, country: "de" }, classes: [], agents: ["provision"] });
const master = (): FleetNode => ({ identity: MASTER, facts: { ipaddress: "127.3.2.1", country: "de" }, classes: [], agents: ["puppetca"] });

async function emulate(nodes: FleetNode[], ca: SimulatedCA, nodeKey?: ReturnType<typeof generateSigningKey>["key"]): Promise<RunningEmulator> {
  const own = await connectNats(nats.url);
  const e = await startEmulator({ nc: own, nodes, collective: "muster", log: silentLogger, factories: simulatedFactories(ca, sim), ...(nodeKey ? { nodeKey: () => nodeKey } : {}) });
  started.push(e);
  return e;
}

const provLog = () => {
  try {
    return readFileSync(join(dir, "prov.log"), "utf8");
  } catch {
    return "";
  }
};

function startProvisioner(requireVerified: boolean): MusterProcess {
  const cfg = writeSimulatedProvisionerConfig(dir, "prov", { broker: nats.url, concurrency: 2, master: { criteria: ["country"], agent: "puppetca", require_verified: requireVerified }, master_wait: 0, retries: { attempts: 2, backoff: 0.05, max_backoff: 0.1 } });
  return spawnMuster(["provisioner", "--config", cfg, "--foreground"], { logFile: join(dir, "prov.out"), env: { ...process.env } });
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "muster-master-replies-"));
  process.env.MUSTER_CONFIG_DIR = join(dir, "keys");
  nats = await startNats({});
  nc = await connectNats(nats.url);
  client = await MusterClient.connect({ brokers: [nats.url], collective: "muster" });
  store = await ProvisionState.open(client, "muster_provision");
  await emulate([{ identity: "notifier.test", facts: {}, classes: [], agents: ["notify"] }], realCA);
});

after(async () => {
  await prov?.stop("SIGKILL");
  await client?.close();
  for (const e of started) await e.stop();
  await nc?.drain();
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test("require_verified: a master the key directory does not know is not believed: its nodes never reach its CA's signing, nothing is signed or cleaned on its word", async () => {
  // the forger alone answers as the master (signed by its own key; the directory names none), and
  // the waiting nodes' CSRs go to its CA
  const forger = await emulate([master()], forgerCA, forgerKey);
  const nodes = await emulate([waiting(W1, 0), waiting(W2, 1)], forgerCA);
  prov = startProvisioner(true);
  try {
    await eventually(async () => (/refused a reply claiming to be from master-de\.test: does not verify/.test(provLog()) ? true : undefined), 60_000, "the provisioner refusing the unverified master's reply");
    // it goes on refusing: give it the time a provisioning takes here (0.7 s when it believes the master), then look
    await eventually(async () => ((provLog().match(/refused a reply claiming to be from master-de\.test/g) ?? []).length >= 3 ? true : undefined), 60_000, "three refusals");
    for (const id of [W1, W2]) {
      const r = await store.get(id);
      assert.ok(!r?.record.master && !["clean_cert", "sign_csr", "puppet_bootstrap", "puppet_final", "disable", "notify"].includes(r?.record.stage ?? ""), `${id} went on on an unverified word: ${JSON.stringify(r)}`);
      assert.notEqual(forgerCA.certs.get(id)?.state, "signed", `${id}'s certificate signed on the forger's word`);
    }
  } finally {
    await prov.stop();
    prov = undefined;
    for (const e of [forger, nodes]) {
      await e.stop();
      started.splice(started.indexOf(e), 1);
    }
  }
});

test("enrolled, the real master's replies verify and its node provisions; a forger answering as it with another key meanwhile signs nothing", async () => {
  // the operator enrolls the real master's key (the entry muster key enroll writes)
  const kv = await client.bucket(DEFAULT_NODE_KEYS_BUCKET, { create: { history: 5 } });
  await kv.put(nodeKeyName(MASTER), encodeNodeKeyEntry({ identity: MASTER, pubkey: realKey.publicKey, source: "enrolled", time: Date.now(), by: "user=ops" }));
  await emulate([master()], realCA, realKey);
  const forger = await emulate([master()], forgerCA, forgerKey);
  await emulate([waiting(W3, 2)], realCA);
  prov = startProvisioner(true);
  await store.waitFor([W3], (r) => r.status === "done", 120_000).catch((e: Error) => {
    throw new Error(`${e.message}\nthe provisioner's log ends:\n${provLog().split("\n").slice(-15).join("\n")}`);
  });
  assert.equal(realCA.certs.get(W3)?.state, "signed", "signed by the real master's CA");
  assert.equal(forgerCA.certs.get(W3), undefined, "the forger's CA never saw it");
  await forger.stop();
  started.splice(started.indexOf(forger), 1);
});
