import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import { freePort } from "../support/index.js";
import { cleanEnv, runCli, spawnMuster, startBroker, tempDir, type Broker, type CliResult, type MusterProcess } from "../support/collective.js";

// `muster doctor` and the hint for an empty answer, against a real nats-server and an emulated fleet
// that trusts its own user's key (config dir A). The outsider (config dir B) signs with another
// key: its broadcasts are dropped in silence, its direct requests answered "not trusted".

const tmp = tempDir("doctor");
const dirA = join(tmp.path, "a");
const dirB = join(tmp.path, "b");
const NODES = ["n1.doctor.test", "n2.doctor.test"];
let broker: Broker;
let emu: MusterProcess;
let envA: NodeJS.ProcessEnv;
let envB: NodeJS.ProcessEnv;

before(async () => {
  broker = await startBroker();
  envA = cleanEnv(dirA, { MUSTER_BROKER: broker.url });
  envB = cleanEnv(dirB, { MUSTER_BROKER: broker.url, MUSTER_CALLER: "user=outsider" });
  const fleet = join(tmp.path, "fleet.yaml");
  writeFileSync(fleet, toYaml({ nodes: NODES.map((identity) => ({ identity, facts: { role: "test" } })) }));
  emu = spawnMuster(["emulate", "--fleet", fleet], { env: envA });
  await emu.waitForLine(/ready/, 20_000);
});

after(async () => {
  await emu?.stop();
  await broker?.dispose();
  tmp.remove();
});

interface Report {
  ok: boolean;
  checks: { name: string; state: "ok" | "fail" | "skip"; detail: string; fix?: string }[];
}
function report(r: CliResult): Report {
  try {
    return JSON.parse(r.stdout) as Report;
  } catch {
    throw new Error(`not JSON (exit ${r.code}): ${r.stdout}\n${r.stderr}`);
  }
}
const state = (rep: Report, name: string) => rep.checks.find((c) => c.name === name)!;

test("a trusted caller: every check passes, exit 0", async () => {
  const r = await runCli(["doctor", "--dt", "1"], { env: envA });
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /^ok {4}config .*broker nats:\/\/127\.0\.0\.1:\d+ \(from MUSTER_BROKER\)/m);
  assert.match(r.stdout, /^ok {4}tls files /m);
  assert.match(r.stdout, /^ok {4}tls handshake /m);
  assert.match(r.stdout, /^ok {4}discovery +2 nodes answered/m);
  assert.match(r.stdout, /^ok {4}trust /m);
  assert.match(r.stdout, /^ok {4}ed25519 +libsodium /m);
  assert.match(r.stdout, /all checks passed/);
});

test("an untrusted caller with no node to ask: discovery and trust fail, and doctor says it cannot tell", async () => {
  const r = await runCli(["doctor", "--dt", "1", "--json"], { env: envB });
  assert.equal(r.code, 1, r.stdout + r.stderr);
  const rep = report(r);
  assert.equal(rep.ok, false);
  assert.equal(state(rep, "broker").state, "ok");
  assert.equal(state(rep, "signing key").state, "ok");
  assert.match(state(rep, "signing key").detail, /caller user=outsider/);
  // With the addon refused, doctor names the fallback and why (MUSTER_ED25519=openssl stands in for a platform without a prebuild).
  const fallback = report(await runCli(["doctor", "--dt", "1", "--json"], { env: { ...envB, MUSTER_ED25519: "openssl" } }));
  assert.match(state(fallback, "ed25519").detail, /^OpenSSL, because libsodium did not load \(MUSTER_ED25519=openssl\)/);
  assert.equal(state(rep, "discovery").state, "fail");
  assert.equal(state(rep, "trust").state, "fail");
  assert.match(state(rep, "trust").detail, /cannot tell/);
  assert.match(state(rep, "trust").fix!, /-I IDENTITY/);
});

test("an untrusted caller naming a node: doctor tells untrusted from silent", async () => {
  const pub = readFileSync(join(dirB, "keys", "user=outsider.pub"), "utf8").trim();
  const r = await runCli(["doctor", "--dt", "1", "-I", NODES[0]!, "-I", "gone.doctor.test"], { env: envB });
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.match(r.stdout, /^FAIL {2}trust +n1\.doctor\.test refuses requests signed by caller user=outsider: "not trusted by this node"; no answer at all from gone\.doctor\.test/m);
  assert.match(r.stdout, new RegExp(`fix: copy ${join(dirB, "keys", "user=outsider.pub").replace(/[.=]/g, "\\$&")} to each node's security.trusted_keys_dir`));
  assert.match(r.stdout, new RegExp(`public key ${pub.replace(/[+/=]/g, "\\$&")}`));
});

test("nothing answers a broadcast: the CLI names the caller and key and suggests muster doctor", async () => {
  const pub = readFileSync(join(dirB, "keys", "user=outsider.pub"), "utf8").trim();
  for (const args of [["rpc", "rpcutil", "ping"], ["ping"], ["find"]]) {
    const r = await runCli([...args, "--dt", "1"], { env: envB });
    assert.equal(r.code, 1, `${args.join(" ")}: ${r.stdout}${r.stderr}`);
    assert.match(r.stderr, /one possible cause is that no node trusts this one: caller user=outsider, public key /, args.join(" "));
    assert.ok(r.stderr.includes(pub), `${args.join(" ")} names the public key`);
    assert.match(r.stderr, /muster doctor/);
  }
  const trusted = await runCli(["find", "-F", "role=nothing", "--dt", "1"], { env: envA });
  assert.equal(trusted.code, 1);
  assert.doesNotMatch(trusted.stderr, /possible cause/, "an ordinary empty filter result is not blamed on the key");
});

test("a dead broker: broker fails with the URL, later checks are skipped", async () => {
  const url = `nats://127.0.0.1:${await freePort()}`;
  const r = await runCli(["doctor", "--json", "--broker", url], { env: envA });
  assert.equal(r.code, 1);
  const rep = report(r);
  assert.equal(state(rep, "broker").state, "fail");
  assert.ok(state(rep, "broker").detail.includes(url));
  assert.equal(state(rep, "discovery").state, "skip");
});

test("an unreadable TLS file: tls files fails naming it", async () => {
  const r = await runCli(["doctor", "--json"], { env: { ...envA, MUSTER_TLS_CA: join(tmp.path, "no-such-ca.pem") } });
  assert.equal(r.code, 1);
  const rep = report(r);
  assert.equal(state(rep, "tls files").state, "fail");
  assert.match(state(rep, "tls files").detail, /no-such-ca\.pem/);
});
