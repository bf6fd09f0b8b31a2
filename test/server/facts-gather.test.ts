import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import type { NatsConnection } from "@nats-io/transport-node";
import { MusterClient } from "../../src/client/client.js";
import { buildFilter } from "../../src/filter/index.js";
import { heartbeatSubject } from "../../src/protocol/heartbeat.js";
import { execCommand } from "../../src/puppet/exec.js";
import { cleanEnv, connectNats, eventually, record, spawnMuster, startBroker, tempDir, type Broker, type MusterProcess, type Recorder } from "../support/collective.js";

// When the node gathers Puppet's view of its facts (`puppet facts show`, as root: through the
// privileged helper on a packaged node, so each gather starts it): at start, after each Puppet
// run, and otherwise every facts.gather_interval. The real `muster server`, the real Puppet; the
// fact changed is an external fact in the node's Puppet vardir (facts.d), which `puppet facts
// show` reads as a run does. Both intervals are an hour here: what changes, changes by a run.

const tmp = tempDir("facts-gather");
process.env.MUSTER_CONFIG_DIR = join(tmp.path, "config");
const env = cleanEnv(process.env.MUSTER_CONFIG_DIR);
const identity = "db1.facts-gather.test";
const base = join(tmp.path, identity);
const dirs = { confdir: join(base, "etc"), vardir: join(base, "var"), ssldir: join(base, "ssl") };
const factFile = join(dirs.vardir, "facts.d", "muster_gather.txt");

let broker: Broker;
let nc: NatsConnection;
let client: MusterClient;
let beats: Recorder;
let server: MusterProcess;

before(async () => {
  broker = await startBroker();
  nc = await connectNats(broker.url);
  beats = record(nc, heartbeatSubject(identity));
  await nc.flush();
  client = await MusterClient.connect({ nc });
  mkdirSync(dirs.confdir, { recursive: true });
  mkdirSync(join(dirs.vardir, "facts.d"), { recursive: true });
  writeFileSync(factFile, "muster_gather=one\n");
  const configFile = join(tmp.path, "server.yaml");
  writeFileSync(
    configFile,
    toYaml({ identity, brokers: [broker.url], facts: { facter: true, refresh_interval: 3600, gather_interval: 3600 }, heartbeat: { interval: 1 }, agents: { builtin: ["puppet"] }, plugins: { puppet: dirs }, registration: { interval: 3600, splay: false }, log: { level: "info" } }),
  );
  server = spawnMuster(["server", "--config", configFile], { env });
  await server.waitForLine(/ready/, 90_000);
});

after(async () => {
  await server?.stop();
  await client?.close();
  await nc?.drain().catch(() => undefined);
  await broker?.dispose();
  tmp.remove();
});

const found = async (fact: string) => (await client.discover({ filter: buildFilter({ fact: [fact] }), timeoutMs: 1500 })).includes(identity);

test("a Puppet run's end makes the server gather Puppet's facts again; heartbeats without a run do not", async () => {
  assert.ok(await found("muster_gather=one"), "the fact as it was at start");
  writeFileSync(factFile, "muster_gather=two\n");
  // two heartbeats after the change, no run between them: nothing gathered
  const from = beats.messages.length;
  await beats.waitFor(() => beats.messages.length >= from + 2, 30_000, "two heartbeats");
  assert.ok(await found("muster_gather=one"), "still the start's facts: no run, and gather_interval is an hour");
  assert.ok(!(await found("muster_gather=two")));
  // a real Puppet run (apply writes last_run_summary.yaml as an agent run does, in the publicdir the
  // node's Puppet settings name: Debian's puppet.conf points it at the system's otherwise); the
  // next heartbeat carries it
  const args = ["apply", "--confdir", dirs.confdir, "--vardir", dirs.vardir, "--publicdir", join(dirs.vardir, "public"), "--codedir", join(base, "code"), "--logdir", join(base, "log"), "--rundir", join(base, "run"), "-e", "notify { 'a run': }"];
  const r = await execCommand("puppet", args, { timeoutMs: 120_000 });
  assert.equal(r.code, 0, r.output);
  await eventually(async () => ((await found("muster_gather=two")) ? true : undefined), 60_000, "-F muster_gather=two after the run").catch((e: Error) => {
    throw new Error(`${e.message}; the last heartbeat: ${new TextDecoder().decode(beats.messages.at(-1)?.data)}`);
  });
});
