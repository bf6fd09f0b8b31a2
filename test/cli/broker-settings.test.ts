import { after, beforeEach, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { waitBeforeAttempt, WAIT_MAX_MS } from "../../src/broker/connect.js";
import { clientConfigSchema, loadClientConfig, resolveBrokerSettings } from "../../src/config/client.js";
import { tempDir } from "../support/collective.js";

// The one rule every command and daemon uses to find its broker (and TLS), and the waiting backoff.

const tmp = tempDir("broker-settings");
const cwd = join(tmp.path, "checkout");
mkdirSync(join(cwd, ".muster"), { recursive: true });
const local = join(cwd, ".muster", "client.yaml");
writeFileSync(local, "brokers: [nats://127.0.0.1:4001]\ntls: {ca: /lab/ca.pem, cert: /lab/admin.pem, key: /lab/admin.key}\n");
const saved = { ...process.env };
const savedCwd = process.cwd();

beforeEach(() => {
  for (const k of Object.keys(process.env)) if (k.startsWith("MUSTER_")) delete process.env[k];
  process.env.MUSTER_CONFIG_DIR = join(tmp.path, "home"); // no ~/.config/muster/client.yaml
  process.chdir(cwd);
});
after(() => {
  process.chdir(savedCwd);
  process.env = saved;
  tmp.remove();
});

test("--broker, then MUSTER_BROKER, then the daemon's own config, then ./.muster/client.yaml, then the default", () => {
  const own = { file: "the registry config", brokers: ["nats://127.0.0.1:4003"] };
  assert.deepEqual(resolveBrokerSettings({ flag: "nats://a:1, nats://b:2", own }).servers, ["nats://a:1", "nats://b:2"]);
  process.env.MUSTER_BROKER = "nats://127.0.0.1:4002";
  assert.deepEqual(resolveBrokerSettings({ own }), { servers: ["nats://127.0.0.1:4002"], from: "MUSTER_BROKER", tls: { ca: "/lab/ca.pem", cert: "/lab/admin.pem", key: "/lab/admin.key" }, clientConfig: local });
  delete process.env.MUSTER_BROKER;
  assert.equal(resolveBrokerSettings({ own }).from, "the registry config");
  const fromLocal = resolveBrokerSettings({});
  assert.deepEqual(fromLocal.servers, ["nats://127.0.0.1:4001"]);
  assert.equal(fromLocal.from, local);
  process.chdir(tmp.path); // no ./.muster here
  assert.deepEqual(resolveBrokerSettings({}), { servers: ["nats://127.0.0.1:4222"], from: "default", tls: undefined, clientConfig: undefined });
});

test("TLS: the daemon's own, else the client config's, else MUSTER_TLS_*", () => {
  assert.deepEqual(resolveBrokerSettings({ own: { tls: { ca: "/own/ca.pem" } } }).tls, { ca: "/own/ca.pem" });
  assert.equal(resolveBrokerSettings({}).tls?.cert, "/lab/admin.pem");
  process.chdir(tmp.path);
  process.env.MUSTER_TLS_CA = "/env/ca.pem";
  assert.equal(resolveBrokerSettings({}).tls?.ca, "/env/ca.pem");
  assert.equal(resolveBrokerSettings({ tls: false }).tls, undefined, "the node daemon picks its credential itself");
});

test("MUSTER_CONFIG names the client config; a daemon whose own config says it all never reads it", () => {
  const bad = join(tmp.path, "bad.yaml");
  writeFileSync(bad, "brokers: not-a-list\n");
  process.env.MUSTER_CONFIG = bad;
  assert.throws(() => resolveBrokerSettings({}), /client config .*bad\.yaml is invalid/);
  const s = resolveBrokerSettings({ own: { brokers: ["nats://127.0.0.1:4003"], tls: { ca: "/own/ca.pem" } } });
  assert.deepEqual(s.servers, ["nats://127.0.0.1:4003"]);
  assert.equal(s.clientConfig, undefined);
});

test("waiting backoff: 1 s doubling, capped at 30 s, within ±20%", () => {
  assert.equal(waitBeforeAttempt(1, () => 0.5), 1000);
  assert.equal(waitBeforeAttempt(3, () => 0.5), 4000);
  assert.equal(waitBeforeAttempt(20, () => 0.5), WAIT_MAX_MS);
  assert.equal(waitBeforeAttempt(20, () => 0), WAIT_MAX_MS * 0.8);
  assert.equal(waitBeforeAttempt(20, () => 1), WAIT_MAX_MS * 1.2);
});

test("no client config reads as the schema's defaults (built without loading zod), and a file is checked by the schema", () => {
  process.chdir(tmp.path); // no ./.muster here, no ~/.config/muster/client.yaml
  assert.deepEqual(loadClientConfig(), clientConfigSchema().parse({}));
  const bad = join(tmp.path, "bad.yaml");
  writeFileSync(bad, "tls: {cert: /only/a/cert.pem}\n");
  assert.throws(() => loadClientConfig(bad), /tls: cert and key go together/);
});
