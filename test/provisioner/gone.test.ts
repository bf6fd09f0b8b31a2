import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import { MusterClient } from "../../src/client/client.js";
import { submitCsr, type SimulatedCA } from "../../src/emulator/simulated.js";
import { silentLogger } from "../../src/log.js";
import { newRecord, type NodeRecord } from "../../src/protocol/provision-record.js";
import { generateSigningKey } from "../../src/protocol/signing.js";
import { ProvisionerConfigSchema } from "../../src/provisioner/config.js";
import { STOPPING_REASON } from "../../src/provisioner/liveness.js";
import { MusterCollective } from "../../src/provisioner/muster-collective.js";
import { Provisioner } from "../../src/provisioner/scheduler.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import type { NatsHandle } from "../support/index.js";
import { startSimulatedSite, type SimulatedSite } from "../support/provisioner.js";

// Machines that die (docs/provisioner.md#machines-that-die), against a real nats-server: each
// waiting node is its own process (test/support/sim-node.ts) whose CSR takes long enough to kill it
// in the middle; the masters, their simulated CA and the notifier run here. The provisioner, in
// this process, checks a node it waits on every second and calls it gone after two unanswered
// checks.

const simNode = fileURLToPath(new URL("../support/sim-node.js", import.meta.url));
let site: SimulatedSite;
let dir: string;
let nats: NatsHandle;
let client: MusterClient;
let store: ProvisionState;
let ca: SimulatedCA;
const children = new Set<ChildProcess>();
const provisioners: Provisioner[] = [];

before(async () => {
  const masters = [
    { identity: "master-de.test", facts: { ipaddress: "127.3.0.1", country: "de" }, classes: [], agents: ["puppetca"] },
    { identity: "notifier.test", facts: {}, classes: [], agents: ["notify"] },
  ];
  // the nodes (child processes) trust this site's user key, the provisioner's
  site = await startSimulatedSite("gone", masters, { puppetRunMs: [20, 50], csrMs: 5 }, { keyBucket: false });
  ({ dir, nats, client, store, ca } = site);
  // CSRs arrive over the network, as Puppet submits them to the CA
  site.nc.subscribe("test.csr.>", {
    callback: (_e, m) => {
      const { fingerprint, nodeKey } = JSON.parse(new TextDecoder().decode(m.data)) as { fingerprint: string; nodeKey?: string };
      submitCsr(ca, m.subject.slice("test.csr.".length), fingerprint, nodeKey);
    },
  });
  await site.nc.flush();
});

after(async () => {
  await Promise.all(provisioners.map((p) => p.stop()));
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  await site?.stop();
});

/** A node process; resolves once it serves. Its key file makes a restart the same node. */
async function startNode(identity: string, csrMs: number, leaveOnDisable = false): Promise<ChildProcess> {
  const keyFile = join(dir, `${identity}.key`);
  try {
    writeFileSync(keyFile, generateSigningKey(identity).pem, { flag: "wx" });
  } catch {
    // the same node started again: its key stays
  }
  const child = spawn(process.execPath, [simNode, nats.url, identity, String(csrMs), keyFile, ...(leaveOnDisable ? ["leave"] : [])], { stdio: ["ignore", "pipe", "inherit"], env: process.env });
  children.add(child);
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once("line", resolve);
    child.once("exit", (code) => reject(new Error(`${identity} exited with ${code} before it was ready`)));
  });
  assert.equal(line, "ready");
  return child;
}

function killed(child: ChildProcess, signal: NodeJS.Signals): Promise<void> {
  return new Promise((resolve) => {
    child.once("exit", () => resolve());
    child.kill(signal);
  });
}

async function provisioner(id: string, gone: { timeout: number } = { timeout: 120 }, settings: Record<string, unknown> = {}): Promise<Provisioner> {
  const cfg = ProvisionerConfigSchema.parse({
    id,
    steps: { lock: true, set_puppet_hostname: true, send_node_csr: true, sign_node_csr: true, puppet_bootstrap_stage: true, puppet_final_run: true, notify: true },
    master: { criteria: ["country"] },
    notify: { targets: ["http://127.0.0.1:9/"] },
    sleeptime: 1,
    discovery_timeout: 1,
    retries: { attempts: 2, backoff: 0.1, max_backoff: 0.2 },
    gone: { check_interval: 1, checks: 2, timeout: gone.timeout },
    ...settings,
  });
  const p = new Provisioner(cfg, new MusterCollective(client, cfg, silentLogger), store, silentLogger);
  provisioners.push(p);
  await p.start();
  return p;
}

const until = (id: string, done: (r: NodeRecord) => boolean, what: string, timeoutMs = 30_000) =>
  store.waitFor([id], done, timeoutMs).then(
    (m) => m.get(id)!,
    (e: Error) => {
      throw new Error(`${what}: ${e.message}`);
    },
  );

