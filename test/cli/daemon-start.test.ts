import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import { freePort, startNats, type NatsHandle } from "../support/index.js";
import { cleanEnv, eventually, runCli, spawnMuster, startMusterServer, tempDir, type MusterProcess } from "../support/collective.js";

// Daemons started before their broker say at once what they wait for (URL, last error, next
// attempt) and keep saying it; once a real nats-server comes up on that port they connect and say
// so. Every command finds the broker the same way: --broker, MUSTER_BROKER, the daemon's own
// config, then the client config (./.muster/client.yaml in the working directory).

const tmp = tempDir("daemon-start");
const env = cleanEnv(join(tmp.path, "config"));
const procs: MusterProcess[] = [];
let nats: NatsHandle | undefined;

after(async () => {
  await Promise.all(procs.map((p) => p.stop()));
  await nats?.stop();
  tmp.remove();
});

const waitStderr = (p: MusterProcess, re: RegExp, ms: number, what: string) => eventually(async () => (re.test(p.stderr()) ? true : undefined), ms, `${what}: ${re} on stderr (stderr so far: ${p.stderr().slice(-1500)})`);

test("server, registry serve, emulate and provisioner wait for a dead broker out loud, then connect", async () => {
  const port = await freePort();
  const url = `nats://127.0.0.1:${port}`;
  const waiting = new RegExp(`waiting for the broker at ${url.replace(/[.:/]/g, "\\$&")}.*: .+; next attempt in \\d+\\.\\ds`);

  const server = await startMusterServer({ identity: "waiter.test", broker: url }, { dir: tmp.path, env, waitReady: false });
  procs.push(server);
  const registry = spawnMuster(["registry", "serve", "--broker", url], { env });
  procs.push(registry);
  const emulate = spawnMuster(["emulate", "--count", "2"], { env: { ...env, MUSTER_BROKER: url } });
  procs.push(emulate);
  const provCfg = join(tmp.path, "provisioner.yaml");
  writeFileSync(provCfg, toYaml({ broker: url, loglevel: "debug", daemonize: false, sleeptime: 1, id: "prov-wait", state_bucket: "muster_daemon_start_test" }));
  const provisioner = spawnMuster(["provisioner", "--config", provCfg], { env });
  procs.push(provisioner);

  const daemons: [string, MusterProcess][] = [["server", server], ["registry serve", registry], ["emulate", emulate], ["provisioner", provisioner]];
  // said at the first refused attempt, and again at the next (the deadlines only catch a hang: four
  // processes starting beside CI's machines took over 5 s to say anything)
  await Promise.all(daemons.map(([name, p]) => waitStderr(p, waiting, 60_000, name)));
  await Promise.all(daemons.map(([name, p]) => eventually(async () => ((p.stderr().match(new RegExp(waiting, "g")) ?? []).length >= 2 ? true : undefined), 60_000, `${name} repeating the waiting message`)));
  assert.match(server.stderr(), /\(from the server config\)/);
  assert.match(registry.stderr(), /\(from --broker\)/);
  assert.match(emulate.stderr(), /\(from MUSTER_BROKER\)/);

  nats = await startNats({ port, jetstream: true });
  await Promise.all([server.waitForLine(/ready/, 40_000), registry.waitForLine(/ready/, 40_000), emulate.waitForLine(/ready/, 40_000)]);
  for (const [name, p] of daemons) await waitStderr(p, /connected to the broker at .* after \d+ attempts/, 40_000, name);
  // the provisioner logs each discovery at debug, the empty ones included
  await waitStderr(provisioner, /discovery of nodes waiting to be provisioned in collective \S+ \(agent provision, filter .*\): 0 found/, 20_000, "provisioner");
});

test("registry serve and a client command find the broker in ./.muster/client.yaml of their working directory", async () => {
  assert.ok(nats, "the previous test started the broker");
  const cwd = join(tmp.path, "checkout");
  mkdirSync(join(cwd, ".muster"), { recursive: true });
  writeFileSync(join(cwd, ".muster", "client.yaml"), toYaml({ brokers: [nats.url] }));
  const registry = spawnMuster(["registry", "serve"], { env, cwd });
  procs.push(registry);
  await registry.waitForLine(/ready/, 20_000);
  assert.doesNotMatch(registry.stderr(), /waiting for the broker/);
  assert.match(registry.stderr(), new RegExp(`connected to the broker at 127\\.0\\.0\\.1:${nats.port} \\(from \\S+/checkout/\\.muster/client\\.yaml\\)`));
  const find = await runCli(["find"], { env, cwd });
  assert.ok(find.code === 0 || find.code === 1, find.stderr); // reached the broker: nothing else here to find is fine
  assert.doesNotMatch(find.stderr, /cannot reach/);
});

test("provisioner --once at loglevel debug with nothing to provision logs what it asked and found", async () => {
  assert.ok(nats);
  const log = join(tmp.path, "once.log");
  const cfg = join(tmp.path, "once.yaml");
  writeFileSync(cfg, toYaml({ broker: nats.url, loglevel: "debug", logfile: log, daemonize: false, id: "prov-once", state_bucket: "muster_daemon_start_once", discovery_timeout: 1 }));
  const r = await runCli(["provisioner", "--config", cfg, "--once"], { env, timeoutMs: 30_000 });
  assert.equal(r.code, 0, r.stderr);
  const text = readFileSync(log, "utf8");
  assert.match(text, /discovery of nodes waiting to be provisioned in collective \S+ \(agent provision, filter \\"provision\(\)\.disabled=false and provision\(\)\.locked=false\\"\): 0 found/);
  assert.match(text, /one cycle done \(--once\)/);
});
