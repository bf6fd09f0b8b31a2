import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import { waitRegistered } from "../support/registry.js";
import { cleanEnv, cliPath, connectNats, repoRoot, runCli, spawnMuster, startMusterServer, tempDir, type MusterProcess, type TestServer } from "../support/collective.js";
import type { DocCommand } from "../support/doc-commands.js";
import { docVerdict, killGroup, readDocs, RUN_ELSEWHERE, runShell, type Ran } from "../support/doc-run.js";
import { startNats, type NatsHandle } from "../support/index.js";
import { MusterClient } from "../../src/client/client.js";
import { DEFAULT_NODE_KEYS_BUCKET } from "../../src/protocol/buckets.js";
import { encodeNodeKeyEntry, nodeKeyName } from "../../src/protocol/node-keys.js";
import { generateSigningKey, signingKeyFromPem } from "../../src/protocol/signing.js";

// Docs that run. Every command shown in a fenced `sh`/`bash`/`console` block of README.md, docs/
// (decisions included) and examples/agents/README.md is, in exactly one way:
//
//   (a) run here, through /bin/sh with this checkout's `muster` first on PATH, against one real
//       nats-server (JetStream, TLS), an emulated fleet (`muster emulate --fleet`), two real
//       `muster server` nodes (real nrpe, resource, puppet, provision and external agents on temp
//       directories) and a registry daemon; its exit code must be the one the doc states
//       (`# exit N`, else 0) and its shown output must match (see test/support/doc-commands.ts
//       and docs/README.md for the conventions: `...`, `<!-- illustrative -->`, `text` blocks);
//   (b) run, as written, by the test file RUN_ELSEWHERE (test/support/doc-run.ts) gives it to,
//       against what only that file has (the lab's booted machines, a real puppetserver); that
//       file fails unless it ran every one;
//   (c) listed in CANNOT_RUN with why no test can run it (it writes what the repository keeps, it is
//       the suite itself). The test prints how many there are, and fails when there are more than
//       CANNOT_RUN_AT_MOST: the list only shrinks.
//
// A new doc command is run as it stands: if it cannot run here it fails until it is made to run,
// or given to a file in (b) or listed in (c). Entries of (b) and (c) that match no doc command fail too.
//
// Commands run in a scratch directory holding the files the docs name (registry.yaml, fleet.yaml,
// examples/ as a link to the checkout's, token) with MUSTER_CONFIG naming a client config for the
// broker. A fake `ssh` on PATH records its argv. Daemons (`muster registry serve`, `muster emulate`,
// `muster server`, `muster web`, `muster provisioner` without --once) and the left side of `A & B`
// run until they print their `ready` line (the provisioner: its `provisioner running` log line),
// then get SIGTERM and must exit 0. A command naming a file under /etc/muster runs in a mount
// namespace of its own whose /etc is an overlay holding that file (root only), so the machine's
// /etc is never touched.
//
// The fixture (node names, facts, classes, agents) is below; doc examples use its names.

/** Doc commands no test can run, and why. */
const CANNOT_RUN: Record<string, string> = {
  "./scripts/test.sh": "it is the suite itself: CI runs it (.ci/run)",
  "npm run bench": "a benchmark: it rebuilds dist/ (which the suite's other files run from) and overwrites the committed bench/results/latest.json, the figures docs/bench.md quotes",
  "npm run bench -- --nodes 10000 --rounds 9": "a benchmark: it rebuilds dist/ and overwrites the committed bench/results/latest.json",
  "node dist/bench/run.js --rss-only": "a benchmark: it overwrites the committed bench/results/latest.json",
  "node dist/bench/run.js --no-rss --nodes 1000": "a benchmark: it overwrites the committed bench/results/latest.json",
  "node dist/bench/run.js --no-rss --nodes 10000 --profile /tmp/prof": "a benchmark: it overwrites the committed bench/results/latest.json",
  "node --cpu-prof --cpu-prof-dir=/tmp/prof dist/bench/run.js --no-rss": "a benchmark: it overwrites the committed bench/results/latest.json",
  "npm run bench:cli": "a benchmark: it rebuilds dist/ and overwrites the committed bench/results/cli-start.json",
  "node dist/bench/cli-start.js --no-find --rounds 9": "a benchmark: it overwrites the committed bench/results/cli-start.json",
  "npm run bench:health": "a benchmark: it rebuilds dist/ and overwrites the committed bench/results/health.json",
  "muster resource package htop ensure=installed -F os.family=Debian": "installs a package from Debian's mirror through Puppet: on this machine it would change it, and the lab's machines have no route to a mirror",
  "muster resource package htop ensure=installed -C base": "installs a package from Debian's mirror through Puppet: on this machine it would change it, and the lab's machines have no route to a mirror",
  "muster resource service nginx ensure=running -F role=web": "starts nginx through Puppet, which no machine here has (installing it needs Debian's mirror, as above)",
};
/** The size CANNOT_RUN may not exceed: lower it when an entry goes, never raise it. */
const CANNOT_RUN_AT_MOST = 13;

