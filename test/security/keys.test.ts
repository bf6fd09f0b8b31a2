import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

// The first run creates the user's signing key (and a node its node key). Several muster processes
// started at once by one user (the lab, a test starting an emulator beside a command) race to
// create it: each must end up with the same, whole key, and none may read a half-written file.

const run = promisify(execFile);
const keys = new URL("../../src/security/keys.js", import.meta.url).href;

async function race(script: string, n: number, env: NodeJS.ProcessEnv): Promise<string[]> {
  const outs = await Promise.all(Array.from({ length: n }, () => run(process.execPath, ["--input-type=module", "-e", `import * as k from ${JSON.stringify(keys)}; ${script}`], { env })));
  return outs.map((o) => o.stdout.trim());
}

test("processes creating the signing key at once all get the same whole key; no temporary file is left", async () => {
  const dir = mkdtempSync(join(tmpdir(), "muster-keys-"));
  try {
    const env = { ...process.env, MUSTER_CONFIG_DIR: dir, MUSTER_CALLER: "user=racer" };
    const pubs = await race("process.stdout.write(k.loadOrCreateSigningKey().publicKey)", 8, env);
    assert.equal(new Set(pubs).size, 1, pubs.join(" "));
    assert.equal(Buffer.from(pubs[0]!, "base64").length, 32);
    assert.deepEqual(readdirSync(join(dir, "keys")).sort(), ["user=racer.pem", "user=racer.pub"]);
    assert.equal(statSync(join(dir, "keys", "user=racer.pem")).mode & 0o777, 0o600);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("servers of one identity creating the node key at once all get the same key", async () => {
  const dir = mkdtempSync(join(tmpdir(), "muster-keys-"));
  try {
    const pubs = await race(`process.stdout.write(k.loadOrCreateNodeKey("web1.example.net").publicKey)`, 8, { ...process.env, MUSTER_CONFIG_DIR: dir });
    assert.equal(new Set(pubs).size, 1, pubs.join(" "));
    assert.deepEqual(readdirSync(join(dir, "nodes")), ["web1.example.net.key"]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("muster key create: a service's key made on the workstation (0600, .pub beside it), never replaced", async () => {
  const { runCli } = await import("../support/collective.js");
  const { signingKeyFromPem } = await import("../../src/protocol/signing.js");
  const { readFileSync } = await import("node:fs");
  const dir = mkdtempSync(join(tmpdir(), "muster-key-create-"));
  try {
    const made = await runCli(["key", "create", "provisioner", "--dir", join(dir, "keys")], { env: { ...process.env, MUSTER_CONFIG_DIR: join(dir, "home") } });
    assert.equal(made.code, 0, made.stderr);
    const pub = made.stdout.trim();
    assert.equal(readFileSync(join(dir, "keys", "provisioner.pub"), "utf8").trim(), pub);
    assert.equal(statSync(join(dir, "keys", "provisioner.pem")).mode & 0o777, 0o600);
    assert.equal(signingKeyFromPem("provisioner", readFileSync(join(dir, "keys", "provisioner.pem"), "utf8")).publicKey, pub, "the .pub is the .pem's public half");
    const again = await runCli(["key", "create", "provisioner", "--dir", join(dir, "keys")], { env: { ...process.env, MUSTER_CONFIG_DIR: join(dir, "home") } });
    assert.equal(again.code, 1);
    assert.match(again.stderr, /exists already/);
    assert.equal(readFileSync(join(dir, "keys", "provisioner.pub"), "utf8").trim(), pub, "the first key stays");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
