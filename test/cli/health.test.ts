import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { cleanEnv, eventually, runCli, spawnMuster, tempDir, type CliResult, type MusterProcess } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";

// `muster health`'s exit codes (0 every node healthy, 1 nothing known or matched; 2 is covered by
// the browser test's power cut), the real CLI against a real nats-server with JetStream and
// nodes of `muster emulate` sending their heartbeats. No console runs: `muster broker stores`
// makes the alive bucket, as docs/fleet.md#health tells a fleet without one to.

const tmp = tempDir("cli-health");
const env = cleanEnv(join(tmp.path, "config"));
let nats: NatsHandle;
let emu: MusterProcess;

before(async () => {
  nats = await startNats({ jetstream: true });
  const stores = await runCli(["broker", "stores", "--broker", nats.url], { env });
  assert.equal(stores.code, 0, stores.stderr);
  emu = spawnMuster(["emulate", "--count", "2", "--heartbeat", "1", "--broker", nats.url], { env });
  await emu.waitForLine(/ready/, 20_000);
});

after(async () => {
  await emu?.stop();
  await nats?.stop();
  tmp.remove();
});

const health = (...args: string[]): Promise<CliResult> => runCli(["health", "--broker", nats.url, ...args], { env });

test("every node healthy: each listed as ok, the summary says so, exit 0", async () => {
  // the nodes' first heartbeats reach the bucket shortly after `ready`
  const r = await eventually(async () => {
    const r = await health();
    return r.code === 0 ? r : undefined;
  }, 15_000, "muster health exiting 0");
  const rows = r.stdout.split("\n").filter((l) => /^node-\d+/.test(l));
  assert.deepEqual(rows.map((l) => l.split(/\s+/).slice(0, 2)), [["node-00001.example.net", "ok"], ["node-00002.example.net", "ok"]], r.stdout);
  assert.match(rows[0]!, /seen \d+ s ago/);
  assert.match(r.stdout.trimEnd().split("\n").at(-1)!, /^2 nodes: 2 healthy, 0 unhealthy$/);
  assert.equal(r.stderr, "");
  // --json: the same verdict, machine-readable
  const j = await health("--json", "-I", "node-00001.example.net");
  assert.equal(j.code, 0, j.stderr);
  const report = JSON.parse(j.stdout) as { nodes: { identity: string; reachable: boolean; problems: unknown[] }[]; summary: { nodes: number; healthy: number; unhealthy: number } };
  assert.deepEqual(report.nodes.map((n) => [n.identity, n.reachable, n.problems.length]), [["node-00001.example.net", true, 0]]);
  assert.deepEqual([report.summary.nodes, report.summary.healthy, report.summary.unhealthy], [1, 1, 0]);
});

test("a filter that matches no node: nothing on stdout, stderr says why, exit 1", async () => {
  const r = await health("-I", "nosuch.example.net");
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.equal(r.stdout, "");
  assert.match(r.stderr, /no nodes known: .*\(or none matches the filters\)/);
  // --json still prints the (empty) report for scripts, and exits 1
  const j = await health("--json", "-I", "nosuch.example.net");
  assert.equal(j.code, 1, j.stderr);
  assert.deepEqual((JSON.parse(j.stdout) as { nodes: unknown[] }).nodes, []);
});