/**
 * Doc commands that fail the doc today because of a behaviour bug of issue 14 (items 1-10). `today`
 * recognises the bug's own symptom, so a command failing for another reason is not excused.
 */
const KNOWN_FAILING: Record<string, { item: number; why: string; today: (r: Ran) => boolean }> = {
};

/** Further checks for commands whose effect is not in their output, or whose output no doc shows. */
const CHECKS: Record<string, (ctx: { sshArgv: () => string[]; ran: Ran }) => void> = {
  // curl exits 0 whatever the status: the answer must be the registry's, for the token in ./token
  "curl -H \"Authorization: Bearer $(cat token)\" 'http://127.0.0.1:8089/nodes?fact=country=de&select=web'": ({ ran }) => {
    const body = JSON.parse(ran.stdout) as { count: number; nodes: { identity: string }[] };
    assert.deepEqual(body.nodes.map((n) => n.identity), ["web1.example.net"], ran.stdout);
  },
  "muster ssh -F role=db": ({ sshArgv }) => assert.deepEqual(sshArgv(), ["db1.example.net"], "ssh should be run with the one matching node"),
  "muster ssh -I web1.example.net -- -l admin uptime": ({ sshArgv }) => assert.deepEqual(sshArgv(), ["web1.example.net", "-l", "admin", "uptime"]),
  "muster ssh -F role=web": ({ sshArgv }) => assert.deepEqual(sshArgv(), [], "several matches without a terminal: ssh must not run"),
};

/** Daemons, and the line that says each is ready. */
const DAEMONS: [RegExp, RegExp][] = [
  [/^muster registry serve\b/, /ready/],
  [/^muster emulate\b/, /ready/],
  [/^muster server\b/, /ready/],
  [/^muster web\b/, /ready/],
  [/^muster provisioner\b(?!.*--once)/, /provisioner running/],
];
const readyLine = (cmd: string) => DAEMONS.find(([d]) => d.test(cmd))?.[1];

/** Files under /etc/muster the docs' commands name, with what the fixture puts there. */
const ETC_FILES = /\/etc\/muster\/(server|provisioner)\.yaml\b/;
const root = process.getuid?.() === 0;

// ---- the docs ----

const extracted = readDocs();
const commands: DocCommand[] = extracted.flatMap((e) => e.commands);
const problems = extracted.flatMap((e) => e.problems);
const elsewhere = new Map(Object.entries(RUN_ELSEWHERE).flatMap(([file, e]) => e.commands.map((c) => [c, file] as const)));

test("the docs follow the command conventions (docs/README.md)", () => {
  assert.deepEqual(problems, []);
  assert.ok(commands.length > 40, `only ${commands.length} commands found: is the extractor still reading the docs?`);
});

