import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { newRecord, type NodeRecord } from "../../src/protocol/provision-record.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { bucketsOn } from "../../src/broker/bucket.js";
import { startNats, type NatsHandle } from "../support/index.js";
import { cleanEnv, connectNats, runCli, tempDir } from "../support/collective.js";

// `muster provision status --failed --group` and `muster provision retry --group/--master` against
// records in a real JetStream KV bucket: three causes among failed nodes read as three groups, and a
// group's retry moves exactly its nodes back to pending.

const tmp = tempDir("provision-groups");
const BUCKET = "muster_provision_groups_test";
let nats: NatsHandle;
let nc: NatsConnection;
let store: ProvisionState;
let env: NodeJS.ProcessEnv;

const failed = (identity: string, current: NodeRecord["current"], lastError: string, master: string): NodeRecord => ({ ...newRecord(identity), status: "failed", rounds: 1, current, lastError, master, attempts: 3, log: [`x ${current} failed: ${lastError}`] });
const csr = Array.from({ length: 12 }, (_, i) => `csr${String(i).padStart(2, "0")}.test`);
const boot = Array.from({ length: 5 }, (_, i) => `boot${i}.test`);
const sign = ["sign0.test", "sign1.test"];

before(async () => {
  nats = await startNats({ jetstream: true });
  nc = await connectNats(nats.url);
  store = await ProvisionState.open(bucketsOn(nc), BUCKET);
  env = cleanEnv(join(tmp.path, "config"), { MUSTER_BROKER: nats.url });
  for (const [i, id] of csr.entries()) await store.put(failed(id, "request_csr", `request_csr: no CSR from ${id} within ${20 + i} s`, i % 2 ? "puppet-de.test" : "puppet-us.test"));
  for (const [i, id] of boot.entries()) await store.put(failed(id, "bootstrap", `bootstrap: puppet run failed (exit ${i + 1}): 1 resource(s) failed: File[/etc/app${i}.conf]`, "puppet-de.test"));
  for (const id of sign) await store.put(failed(id, "sign_csr", `sign_csr: the CSR of ${id} asks for extra names`, "puppet-us.test"));
  await store.put({ ...newRecord("done.test"), status: "done", stage: "notify", rounds: 1 });
});

after(async () => {
  await nc?.drain().catch(() => undefined);
  await nats?.stop();
  tmp.remove();
});

const cli = (...args: string[]) => runCli(["provision", ...args, "--bucket", BUCKET], { env, cwd: tmp.path });
interface Group {
  id: string;
  stage: string;
  reason: string;
  count: number;
  masters: { master: string; count: number }[];
  nodes: string[];
}

test("status --failed --group: three causes, three groups with their counts, masters and nodes", async () => {
  const r = await cli("status", "--failed", "--group", "--json");
  assert.equal(r.code, 0, r.stderr);
  const groups = JSON.parse(r.stdout) as Group[];
  assert.deepEqual(
    groups.map((g) => [g.stage, g.count]),
    [
      ["request_csr", 12],
      ["bootstrap", 5],
      ["sign_csr", 2],
    ],
  );
  assert.deepEqual(groups[0]!.nodes, csr);
  assert.deepEqual(groups[0]!.masters, [
    { master: "puppet-de.test", count: 6 },
    { master: "puppet-us.test", count: 6 },
  ]);
  assert.equal(groups[1]!.reason, "bootstrap: puppet run failed (exit <n>): <n> resource(s) failed: File[<path>]");

  const text = await cli("status", "--failed", "--group");
  assert.equal(text.code, 0, text.stderr);
  for (const g of groups) assert.ok(text.stdout.includes(g.id) && text.stdout.includes(`${g.count} failed at ${g.stage}`), text.stdout);
  assert.match(text.stdout, /19 failed nodes in 3 groups; retry a group with: muster provision retry --group ID/);

  const plain = await cli("status", "--failed", "--json");
  assert.equal((JSON.parse(plain.stdout) as unknown[]).length, 19, "--failed alone: the failed nodes' records");
  const bad = await cli("status", "--group");
  assert.equal(bad.code, 64, bad.stderr);
  assert.match(bad.stderr, /--group groups failed nodes: give it with --failed/);
});

test("retry --group: --dry-run lists, then exactly the group's nodes go back to pending", async () => {
  const groups = JSON.parse((await cli("status", "--failed", "--group", "--json")).stdout) as Group[];
  const g = groups.find((x) => x.stage === "bootstrap")!;
  const dry = await cli("retry", "--group", g.id, "--dry-run");
  assert.equal(dry.code, 0, dry.stderr);
  assert.match(dry.stdout, /5 failed nodes in group \S+ would be retried \(--dry-run: nothing changed\)/);
  assert.equal((await store.get(boot[0]!))!.record.status, "failed");

  const r = await cli("retry", "--group", g.id);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /5 of 5 failed nodes in group \S+ queued for provisioning/);
  const all = await store.list();
  assert.deepEqual(all.filter((x) => x.status === "pending").map((x) => x.identity).sort(), [...boot].sort());
  assert.equal(all.filter((x) => x.status === "failed").length, 14, "the other groups are untouched");
  assert.match((await store.get(boot[0]!))!.record.log.at(-1)!, /retry requested by \S+ \(muster provision retry, group /);

  const again = await cli("retry", "--group", g.id);
  assert.equal(again.code, 1);
  assert.match(again.stderr, /no failed node in group/);
});

test("retry --master, and --master within a group", async () => {
  const groups = JSON.parse((await cli("status", "--failed", "--group", "--json")).stdout) as Group[];
  const g = groups.find((x) => x.stage === "request_csr")!;
  const within = await cli("retry", "--group", g.id, "--master", "puppet-us.test", "--json");
  assert.equal(within.code, 0, within.stderr);
  assert.deepEqual((JSON.parse(within.stdout) as { retried: string[] }).retried, csr.filter((_, i) => i % 2 === 0));
  const master = await cli("retry", "--master", "puppet-us.test", "--json");
  assert.deepEqual((JSON.parse(master.stdout) as { retried: string[] }).retried, sign, "the rest of puppet-us.test's failed nodes");
  assert.deepEqual((await store.list()).filter((x) => x.status === "failed").map((x) => x.identity).sort(), csr.filter((_, i) => i % 2 === 1));
  const usage = await cli("retry", "--group", g.id, "csr01.test");
  assert.equal(usage.code, 64);
});
