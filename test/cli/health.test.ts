import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { cleanEnv, connectNats, eventually, runCli, spawnMuster, tempDir, type CliResult, type MusterProcess } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";
import { jetstream } from "@nats-io/jetstream";
import { encodeHeartbeat, heartbeatSubject } from "../../src/protocol/heartbeat.js";
import { encodeServiceBeat, serviceSubject } from "../../src/protocol/service.js";

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

test("asking a silent node takes time nobody else is judged by: the nodes beating on stay healthy while a gone one goes unanswered", async () => {
  const nc = await connectNats(nats.url);
  try {
    const id = "silent.example.net"; // no such node serves: its ask waits out its whole wait (half the shortest limit: 1.5 s here)
    await jetstream(nc).publish(heartbeatSubject(id), encodeHeartbeat({ identity: id, time: Date.now(), interval: 1, version: "test", phase: "serving", state: "up", status: {} }));
    const read = async () => JSON.parse((await health("--json", "--unreachable-after", "3", "-I", id, "-I", "node-00001.example.net", "-I", "node-00002.example.net")).stdout) as { nodes: { identity: string; reachable: boolean; problems: { why: string }[] }[] };
    const r = await eventually(async () => {
      const r = await read();
      return r.nodes.find((n) => n.identity === id)?.reachable === false ? r : undefined;
    }, 30_000, `${id} unreachable once quiet past 3 s`);
    assert.match(r.nodes.find((n) => n.identity === id)!.problems[0]!.why, /; it did not answer a ping$/, "it was asked, and the ask went unanswered");
    // heartbeats every second against a 3 s limit: judged by the clock after a 5 s wait (as before), they were 6 s quiet
    assert.deepEqual(r.nodes.filter((n) => n.identity !== id).map((n) => [n.identity, n.reachable, n.problems.length]), [["node-00001.example.net", true, 0], ["node-00002.example.net", true, 0]]);
  } finally {
    await nc.close();
  }
});

test("a node quiet only through a stretch a console saw the store refuse writes in is asked, not left in doubt: gone, it is unreachable at once, saying it did not answer", async () => {
  const nc = await connectNats(nats.url);
  try {
    const js = jetstream(nc);
    const id = "quiet.example.net"; // no such node serves: nothing answers for it
    // one heartbeat, then silence: unreachable 3 s after it (--unreachable-after 3, interval 1)
    await js.publish(heartbeatSubject(id), encodeHeartbeat({ identity: id, time: Date.now(), interval: 1, version: "test", phase: "serving", state: "up", status: {} }));
    const beatAt = Date.now();
    const read = async () => (JSON.parse((await health("--json", "--unreachable-after", "3", "-I", id)).stdout) as { nodes: { reachable: boolean; problems: { why: string }[] }[] }).nodes[0];
    await eventually(async () => ((await read())?.reachable === false ? true : undefined), 30_000, `${id} unreachable once quiet past 3 s`);
    // the console saw the store refuse its probes from just before the beat until now (still open):
    // by its silence alone the node would be left alone until 3 s after the stretch ends; asked, it does not answer
    await js.publish(serviceSubject("console", "console.example.net"), encodeServiceBeat({ name: "console.example.net", role: "console", time: Date.now(), interval: 10, version: "test", state: "up", checks: [], details: {}, lost: [{ from: beatAt - 1000, why: "jetstream is not enabled" }] }));
    const n = await read();
    assert.equal(n?.reachable, false, "asked through the stretch, and nothing answered");
    assert.match(n!.problems[0]!.why, /^no heartbeat for \d+ s \(one is due every 1 s; unreachable after 3 s\); it did not answer a ping$/);
  } finally {
    await nc.close();
  }
});