test("every RUN_ELSEWHERE, CANNOT_RUN and KNOWN_FAILING entry is a doc command, in one list only; RUN_ELSEWHERE names existing test files", () => {
  const shown = new Set(commands.map((c) => c.text));
  const listed = [...elsewhere.keys(), ...Object.keys(CANNOT_RUN), ...Object.keys(KNOWN_FAILING)];
  assert.deepEqual([...listed, ...Object.keys(CHECKS)].filter((c) => !shown.has(c)), [], "no doc shows these any more: remove them from the lists (test/docs/commands.test.ts, test/support/doc-run.ts)");
  assert.deepEqual(listed.filter((c, i) => listed.indexOf(c) !== i), [], "in more than one list");
  for (const file of Object.keys(RUN_ELSEWHERE)) assert.ok(existsSync(join(repoRoot, file)), `RUN_ELSEWHERE names ${file}, which does not exist`);
  for (const [cmd, why] of Object.entries(CANNOT_RUN)) assert.ok(why.length > 20, `${cmd}: say why it cannot run`);
  for (const [cmd, k] of Object.entries(KNOWN_FAILING)) assert.ok(k.item >= 1 && k.item <= 10, `${cmd}: item ${k.item} is not one of issue 14's behaviour items`);
});

// ---- the fixture ----

const tmp = tempDir("docs");
const scratch = join(tmp.path, "cwd");
const bin = join(tmp.path, "bin");
const sshLog = join(tmp.path, "ssh-argv.txt");
const configDir = join(tmp.path, "config");
const RESOURCE_EXAMPLE = "/tmp/x"; // the file docs/fleet.md's rpc example makes; removed again if it was not there
const resourceExampleExisted = existsSync(RESOURCE_EXAMPLE);
let nats: NatsHandle;
let env: NodeJS.ProcessEnv;
const daemons: MusterProcess[] = [];
const servers: TestServer[] = [];

/** The emulated nodes (`muster emulate --fleet`): only the always-loaded agents. */
const FLEET = [
  { identity: "node01.eu.lab", facts: { country: "de", role: "app", os: { family: "Debian" }, memorysize_mb: 4096 }, classes: ["base"], agents: [] },
  { identity: "db1.example.net", facts: { country: "de", role: "db", os: { family: "Debian" }, memorysize_mb: 16384 }, classes: ["base", "mysql"], agents: [] },
  { identity: "web3.example.net", facts: { country: "us", role: "web", os: { family: "Debian" }, memorysize_mb: 2048 }, classes: ["base", "web", "webserver"], agents: [] },
  { identity: "web4.example.net", facts: { country: "uk", role: "web", os: { family: "RedHat" }, memorysize_mb: 1024 }, classes: ["base", "web"], agents: [] },
];

function script(path: string, body: string): void {
  writeFileSync(path, `#!/bin/sh\n${body}\n`);
  chmodSync(path, 0o755);
}

/** A real `muster server` with nrpe, resource, puppet and provision on temp directories. */
async function realNode(identity: string, facts: Record<string, unknown>, classes: string[], o: { load: string; state: number; disabled?: string; external?: boolean }): Promise<TestServer> {
  const dir = join(tmp.path, identity);
  const nrpe = join(dir, "nrpe.d");
  const puppet = { confdir: join(dir, "puppet", "conf"), vardir: join(dir, "puppet", "var"), ssldir: join(dir, "puppet", "ssl"), rundir: join(dir, "puppet", "run"), publicdir: join(dir, "puppet", "public") };
  for (const d of [nrpe, ...Object.values(puppet), join(puppet.vardir, "state")]) mkdirSync(d, { recursive: true });
  script(join(dir, "check_load"), `echo "${o.load}|load1=${o.state}"\nexit ${o.state}`);
  writeFileSync(join(nrpe, "checks.cfg"), `command[check_load]=${join(dir, "check_load")}\n`);
  if (o.disabled) writeFileSync(join(puppet.vardir, "state", "agent_disabled.lock"), JSON.stringify({ disabled_message: o.disabled }));
  return startMusterServer(
    {
      identity,
      broker: nats.url,
      facts,
      classes,
      config: {
        registration: { interval: 1, splay: false },
        agents: { builtin: ["nrpe", "resource", "puppet", "provision"], ...(o.external ? { directory: join(repoRoot, "examples", "agents") } : {}) },
        plugins: {
          nrpe: { conf_dir: nrpe },
          // docs/fleet.md writes and shows /tmp/x
          resource: { allowed_types: ["file"], file_paths: ["/tmp"], confdir: puppet.confdir, vardir: puppet.vardir },
          puppet: { ...puppet, server: "127.0.0.1", serverport: 1 },
          provision: { ...puppet, lock_file: join(dir, "deploy.lock"), disable_file: join(dir, "disabled") },
        },
      },
    },
    { dir: tmp.path, env },
  );
}

