import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import { ensureCA } from "../../src/security/pki.js";
import { cleanEnv, runCli, spawnMuster, startBroker, tempDir, type Broker, type MusterProcess } from "../support/collective.js";

// Which broker a command talks to: --broker, else MUSTER_BROKER, else the client config file
// (--config, MUSTER_CONFIG, ./.muster/client.yaml, <config dir>/client.yaml), else nats://127.0.0.1:4222.
// A live broker with one emulated node, and a URL where nothing listens: a command that picked the
// dead one fails naming it. The live broker runs with TLS and requires client certificates, as
// every test broker does (test/support/tls.ts): a command without the right TLS settings is refused
// with a message that says so.

const tmp = tempDir("broker");
const configDir = join(tmp.path, "config");
let live: Broker;
let dead: Broker;
let emu: MusterProcess;

before(async () => {
  live = await startBroker();
  dead = await startBroker({ start: false });
  emu = spawnMuster(["emulate", "--count", "1", "--broker", live.url], { env: cleanEnv(configDir) });
  await emu.waitForLine(/ready/, 90_000); // a deadline that catches a hang: under the suite's load a start took over 20 s once
});

after(async () => {
  await emu?.stop();
  await live?.dispose();
  await dead?.dispose();
  tmp.remove();
});

const NODE = "node-00001.example.net";

/** A working directory with ./.muster/client.yaml naming the brokers. */
function project(brokers: string[]): string {
  const dir = mkdtempSync(join(tmp.path, "project-"));
  mkdirSync(join(dir, ".muster"));
  writeFileSync(join(dir, ".muster", "client.yaml"), toYaml({ brokers }));
  return dir;
}

function configFile(name: string, brokers: string[]): string {
  const f = join(tmp.path, name);
  writeFileSync(f, toYaml({ brokers }));
  return f;
}

async function findWith(args: string[], env: Record<string, string | undefined>, cwd = tmp.path) {
  return runCli(["find", "--dt", "2", ...args], { env: cleanEnv(configDir, env), cwd });
}

function reached(r: { code: number | null; stdout: string; stderr: string }, what: string): void {
  assert.equal(r.code, 0, `${what}: ${r.stderr}`);
  assert.equal(r.stdout, `${NODE}\n`, what);
}

function triedDead(r: { code: number | null; stderr: string }, what: string): void {
  assert.equal(r.code, 1, what);
  assert.match(r.stderr, new RegExp(`cannot reach the NATS broker at ${dead.url}`), what);
}

test("--broker wins over MUSTER_BROKER and the config file", async () => {
  const cwd = project([dead.url]);
  reached(await findWith(["--broker", live.url], { MUSTER_BROKER: dead.url }, cwd), "--broker live, env dead");
  triedDead(await findWith(["--broker", dead.url], { MUSTER_BROKER: live.url }), "--broker dead, env live");
});

test("MUSTER_BROKER wins over the config file", async () => {
  reached(await findWith([], { MUSTER_BROKER: live.url }, project([dead.url])), "env live, ./.muster dead");
  triedDead(await findWith([], { MUSTER_BROKER: dead.url }, project([live.url])), "env dead, ./.muster live");
  triedDead(await findWith(["--config", configFile("live.yaml", [live.url])], { MUSTER_BROKER: dead.url }), "env dead, --config live");
});

test("the config file: --config, then MUSTER_CONFIG, then ./.muster/client.yaml, then the user's", async () => {
  const liveFile = configFile("live.yaml", [live.url]);
  const deadFile = configFile("dead.yaml", [dead.url]);
  reached(await findWith(["--config", liveFile], { MUSTER_CONFIG: deadFile }, project([dead.url])), "--config live");
  reached(await findWith([], { MUSTER_CONFIG: liveFile }, project([dead.url])), "MUSTER_CONFIG live over ./.muster");
  reached(await findWith([], {}, project([live.url])), "./.muster/client.yaml");
  // the user's config sits in the config dir, beside the keys the emulator trusts
  const userConfig = join(configDir, "client.yaml");
  writeFileSync(userConfig, toYaml({ brokers: [live.url] }));
  try {
    reached(await findWith([], {}), "the user's client.yaml");
    triedDead(await findWith([], {}, project([dead.url])), "./.muster over the user's");
  } finally {
    rmSync(userConfig);
  }
});

test("with nothing configured, the default nats://127.0.0.1:4222", async (t) => {
  const listening = await new Promise<boolean>((resolve) => {
    const s = createConnection({ host: "127.0.0.1", port: 4222 });
    s.once("connect", () => (s.destroy(), resolve(true)));
    s.once("error", () => resolve(false));
  });
  if (listening) return t.skip("something listens on 127.0.0.1:4222 here");
  const r = await findWith([], {});
  assert.equal(r.code, 1);
  assert.match(r.stderr, /cannot reach the NATS broker at nats:\/\/127\.0\.0\.1:4222( over TLS)? \(from default\)/);
});

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const NO_TLS = { MUSTER_TLS_CA: undefined, MUSTER_TLS_CERT: undefined, MUSTER_TLS_KEY: undefined };

test("TLS: no TLS settings, a CA that did not sign the broker's certificate, or no client certificate: refused, saying why", async () => {
  const otherCa = ensureCA(join(tmp.path, "other-ca"), "/O=elsewhere/CN=another CA");
  const at = escapeRe(live.url);
  const [none, wrongCa, noCert, right] = await Promise.all([
    findWith(["--broker", live.url], NO_TLS),
    findWith(["--broker", live.url], { MUSTER_TLS_CA: otherCa.cert }),
    findWith(["--broker", live.url], { MUSTER_TLS_CERT: undefined, MUSTER_TLS_KEY: undefined }),
    findWith(["--broker", live.url], {}),
  ]);
  // no TLS settings: the broker's certificate cannot be verified, and the hint names the setting
  assert.equal(none.code, 1, none.stderr);
  assert.match(none.stderr, new RegExp(`cannot reach the NATS broker at ${at} \\(from --broker\\): .*certificate`));
  assert.match(none.stderr, /The broker requires TLS: set tls\.ca \(or MUSTER_TLS_CA\) to its CA/);
  // the wrong CA: refused over TLS, naming the CA file to check
  assert.equal(wrongCa.code, 1, wrongCa.stderr);
  assert.match(wrongCa.stderr, new RegExp(`cannot reach the NATS broker at ${at} over TLS \\(from --broker\\): .*certificate`));
  assert.match(wrongCa.stderr, new RegExp(`Check that ${escapeRe(otherCa.cert)} is the CA that signed the broker's certificate`));
  // the right CA but no client certificate: the broker (verify) refuses the handshake
  assert.equal(noCert.code, 1, noCert.stderr);
  assert.match(noCert.stderr, new RegExp(`cannot reach the NATS broker at ${at} over TLS \\(from --broker\\): `));
  assert.match(noCert.stderr, /set tls\.cert and tls\.key \(or MUSTER_TLS_CERT and MUSTER_TLS_KEY\)/);
  // and the test PKI's settings reach the node
  reached(right, "the test PKI's CA and client certificate");
});
