import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { cleanEnv, runCli, startBroker, startMusterServer, tempDir, type Broker, type CliResult, type TestServer } from "../support/collective.js";

// What `muster puppet summary` and `runonce` print for nodes that answer with a failure, against a
// real `muster server` hosting the puppet agent with its own (never run) Puppet directories.

const tmp = tempDir("puppet-output");
const env = cleanEnv(join(tmp.path, "config"));
const ID = "fresh.puppet.test";
let broker: Broker;
let server: TestServer;

before(async () => {
  broker = await startBroker();
  const dirs = Object.fromEntries(["confdir", "vardir", "ssldir"].map((k) => [k, join(tmp.path, k)]));
  for (const d of Object.values(dirs)) mkdirSync(d, { recursive: true });
  server = await startMusterServer({ identity: ID, broker: broker.url, config: { agents: { builtin: ["puppet"] }, plugins: { puppet: { ...dirs, server: "127.0.0.1", serverport: 1 } } } }, { dir: tmp.path, env });
});

after(async () => {
  await server?.stop();
  await broker?.dispose();
  tmp.remove();
});

const muster = (...args: string[]): Promise<CliResult> => runCli([...args, "--broker", broker.url, "--dt", "1", "-I", ID], { env });

test("puppet summary: a node where Puppet never ran is listed with its reason in the default output", async () => {
  const r = await muster("puppet", "summary");
  assert.equal(r.code, 2, r.stdout + r.stderr);
  assert.match(r.stdout, /^Summary statistics for 0 nodes:/m);
  assert.match(r.stdout, /^No summary from \(1\):$/m);
  assert.match(r.stdout, new RegExp(`^   ${ID.replace(/\./g, "\\.")}: no last run summary on .*: Puppet has not run here yet \\(unverified\\)$`, "m")); // no key directory here
  assert.match(r.stdout, /Pass \/ Fail: 0 \/ 1/);
});

test("puppet runonce on a disabled node: Started: false, and the tally counts it", async () => {
  const d = await muster("puppet", "disable", "maintenance window");
  assert.equal(d.code, 0, d.stdout + d.stderr);
  const r = await muster("puppet", "runonce");
  assert.equal(r.code, 2, r.stdout + r.stderr);
  assert.match(r.stdout, /Puppet is disabled on fresh\.puppet\.test: maintenance window/);
  assert.match(r.stdout, /^\s+Started: false$/m);
  const tally = r.stdout.slice(r.stdout.indexOf("Summary of Started:"));
  assert.match(tally, /^\s+true: 0$/m);
  assert.match(tally, /^\s+false: 1$/m);
  const count = await muster("puppet", "count");
  assert.match(count.stdout, /Nodes currently disabled: 1/);
});
