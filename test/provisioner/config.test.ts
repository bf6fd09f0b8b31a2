import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parse as parseYaml, stringify as toYaml } from "yaml";
import type { NatsConnection } from "@nats-io/transport-node";
import { MusterClient } from "../../src/client/client.js";
import { startEmulator, type RunningEmulator } from "../../src/emulator/emulator.js";
import { SimulatedCA, simulatedFactories } from "../../src/emulator/simulated.js";
import { silentLogger } from "../../src/log.js";
import { loadProvisionerConfig, ProvisionerConfigSchema } from "../../src/provisioner/config.js";
import { mkdirSync } from "node:fs";
import { enabledStages } from "../../src/provisioner/stages.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { cleanEnv, connectNats, repoRoot, runCli, tempDir } from "../support/collective.js";
import { startNats, type NatsHandle } from "../support/index.js";

// mcprovision's own example configuration (its README, verbatim in the fixture) and the step
// switches it has: accepted, run, and its undeliverable notify target reported at start-up.

const README = readFileSync(join(repoRoot, "test", "provisioner", "fixtures", "mcprovision-readme.yaml"), "utf8");
const dir = tempDir("provconfig");
let nats: NatsHandle;
let nc: NatsConnection;
let emu: RunningEmulator;
let client: MusterClient;
let env: NodeJS.ProcessEnv;
const ca = new SimulatedCA();

before(async () => {
  env = cleanEnv(join(dir.path, "keys"));
  process.env.MUSTER_CONFIG_DIR = join(dir.path, "keys");
  nats = await startNats({});
  nc = await connectNats(nats.url);
  client = await MusterClient.connect({ brokers: [nats.url], collective: "muster" });
});

after(async () => {
  await client?.close();
  await emu?.stop();
  await nc?.drain();
  await nats?.stop();
  dir.remove();
});

/** The README's text with only logfile and daemonize changed, as the test may. */
function readmeConfig(name: string): { file: string; log: string } {
  const log = join(dir.path, `${name}.log`);
  const text = README.replace("logfile: /var/log/mcprovision.log", `logfile: ${log}`).replace("daemonize: true", "daemonize: false");
  assert.notEqual(text, README, "the fixture still has the lines the test rewrites");
  const file = join(dir.path, `${name}.yaml`);
  writeFileSync(file, text);
  return { file, log };
}

test("the README's config parses: every step it names is switched as written", () => {
  assert.match(README, /^ {2}unlock: true$/m, "the fixture is mcprovision's README config");
  const cfg = ProvisionerConfigSchema.parse(parseYaml(README));
  assert.equal(cfg.steps.unlock, true);
  assert.equal(cfg.steps.notify, false);
  assert.deepEqual(cfg.master.criteria, ["ec2_placement_region", "country"]);
  assert.equal(cfg.target.filter, "");
  assert.deepEqual(enabledStages(cfg.steps), ["lock", "set_puppet_host", "clean_cert", "request_csr", "sign_csr", "bootstrap", "production", "unlock", "disable"]);
  assert.ok(readFileSync(join(repoRoot, "docs", "provisioner.md"), "utf8").includes(`\`\`\`yaml\n${README}\`\`\``), "docs/provisioner.md quotes the same text");
});

test("unlock follows lock unless set; every step key mcprovision had is accepted", () => {
  const st = (steps: Record<string, boolean>) => enabledStages(ProvisionerConfigSchema.parse({ steps, master: {} }).steps);
  assert.deepEqual(st({ lock: true }), ["lock", "unlock", "disable"]);
  assert.deepEqual(st({ lock: true, unlock: false }), ["lock", "disable"]);
  assert.deepEqual(st({ lock: false, unlock: true }), ["unlock", "disable"], "unlock alone releases a lock someone else took, as mcprovision did");
  const all = { lock: true, unlock: true, set_puppet_hostname: true, clean_node_certname: true, send_node_csr: true, sign_node_csr: true, puppet_bootstrap_stage: true, puppet_final_run: true, puppet_daemonize: true, notify: true };
  assert.equal(st(all).length, 11);
});