test("a node SIGKILLed while the provisioner waits on its CSR: gone, then, back, provisioned once (the simulated CA signs it once)", async () => {
  const id = "killed.test";
  const node = await startNode(id, 120_000); // a CSR that would keep the provisioner waiting for minutes
  await provisioner("prov-gone");
  await until(id, (r) => r.current === "request_csr", "the CSR step begun");
  await killed(node, "SIGKILL"); // no shutdown event, no reply: the machine is simply not there any more

  const gone = await until(id, (r) => r.gone !== undefined, "the record says gone", 20_000);
  assert.equal(gone.status, "in_progress", "waited for, not failed");
  assert.equal(gone.current, "request_csr");
  assert.match(gone.gone!.reason, /^no answer for 2s \(2 liveness checks\)$/);
  assert.equal(gone.attempts, 0, "no attempt spent on a node that is not there");
  assert.ok(gone.claimExpires! >= gone.gone!.since + 119_000, "the claim lasts as long as the wait");
  assert.equal(ca.certs.get(id), undefined, "its CSR never reached the CA");

  await startNode(id, 20); // powered on again: the same node (same key), a quick CSR this time
  const done = await until(id, (r) => r.status === "done", "provisioned after it came back", 60_000);
  assert.equal(done.gone, undefined, "back: gone cleared");
  assert.equal(done.rounds, 1, "the same round, resumed at its step");
  assert.equal(ca.certs.get(id)?.signings, 1, "its certificate signed exactly once");
  assert.equal(ca.doubleSigned, 0);
  assert.ok(done.log.some((l) => /request_csr: the node is gone \(no answer for 2s/.test(l)), done.log.join("\n"));
  assert.ok(done.log.some((l) => /the node is back after \d+s \(it was gone: no answer for 2s .*\); repeating request_csr/.test(l)), done.log.join("\n"));
});

test("a node stopped cleanly mid-step: its shutdown event makes it gone at once; restarted, it is provisioned once", async () => {
  const id = "stopped.test";
  const node = await startNode(id, 120_000);
  await until(id, (r) => r.current === "request_csr", "the CSR step begun");
  await killed(node, "SIGTERM");
  const gone = await until(id, (r) => r.gone !== undefined, "the record says gone", 20_000);
  assert.equal(gone.gone!.reason, STOPPING_REASON);
  await startNode(id, 20);
  const done = await until(id, (r) => r.status === "done", "provisioned after it came back", 60_000);
  assert.equal(ca.certs.get(id)?.signings, 1);
  assert.equal(done.gone, undefined);
});

test("a node that never comes back is failed when its wait ends, and the admins are told", async () => {
  for (const p of provisioners.splice(0)) await p.stop();
  const id = "lost.test";
  const node = await startNode(id, 120_000);
  const notified = ca.notifications;
  await provisioner("prov-short", { timeout: 3 });
  await until(id, (r) => r.current === "request_csr", "the CSR step begun");
  await killed(node, "SIGKILL");
  await until(id, (r) => r.gone !== undefined, "the record says gone", 20_000);
  const failed = await until(id, (r) => r.status === "failed", "failed once its wait ended", 60_000);
  assert.match(failed.lastError!, /^gone for \d+s and not back \(no answer for 2s \(2 liveness checks\)\)$/);
  assert.equal(failed.current, "request_csr", "the step it was lost at");
  assert.ok(ca.notifications > notified, "a failure notice went out");
});

// Issue 40 §1: a node leaves the provisioning collective for production right after its disable
// step; its shutdown event arrives while the provisioner is still at disable or at notify.

test("a node that leaves for production right after its disable step, with no notifier answering the notice: done, never gone", async () => {
  for (const p of provisioners.splice(0)) await p.stop();
  const id = "leaves.test";
  let shutdownSeen = false;
  const sub = site.nc.subscribe("muster.lifecycle.shutdown.>", {
    callback: (_e, m) => {
      shutdownSeen ||= new TextDecoder().decode(m.data).includes(id);
    },
  });
  const node = await startNode(id, 20, true);
  const left = new Promise<number | null>((resolve) => node.once("exit", resolve));
  // the notice finds no notifier: under the old rule the shutdown then made the node gone for good
  await provisioner("prov-leave", { timeout: 120 }, { notify: { filter: "country=nowhere", targets: ["http://127.0.0.1:9/"] } });
  const end = await until(id, (r) => r.status !== "in_progress" || r.gone !== undefined, "the node's run ended", 60_000);
  assert.equal(await left, 0, "the node left (its process stopped) after its disable step");
  sub.unsubscribe();
  assert.ok(shutdownSeen, "its shutdown event went out");
  assert.equal(end.gone, undefined, `never gone: ${end.log.join(" | ")}`);
  assert.equal(end.status, "done", end.log.join("\n"));
  assert.equal(end.stage, "disable", "provisioned and disabled; only its notice was lost");
  assert.ok(end.log.some((l) => l.includes("provisioned, but the admins could not be told: no notifier found")), end.log.join("\n"));
});

test("a record an older provisioner left gone at notify after a successful final run: its provisioner, restarted, finishes it", async () => {
  for (const p of provisioners.splice(0)) await p.stop();
  const id = "stuck.test";
  const since = Date.now() - 60_000;
  await store.put({ ...newRecord(id), status: "in_progress", owner: "prov-old", rounds: 1, stage: "disable", current: "notify", master: "master-de.test", masterAddress: "127.3.0.1", nodeAddress: "127.4.0.9", gone: { since, reason: STOPPING_REASON }, claimExpires: since + 3_600_000, log: [] });
  await provisioner("prov-old"); // the same id: its own record, resumed
  const done = await until(id, (r) => r.status === "done", "finished, not waited on");
  assert.equal(done.gone, undefined);
  assert.equal(done.rounds, 1, "the same round");
  assert.ok(done.log.some((l) => l.includes("not waiting for the node: it switched provisioning off")), done.log.join("\n"));
  assert.ok([...ca.notified].some((k) => /#1#provisioned(#\d+)?$/.test(k) && k.startsWith(`${id}#`)), "the admins were told");
});