/**
 * The node-key directory as the provisioner leaves it for provisioned nodes (`certified`), for the
 * two real nodes: their replies show verified, as on a provisioned fleet; the emulated nodes stay
 * unknown to it, as hand-made ones are (docs/security.md, "Verifying replies").
 */
async function certify(identities: string[]): Promise<void> {
  const c = await MusterClient.connect({ brokers: [nats.url], collective: "muster", key: generateSigningKey("docs-test").key });
  try {
    const kv = await c.bucket(DEFAULT_NODE_KEYS_BUCKET, { create: { history: 1 } });
    for (const id of identities) {
      const pubkey = signingKeyFromPem(id, readFileSync(join(configDir, "nodes", `${id}.key`), "utf8")).publicKey;
      await kv.put(nodeKeyName(id), encodeNodeKeyEntry({ identity: id, pubkey, source: "certified", time: Date.now(), by: "docs test" }));
    }
  } finally {
    await c.close();
  }
}

async function registered(identities: string[], timeoutMs: number): Promise<void> {
  const nc = await connectNats(nats.url);
  try {
    await waitRegistered(nc, identities, { timeoutMs });
  } finally {
    await nc.drain();
  }
}

/** docs/registry.md's curl asks 127.0.0.1:8089: the fixture's registry serves there. */
const REGISTRY_HTTP_PORT = 8089;

/** Resolves once nothing listens on the port (another run of this file on the machine may hold it a while). */
async function portFree(port: number, timeoutMs: number): Promise<void> {
  const free = () =>
    new Promise<boolean>((resolve) => {
      const srv = createServer();
      srv.once("error", () => resolve(false));
      srv.listen(port, "127.0.0.1", () => srv.close(() => resolve(true)));
    });
  for (const until = Date.now() + timeoutMs; !(await free()); await new Promise((r) => setTimeout(r, 500))) {
    if (Date.now() > until) throw new Error(`127.0.0.1:${port} stayed taken for ${timeoutMs / 1000} s: docs/registry.md's curl needs it for the fixture's registry`);
  }
}

/** What /etc/muster holds for the commands that name it (ETC_FILES): configs for this fixture's broker. */
const etcDir = join(tmp.path, "etc-muster");
function writeEtcFiles(): void {
  mkdirSync(etcDir, { recursive: true });
  const dir = join(tmp.path, "etc-node");
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "facts.yaml"), toYaml({ country: "de" }));
  // a node and a provisioner of a collective of their own: the fixture's fleet does not see them
  writeFileSync(join(etcDir, "server.yaml"), toYaml({ identity: "etc.example.net", brokers: [nats.url], collectives: ["etcdocs"], facts: { facter: false, file: join(dir, "facts.yaml") }, log: { level: "warn" } }));
  writeFileSync(join(etcDir, "provisioner.yaml"), toYaml({ id: "etc-docs", broker: nats.url, collective: "etcdocs", state_bucket: "etcdocs_provision", loglevel: "info", notify: { targets: ["http://127.0.0.1:9/"] } }));
}

/**
 * The command in a mount namespace of its own whose /etc is an overlay of the machine's with
 * /etc/muster holding the fixture's files: the command reads the path it names, the machine's /etc
 * stays as it is.
 */