test("typos are refused naming the nearest valid key", () => {
  const issues = (x: unknown) => ProvisionerConfigSchema.safeParse(x).error?.issues.map((i) => `${i.path.join(".")}: ${i.message}`) ?? [];
  assert.deepEqual(issues({ steps: { lokc: true } }), ['steps: unknown step "lokc"; did you mean "lock"?']);
  assert.deepEqual(issues({ steps: { unlcok: true } }), ['steps: unknown step "unlcok"; did you mean "unlock"?']);
  assert.deepEqual(issues({ concurency: 3 }), [': unknown key "concurency"; did you mean "concurrency"?']);
  assert.deepEqual(issues({ master: { criterai: [] } }), ['master: unknown master key "criterai"; did you mean "criteria"?']);
  const far = issues({ steps: { reboot: true } });
  assert.equal(far.length, 1);
  assert.match(far[0]!, /unknown step "reboot" \(valid: lock, unlock, set_puppet_hostname/);
});

test("role filters are checked when the config is read: syntax, data plugins and fields, plugins of your own by DDL", () => {
  const file = join(dir.path, "filters.yaml");
  const load = (cfg: Record<string, unknown>) => {
    writeFileSync(file, toYaml(cfg));
    return () => loadProvisionerConfig(file);
  };
  assert.throws(load({ target: { filter: "provision().lockd=false" } }), /target\.filter: provision\(\) has no field 'lockd'; did you mean 'locked'\? \(its fields: locked, disabled\) at column 13\n {4}provision\(\)\.lockd=false\n {4} {12}\^/);
  assert.throws(load({ master: { filter: "region=eu and (" } }), /master\.filter: expected a statement after '\(' at column 16/);
  assert.throws(load({ notify: { filter: "rack().row=1" } }), /notify\.filter: unknown data plugin 'rack'/);
  mkdirSync(join(dir.path, "ddl", "data"), { recursive: true });
  writeFileSync(join(dir.path, "ddl", "data", "rack.json"), JSON.stringify({ metadata: { name: "rack", description: "racks" }, output: { row: { description: "Row" } } }));
  assert.equal(load({ notify: { filter: "rack().row=1" }, ddl_directories: [join(dir.path, "ddl")] })().notify.filter, "rack().row=1");
  assert.equal(load({})().target.filter, "provision().disabled=false and provision().locked=false", "the default target filter passes");
});

test("muster provisioner accepts the README verbatim, reports the boxcar target once at start-up and runs", async () => {
  const { file, log } = readmeConfig("readme");
  const r = await runCli(["provisioner", "--config", file, "--once", "--broker", nats.url], { env, timeoutMs: 60_000 });
  assert.equal(r.code, 0, `exit ${r.code}: ${r.stderr}`);
  const lines = readFileSync(log, "utf8").split("\n").filter(Boolean);
  const boxcar = lines.filter((l) => l.includes("boxcar://you@example.com"));
  assert.equal(boxcar.length, 1, `reported exactly once:\n${lines.join("\n")}`);
  const entry = JSON.parse(boxcar[0]!) as { level: number; msg: string };
  assert.equal(entry.level, 40, "a warning: steps.notify is false, so nothing needs the target");
  assert.match(entry.msg, /notify\.targets\[0\] "boxcar:\/\/you@example\.com" cannot be delivered: unknown scheme "boxcar:" \(use http:, https:, mailto: or exec:\)/);
});

test("with steps.notify on, an undeliverable target stops the provisioner before it starts", async () => {
  const { file } = readmeConfig("notify-on");
  writeFileSync(file, readFileSync(file, "utf8").replace("  notify: false", "  notify: true"));
  const r = await runCli(["provisioner", "--config", file, "--once", "--broker", nats.url], { env });
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /notify\.targets\[0\] "boxcar:\/\/you@example\.com" cannot be delivered: unknown scheme "boxcar:" \(use http:, https:, mailto: or exec:\)/);
  assert.match(r.stderr, /set steps\.notify: false/);
});

test("a typo in steps is refused by the command with the nearest key", async () => {
  const file = join(dir.path, "typo.yaml");
  writeFileSync(file, "steps:\n  lokc: true\n");
  const r = await runCli(["provisioner", "--config", file, "--once", "--broker", nats.url], { env });
  assert.equal(r.code, 1);
  assert.match(r.stderr, /steps: unknown step "lokc"; did you mean "lock"\?/);
});

test("lock: true, unlock: false leaves the lock in place on a provisioned node; unlock left out releases it", async () => {
  const fleet = [
    { identity: "keep.test", facts: { ipaddress: "127.2.9.1", group: "keep" }, classes: [], agents: ["provision"] },
    { identity: "release.test", facts: { ipaddress: "127.2.9.2", group: "release" }, classes: [], agents: ["provision"] },
    { identity: "master.test", facts: { ipaddress: "127.3.9.1" }, classes: [], agents: ["puppetca"] },
  ];
  emu = await startEmulator({ nc, nodes: fleet, collective: "muster", log: silentLogger, factories: simulatedFactories(ca, { puppetRunMs: [5, 10], csrMs: 1 }) });
  const run = async (name: string, group: string, steps: Record<string, boolean>) => {
    const file = join(dir.path, `${name}.yaml`);
    // disable_provisioner off: a disabled node no longer offers the agent to ask about its lock
    writeFileSync(file, toYaml({ id: name, logfile: join(dir.path, `${name}.log`), steps: { ...steps, puppet_final_run: true, disable_provisioner: false }, target: { filter: `group=${group}` }, discovery_timeout: 1 }));
    const r = await runCli(["provisioner", "--config", file, "--once", "--broker", nats.url], { env, timeoutMs: 60_000 });
    assert.equal(r.code, 0, r.stderr);
  };
  await run("prov-keep", "keep", { lock: true, unlock: false });
  await run("prov-release", "release", { lock: true });
  const store = await ProvisionState.open(client, "muster_provision");
  for (const id of ["keep.test", "release.test"]) assert.equal((await store.get(id))?.record.status, "done", id);
  const res = await client.call("provision", "is_locked", {}, { nodes: ["keep.test", "release.test"] });
  const locked = Object.fromEntries(res.replies.map((r) => [r.sender, r.data]));
  assert.equal(locked["keep.test"]?.locked, true, "unlock: false keeps the lock");
  assert.equal(locked["keep.test"]?.owner, "prov-keep");
  assert.equal(locked["release.test"]?.locked, false, "unlock follows lock when left out");
  // the lock shows in discovery, as mcprovision's filters used it
  const find = await runCli(["find", "--broker", nats.url, "-S", "provision().locked=true"], { env });
  assert.equal(find.stdout, "keep.test\n", find.stderr);
});