test("a node whose heartbeats the store lacks but which answers is asked before it is called unreachable: reachable while it answers, unreachable once it is gone, saying it did not answer", async () => {
  // a node that beats no more (heartbeats off) but serves: what a store's election leaves behind
  const fleet = join(tmp.path, "answers.yaml");
  const id = "answers.example.net";
  const { writeFileSync } = await import("node:fs");
  writeFileSync(fleet, `nodes:\n  - identity: ${id}\n    facts: {}\n`);
  const node = spawnMuster(["emulate", "--fleet", fleet, "--heartbeat", "0", "--broker", nats.url], { env });
  const nc = await connectNats(nats.url);
  try {
    await node.waitForLine(/ready/, 20_000);
    await jetstream(nc).publish(heartbeatSubject(id), encodeHeartbeat({ identity: id, time: Date.now(), interval: 1, version: "test", phase: "serving", state: "up", status: {} }));
    const read = async () => JSON.parse((await health("--json", "--unreachable-after", "3", "-I", id)).stdout) as { nodes: { reachable: boolean; last_seen: string; problems: { kind: string; why: string }[] }[] };
    // past its threshold since that one beat, and still reachable: it answered health's own ask
    await new Promise((r) => setTimeout(r, 4000)); // the node's silence itself, past --unreachable-after 3
    const asked = await read();
    assert.equal(asked.nodes[0]?.reachable, true, "a silent node that answers is reachable");
    await node.stop();
    const gone = await eventually(async () => {
      const n = (await read()).nodes[0];
      return n?.reachable === false ? n : undefined;
    }, 30_000, `${id} unreachable once it no longer answers`);
    // and it says it was asked: silence alone could be the store's
    assert.match(gone.problems.find((p) => p.kind === "unreachable")?.why ?? "", /^no heartbeat for \d+ s .*; it did not answer a ping$/);
  } finally {
    await node.stop();
    await nc.close();
  }
});

test("heartbeats the store cannot give (its broker back without JetStream): the nodes the last full read found are asked; both answer and are reachable; one gone is named unreachable, saying it did not answer", async () => {
  // a broker of its own: it is restarted without JetStream on the same address, as a store left
  // without a leader after a broker's loss answers no read while the nodes still answer pings
  let own: NatsHandle | undefined = await startNats({ jetstream: true });
  const port = own.port;
  const url = own.url;
  const { writeFileSync } = await import("node:fs");
  const emulated = (id: string) => {
    const file = join(tmp.path, `${id}.yaml`);
    writeFileSync(file, `nodes:\n  - identity: ${id}\n    facts: {}\n`);
    return spawnMuster(["emulate", "--fleet", file, "--heartbeat", "1", "--broker", url], { env });
  };
  const live = emulated("stays.example.net");
  const doomed = emulated("goes.example.net");
  type Report = { view: { degraded: boolean; why: string | null }; nodes: { identity: string; reachable: boolean; problems: { kind: string; why: string }[] }[] };
  const read = async () => {
    const r = await runCli(["health", "--json", "--unreachable-after", "3", "--broker", url], { env });
    return { report: JSON.parse(r.stdout) as Report, stderr: r.stderr };
  };
  const verdicts = (r: Report) => r.nodes.map((n) => [n.identity, n.reachable]);
  try {
    const stores = await runCli(["broker", "stores", "--broker", url], { env });
    assert.equal(stores.code, 0, stores.stderr);
    await Promise.all([live.waitForLine(/ready/, 20_000), doomed.waitForLine(/ready/, 20_000)]);
    // a full read that finds both: what the next read that cannot see starts from
    await eventually(async () => {
      const { report } = await read();
      return report.nodes.length === 2 && report.nodes.every((n) => n.reachable) && !report.view.degraded ? true : undefined;
    }, 20_000, "both nodes healthy in a full read");
    await own.stop();
    own = await startNats({ jetstream: false, port });
    // both back on the broker (they answer a ping), and past the 3 s limit since the last beat the store kept
    await eventually(async () => {
      const p = await runCli(["ping", "--broker", url, "-I", "stays.example.net", "-I", "goes.example.net"], { env });
      return /^2 replies /m.test(p.stdout) ? true : undefined;
    }, 30_000, "both nodes answering a ping through the broker without JetStream");
    await new Promise((r) => setTimeout(r, 3500)); // the nodes' remembered silence itself, past --unreachable-after 3
    const both = await read();
    assert.equal(both.report.view.degraded, true, "the view says it cannot read the heartbeats");
    assert.match(both.report.view.why ?? "", /heartbeats could not be read .*the 2 nodes an earlier read found .* are asked instead/);
    assert.deepEqual(verdicts(both.report), [["goes.example.net", true], ["stays.example.net", true]], "both answered: neither is called unreachable");
    await doomed.stop();
    const gone = await eventually(async () => {
      const { report } = await read();
      return report.nodes.find((n) => n.identity === "goes.example.net")?.reachable === false ? report : undefined;
    }, 30_000, "the gone node named unreachable while the heartbeats cannot be read");
    assert.deepEqual(verdicts(gone), [["goes.example.net", false], ["stays.example.net", true]]);
    assert.match(gone.nodes.find((n) => n.identity === "goes.example.net")!.problems.find((p) => p.kind === "unreachable")?.why ?? "", /; it did not answer a ping$/);
  } finally {
    await live.stop();
    await doomed.stop();
    await own?.stop();
  }
});