function withPrivateEtc(command: string): string {
  const ov = join(tmp.path, `etc-overlay-${Math.random().toString(36).slice(2, 8)}`);
  for (const d of ["upper", "work", "merged"]) mkdirSync(join(ov, d), { recursive: true });
  const setup = [
    "set -e",
    "mount --make-rprivate /",
    `mount -t overlay overlay -o lowerdir=/etc,upperdir=${ov}/upper,workdir=${ov}/work ${ov}/merged`,
    `mount --bind ${ov}/merged /etc`,
    "mkdir -p /etc/muster",
    `cp ${etcDir}/server.yaml ${etcDir}/provisioner.yaml /etc/muster/`,
    `exec ${command}`,
  ].join("\n");
  return `unshare -m sh -c '${setup.replace(/'/g, `'\\''`)}'`;
}

before(async () => {
  for (const d of [scratch, bin, configDir]) mkdirSync(d, { recursive: true });
  nats = await startNats();
  script(join(bin, "muster"), `exec ${JSON.stringify(process.execPath)} ${JSON.stringify(cliPath)} "$@"`);
  script(join(bin, "ssh"), `: > ${sshLog}\nfor a in "$@"; do printf '%s\\n' "$a" >> ${sshLog}; done`);
  symlinkSync(join(repoRoot, "examples"), join(scratch, "examples"));
  writeFileSync(join(scratch, "client.yaml"), toYaml({ brokers: [nats.url] }));
  writeFileSync(join(scratch, "registry.yaml"), toYaml({ broker: nats.url, log: { level: "warn" } }));
  // the fixture's own registry serves HTTP where docs/registry.md's curl asks (its token in ./token)
  writeFileSync(join(scratch, "token"), "docs-registry-token-5b1e\n", { mode: 0o600 });
  writeFileSync(join(tmp.path, "fixture-registry.yaml"), toYaml({ broker: nats.url, log: { level: "warn" }, http: { host: "127.0.0.1", port: REGISTRY_HTTP_PORT, token_file: join(scratch, "token") } }));
  writeEtcFiles();
  writeFileSync(join(scratch, "fleet.yaml"), toYaml({ nodes: FLEET }));
  env = cleanEnv(configDir, { PATH: `${bin}:${process.env.PATH ?? ""}`, MUSTER_CONFIG: join(scratch, "client.yaml"), MUSTER_BROKER: nats.url });

  // what a fleet's admin (or its console) makes once: where nodes write heartbeats and Puppet runs
  const stores = await runCli(["broker", "stores"], { env, cwd: scratch });
  assert.equal(stores.code, 0, stores.stderr);
  await portFree(REGISTRY_HTTP_PORT, 120_000);
  const registry = spawnMuster(["registry", "serve", "--config", join(tmp.path, "fixture-registry.yaml")], { env, cwd: scratch });
  daemons.push(registry);
  await registry.waitForLine(/ready/, 20_000);
  const emulator = spawnMuster(["emulate", "--fleet", join(scratch, "fleet.yaml"), "--registration", "1"], { env, cwd: scratch });
  daemons.push(emulator);
  const real = Promise.all([
    realNode("web1.example.net", { country: "de", role: "web", os: { family: "Debian" }, memorysize_mb: 8192 }, ["base", "web", "webserver", "apache", "apache::mod::ssl"], { load: "OK - load average: 0.12, 0.10, 0.08", state: 0, external: true }),
    realNode("web2.example.net", { country: "uk", role: "web", os: { family: "Debian" }, memorysize_mb: 4096 }, ["base", "web", "apache"], { load: "WARNING - load average: 5.12, 4.01, 3.20", state: 1, disabled: "maintenance by jane" }),
  ]);
  servers.push(...(await real));
  await emulator.waitForLine(/ready/, 30_000);
  await registered([...FLEET.map((n) => n.identity), "web1.example.net", "web2.example.net"], 20_000);
  await certify(["web1.example.net", "web2.example.net"]);
});

after(async () => {
  for (const g of groups) killGroup(g, "SIGKILL");
  await Promise.all([...servers, ...daemons].map((p) => p.stop()));
  await nats?.stop();
  if (!resourceExampleExisted) rmSync(RESOURCE_EXAMPLE, { force: true });
  tmp.remove();
});

// ---- running a doc command ----

/** Process groups of `A & B`'s A still running: killed at the end whatever happens. */
const groups = new Set<number>();
process.once("exit", () => {
  for (const g of groups) killGroup(g, "SIGKILL");
});

/** Runs a doc command as the docs mean it: a daemon until ready, `A & B` as A ready then B. */
async function run(cmd: DocCommand): Promise<Ran> {
  const o = { cwd: scratch, env };
  const parts = cmd.text.split(/ & /);
  if (parts.length === 2) {
    const bg = spawn("/bin/sh", ["-c", `exec ${parts[0]}`], { cwd: scratch, env, stdio: ["ignore", "pipe", "pipe"], detached: true });
    groups.add(bg.pid!);
    let out = "";
    let err = "";
    bg.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const ready = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${parts[0]} printed no ready line within 30 s:\nstdout: ${out}\nstderr: ${err}`)), 30_000);
      bg.stdout.on("data", (d: Buffer) => {
        out += d.toString();
        if (/ready/.test(out)) {
          clearTimeout(timer);
          resolve();
        }
      });
      bg.once("close", (code) => {
        clearTimeout(timer);
        reject(new Error(`${parts[0]} exited ${code} before it was ready:\nstdout: ${out}\nstderr: ${err}`));
      });
    });
    const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => bg.once("close", (code, signal) => resolve({ code, signal })));
    try {
      await ready;
      return await runShell(parts[1]!, o);
    } finally {
      killGroup(bg.pid!, "SIGTERM");
      const t = setTimeout(() => killGroup(bg.pid!, "SIGKILL"), 10_000);
      const end = await closed;
      clearTimeout(t);
      groups.delete(bg.pid!);
      assert.deepEqual(end, { code: 0, signal: null }, `${parts[0]} should stop cleanly on SIGTERM`);
    }
  }
  const text = ETC_FILES.test(cmd.text) ? withPrivateEtc(cmd.text) : cmd.text;
  return runShell(text, { ...o, until: readyLine(cmd.text) });
}

