import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import { waitForNodes, type LabReach } from "../../src/lab/waits.js";
import { cleanEnv, spawnMuster, tempDir, type MusterProcess } from "../support/collective.js";
import { startNats, testPki, type NatsHandle } from "../support/index.js";

// The lab's wait for new nodes (src/lab/waits.ts) against a real nats-server and real `muster
// emulate` nodes: a node that answered once has come up, though it leaves before a slower one
// answers, as a node in the provisioning collective does once it is provisioned (CI saw node07
// provisioned in 52 s while node08 still booted, and the wait never saw both at once).

const tmp = tempDir("lab-waits");
const env = cleanEnv(join(tmp.path, "config"));
let nats: NatsHandle;
const running: MusterProcess[] = [];

before(async () => {
  nats = await startNats({});
  // the wait's client signs with the key of this config directory, which the emulated nodes trust
  process.env.MUSTER_CONFIG_DIR = env.MUSTER_CONFIG_DIR;
});

after(async () => {
  for (const p of running) await p.stop();
  await nats?.stop();
  tmp.remove();
});

function emulate(identity: string): MusterProcess {
  const file = join(tmp.path, `${identity}.yaml`);
  writeFileSync(file, toYaml({ nodes: [{ identity, facts: {} }] }));
  const p = spawnMuster(["emulate", "--fleet", file, "--broker", nats.url, "-T", "waits"], { env });
  running.push(p);
  return p;
}

test("every node counts once it has answered: the first gone before the second answers still resolves the wait", async () => {
  const pki = testPki();
  const reach = { broker: nats.url, collective: "waits", tls: { admin: { ca: pki.ca, cert: pki.clientCert, key: pki.clientKey } } } as unknown as LabReach;
  const first = emulate("first.waits.test");
  const found: string[] = [];
  await waitForNodes(reach, ["first.waits.test", "second.waits.test"], 60_000, "fleet", (id) => {
    found.push(id);
    // the first answered: it goes, and only then does the second start
    if (id === "first.waits.test") void first.stop().then(() => emulate("second.waits.test"));
  });
  assert.deepEqual(found, ["first.waits.test", "second.waits.test"]);
});
