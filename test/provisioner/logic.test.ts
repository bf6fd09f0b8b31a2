import { test } from "node:test";
import assert from "node:assert/strict";
import { pickMaster } from "../../src/provisioner/pick-master.js";
import { backoffMs, enabledStages, remainingStages } from "../../src/provisioner/stages.js";
import { recordKey, newRecord, appendLog } from "../../src/protocol/provision-record.js";
import { claimable } from "../../src/provisioner/claim.js";
import { ProvisionerConfigSchema } from "../../src/provisioner/config.js";
import { Semaphore } from "../../src/semaphore.js";
import { parse as parseYaml } from "yaml";

const masters = [
  { identity: "puppet2.eu", facts: { ec2_placement_region: "eu-west-1", country: "uk" } },
  { identity: "puppet1.us", facts: { ec2_placement_region: "us-east-1", country: "us" } },
  { identity: "puppet3.de", facts: { country: "de" } },
];

test("pickMaster: the first criterion that matches wins", () => {
  const c = pickMaster(["ec2_placement_region", "country"], { ec2_placement_region: "us-east-1", country: "uk" }, masters);
  assert.equal(c?.master.identity, "puppet1.us");
  assert.equal(c?.criterion, "ec2_placement_region");
});

test("pickMaster: falls through to later criteria", () => {
  const c = pickMaster(["ec2_placement_region", "country"], { ec2_placement_region: "ap-south-1", country: "de" }, masters);
  assert.equal(c?.master.identity, "puppet3.de");
  assert.equal(c?.criterion, "country");
});

test("pickMaster: no match picks the first master by identity, whatever the discovery order", () => {
  const c = pickMaster(["country"], { country: "br" }, masters);
  assert.equal(c?.master.identity, "puppet1.us");
  assert.equal(c?.criterion, undefined);
  assert.equal(pickMaster(["country"], {}, [...masters].reverse())?.master.identity, "puppet1.us");
});

test("pickMaster: no masters gives undefined; numbers compare by value text", () => {
  assert.equal(pickMaster(["x"], { x: 1 }, []), undefined);
  assert.equal(pickMaster(["rack"], { rack: 7 }, [{ identity: "b", facts: { rack: "7" } }, { identity: "a", facts: { rack: 8 } }])?.master.identity, "b");
});

test("stages follow the steps switches in order and resume after the last completed", () => {
  const cfg = ProvisionerConfigSchema.parse({ steps: { lock: true, sign_node_csr: true, puppet_final_run: true, notify: true } });
  const st = enabledStages(cfg.steps);
  assert.deepEqual(st, ["lock", "sign_csr", "production", "unlock", "disable", "notify"]);
  assert.deepEqual(remainingStages(st, "sign_csr"), ["production", "unlock", "disable", "notify"]);
  assert.deepEqual(remainingStages(st, undefined), st);
  const off = ProvisionerConfigSchema.parse({ steps: { disable_provisioner: false } });
  assert.deepEqual(enabledStages(off.steps), []);
});

test("mcprovision's own YAML is accepted unchanged", () => {
  const yaml = `---
logfile: /var/log/mcprovision.log
loglevel: debug
daemonize: true
steps:
  lock: false
  set_puppet_hostname: false
  clean_node_certname: false
  send_node_csr: false
  sign_node_csr: false
  puppet_bootstrap_stage: false
  puppet_final_run: false
  puppet_daemonize: false
  notify: false
master:
  criteria:
  - ec2_placement_region
  - country
  filter: ""
  agent: puppetca
  ipaddress_fact: ipaddress
target:
  filter: "provision().disabled=false and provision().locked=false"
  agent: provision
  ipaddress_fact: ipaddress
notify:
  filter: "/monitor1/"
  agent: angelianotify
  targets:
  - boxcar://rip@devco.net
`;
  const cfg = ProvisionerConfigSchema.parse(parseYaml(yaml));
  assert.deepEqual(cfg.master.criteria, ["ec2_placement_region", "country"]);
  assert.equal(cfg.notify.agent, "angelianotify");
  assert.equal(cfg.concurrency, 10);
  assert.equal(cfg.retries.attempts, 3);
  assert.throws(() => ProvisionerConfigSchema.parse({ stpes: {} }));
});

test("claims: pending and expired nodes are claimable, live foreign ones and finished ones are not", () => {
  const now = 1_000_000;
  assert.equal(claimable(undefined, "a", now), true);
  const r = newRecord("n1", now);
  assert.equal(claimable(r, "a", now), true);
  r.status = "in_progress";
  r.owner = "b";
  r.claimExpires = now + 1000;
  assert.equal(claimable(r, "a", now), false);
  assert.equal(claimable(r, "b", now), true, "our own record after a restart");
  r.claimExpires = now - 1;
  assert.equal(claimable(r, "a", now), true, "expired claim can be taken over");
  r.status = "done";
  assert.equal(claimable(r, "b", now), false);
  r.status = "failed";
  assert.equal(claimable(r, "b", now), false);
});

test("KV keys escape characters KV does not allow; log tail is bounded", () => {
  assert.equal(recordKey("web1.example.com"), "web1.example.com");
  assert.equal(recordKey("a@b:c"), "a_40b_3ac");
  const r = newRecord("x");
  for (let i = 0; i < 100; i++) appendLog(r, `line ${i}`);
  assert.equal(r.log.length, 30);
  assert.match(r.log[29]!, /line 99$/);
});

test("backoff grows exponentially, is capped and jittered", () => {
  assert.equal(backoffMs(1, 2, 60, () => 0.5), 2000);
  assert.equal(backoffMs(3, 2, 60, () => 0.5), 8000);
  assert.equal(backoffMs(10, 2, 60, () => 0.5), 60000);
  assert.equal(backoffMs(1, 2, 60, () => 0), 1600);
  assert.equal(backoffMs(1, 2, 60, () => 1), 2400);
});

test("semaphore caps concurrency and hands slots over in order", async () => {
  const s = new Semaphore(2);
  let active = 0;
  let peak = 0;
  const order: number[] = [];
  await Promise.all(
    Array.from({ length: 6 }, async (_, i) => {
      await s.acquire();
      active++;
      peak = Math.max(peak, active);
      await new Promise((r) => setImmediate(r));
      order.push(i);
      active--;
      s.release();
    }),
  );
  assert.equal(peak, 2);
  assert.equal(order.length, 6);
  assert.equal(s.inUse, 0);
  const ac = new AbortController();
  const t = new Semaphore(1);
  await t.acquire();
  const waiting = t.acquire(ac.signal);
  ac.abort(new Error("stop"));
  await assert.rejects(waiting, /stop/);
  assert.equal(t.waiting, 0);
});