describe("every doc command", () => {
  const counts = { run: 0, elsewhere: 0, cannot: 0, failing: 0 };
  for (const cmd of commands) {
    const where = `${cmd.file}:${cmd.line}: ${cmd.text}`;
    const by = elsewhere.get(cmd.text);
    if (by) {
      counts.elsewhere++;
      test(where, { skip: `run by ${by} (${RUN_ELSEWHERE[by]!.has})` }, () => undefined);
      continue;
    }
    const cannot = CANNOT_RUN[cmd.text];
    if (cannot) {
      counts.cannot++;
      test(where, { skip: `cannot run: ${cannot}` }, () => undefined);
      continue;
    }
    const known = KNOWN_FAILING[cmd.text];
    if (known) counts.failing++;
    else counts.run++;
    const needsRoot = ETC_FILES.test(cmd.text) && !root && "needs root: it runs in a mount namespace whose /etc holds the file it names";
    test(where, { timeout: 90_000, skip: needsRoot }, async (t) => {
      if (existsSync(sshLog)) rmSync(sshLog);
      const r = await run(cmd);
      if (process.env.MUSTER_DOCS_VERBOSE) t.diagnostic(`exit ${r.code ?? r.signal}\n${r.stdout}${r.stderr}`);
      const why = docVerdict(cmd, r);
      if (known) {
        assert.ok(why, `${where} now does what the doc says: issue 14 item ${known.item} is fixed, so remove it from KNOWN_FAILING`);
        assert.ok(known.today(r), `${where} fails, but not as item ${known.item} (${known.why}) made it fail: ${why}`);
        return;
      }
      assert.equal(why, undefined, why);
      CHECKS[cmd.text]?.({ ran: r, sshArgv: () => (existsSync(sshLog) ? readFileSync(sshLog, "utf8").split("\n").slice(0, -1) : []) });
    });
  }
  test("tally: every doc command is run here, run by the file RUN_ELSEWHERE names, or cannot run; the last list does not grow", (t) => {
    t.diagnostic(`doc commands: ${commands.length}; run here ${counts.run}, run by another test file ${counts.elsewhere}, cannot run ${counts.cannot}, known failing ${counts.failing}`);
    assert.equal(counts.run + counts.elsewhere + counts.cannot + counts.failing, commands.length);
    assert.equal(counts.elsewhere, commands.filter((c) => elsewhere.has(c.text)).length);
    assert.ok(Object.keys(CANNOT_RUN).length <= CANNOT_RUN_AT_MOST, `CANNOT_RUN has ${Object.keys(CANNOT_RUN).length} commands, more than ${CANNOT_RUN_AT_MOST}: run the new one somewhere instead`);
  });
});
