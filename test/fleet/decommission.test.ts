import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { MusterClient } from "../../src/client/client.js";
import { MusterError } from "../../src/errors.js";
import { decommission } from "../../src/fleet/decommission.js";
import { startEmulator } from "../../src/emulator/emulator.js";
import { SimulatedCA, simulatedFactories } from "../../src/emulator/simulated.js";
import { silentLogger } from "../../src/log.js";
import { newRecord } from "../../src/protocol/provision-record.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { bucketsOn } from "../../src/broker/bucket.js";
import { dropRegistryEntry, readRegistry } from "../../src/registry/bucket.js";
import { RegistryConfigSchema } from "../../src/registry/config.js";
import { startRegistry } from "../../src/registry/daemon.js";
import { connectNats } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";

// Decommission's pieces against a real nats-server with JetStream: dropping registry and
// provisioning records (what a running registry and provisioner see), and refusing to change
// anything when no master answers. Revoking and cleaning against real puppetservers, and a
// machine coming back under the name, are in test/provisioner/e2e.test.ts.

let nats: NatsHandle;
let nc: NatsConnection;
let client: MusterClient; // the operator's view, as decommission opens the buckets (client.kvIfExists)
let home: string;

before(async () => {
  home = mkdtempSync(join(tmpdir(), "muster-decom-"));
  process.env.MUSTER_CONFIG_DIR = home; // the test's own signing key
  nats = await startNats();
  nc = await connectNats(nats.url);
  client = await MusterClient.connect({ nc });
});
const drop = async (bucket: string, identity: string) => dropRegistryEntry(await client.bucketIfExists(bucket), identity);

after(async () => {
  await client?.close();
  await nc?.drain().catch(() => undefined);
  await nats?.stop();
  rmSync(home, { recursive: true, force: true });
});

test("a dropped registry record leaves the bucket and a running registry's memory at once; dropping again is 'absent'", async (t) => {
  const reg = await startRegistry(RegistryConfigSchema.parse({ log: { level: "silent" }, bucket: "drop", collectives: ["muster"] }), silentLogger, { nc });
  t.after(() => reg.stop());
  const registered = new Promise<void>((resolve) => reg.store.on("update", (r) => r.identity === "web1.example" && resolve()));
  nc.publish("muster.registration", new TextEncoder().encode(JSON.stringify({ identity: "web1.example", facts: {}, classes: [], agents: ["rpcutil"], collectives: ["muster"] })));
  await registered;
  const removed = new Promise<void>((resolve) => reg.store.on("remove", (id) => id === "web1.example" && resolve()));
  assert.equal(await drop("drop", "web1.example"), "dropped");
  await removed;
  assert.equal(reg.store.get("web1.example"), undefined);
  assert.deepEqual((await readRegistry(bucketsOn(nc), "drop")).records.map((r) => r.identity), []);
  assert.equal(await drop("drop", "web1.example"), "absent");
  assert.equal(await drop("no-such-bucket", "web1.example"), "no-bucket");
});

test("a dropped provisioning record: gone with its history, a provisioner holding it loses its next write, the name can start afresh", async () => {
  assert.equal(await ProvisionState.openExisting(client, "never_made"), undefined, "looking does not create the bucket");
  const provisioner = await ProvisionState.open(bucketsOn(nc), "prov_drop");
  const v = { record: newRecord("web2.example"), revision: 0 };
  v.record.status = "in_progress";
  assert.ok(await provisioner.compareAndSet(v));
  const operator = (await ProvisionState.openExisting(client, "prov_drop"))!;
  assert.equal((await operator.remove("web2.example"))?.status, "in_progress");
  assert.equal(await operator.get("web2.example"), undefined);
  assert.equal(await operator.remove("web2.example"), undefined, "already gone");
  v.record.stage = "sign_csr";
  assert.equal(await provisioner.compareAndSet(v), undefined, "the provisioner's compare-and-set fails: it leaves the node");
  assert.ok(await provisioner.compareAndSet({ record: newRecord("web2.example"), revision: 0 }), "a machine under the same name gets a new record");
});

test("no master answering: nothing is changed, and the error says so", async () => {
  const store = await ProvisionState.open(bucketsOn(nc), "prov_keep");
  await store.put({ ...newRecord("web3.example"), status: "done" });
  const operator = await MusterClient.connect({ brokers: [nats.url] });
  try {
    await assert.rejects(
      decommission(operator, ["web3.example"], { stateBucket: "prov_keep", registryBucket: "drop", discoveryTimeoutMs: 500 }),
      (e: unknown) => e instanceof MusterError && e.code === "MUSTER_NO_MASTER" && /nothing was changed/.test(e.message),
    );
  } finally {
    await operator.close();
  }
  assert.equal((await store.get("web3.example"))?.record.status, "done", "the record is still there");
});

test("a Puppet master decommissioned is forgotten as a known master: its region's new nodes no longer wait for it", async () => {
  const store = await ProvisionState.open(bucketsOn(nc), "prov_masters");
  await store.masters.remember([{ identity: "puppet-old.example", facts: { country: "us" } }, { identity: "puppet-live.example", facts: { country: "de" } }], ["country"]);
  // the masters answer (the decommission needs one); the old one is still running, as it may be
  const emu = await startEmulator({ nc, nodes: ["puppet-old.example", "puppet-live.example"].map((identity) => ({ identity, facts: {}, classes: [], agents: ["puppetca"] })), collective: "muster", log: silentLogger, factories: simulatedFactories(new SimulatedCA(), { puppetRunMs: [1, 2], csrMs: 1 }) });
  try {
    const [out] = await decommission(client, ["puppet-old.example"], { stateBucket: "prov_masters", registryBucket: "drop", notify: false, discoveryTimeoutMs: 500 });
    const step = out!.steps.find((s) => s.step === "provisioning")!;
    assert.deepEqual({ ok: step.ok, changed: step.changed, detail: step.detail }, { ok: true, changed: true, detail: "no record: already gone; forgotten as a known master" });
    assert.deepEqual((await store.masters.list()).map((m) => m.identity), ["puppet-live.example"]);
  } finally {
    await emu.stop();
  }
});
