import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runFacter } from "../../src/puppet/index.js";
import { facterArgs } from "../../src/puppet/facter.js";
import { tempDir } from "../support/collective.js";

// runFacter, now in puppet/ (the only place that runs Puppet's tools): the real facter, and
// facter-shaped scripts for the exits the real one gives only on broken machines.

const tmp = tempDir("facter");
after(() => tmp.remove());

function script(name: string, body: string): string {
  const p = join(tmp.path, name);
  writeFileSync(p, `#!/bin/sh\n${body}\n`);
  chmodSync(p, 0o755);
  return p;
}

test("the real facter: a JSON object of facts", async () => {
  const facts = await runFacter("facter");
  assert.equal(typeof facts, "object");
  assert.ok("os" in facts || "kernel" in facts, `no os or kernel fact among ${Object.keys(facts).slice(0, 10).join(", ")}`);
  // legacy facts too, as Puppet sends them: mcprovision configs name ipaddress (Facter 4 hides them unless asked)
  assert.equal(facts.osfamily, (facts.os as { family?: string }).family);
});

test("a non-zero exit with facts on stdout: the facts are used and the failure is told", async () => {
  const told: string[] = [];
  const facts = await runFacter(script("partial", `echo '{"a": 1}'; echo 'cannot read /proc/1/environ' >&2; exit 1`), 10_000, (r) => told.push(r));
  assert.deepEqual(facts, { a: 1 });
  assert.match(told.join(""), /exited 1 but printed facts; some did not resolve: cannot read/);
});

test("garbage, a failure without facts, and a missing binary are refused with what to do", async () => {
  await assert.rejects(runFacter(script("garbage", "echo '[1]'")), /printed something that is not a JSON object/);
  await assert.rejects(runFacter(script("fails", "echo boom >&2; exit 3")), /--json exited 3: boom/);
  await assert.rejects(runFacter(join(tmp.path, "no-such-facter")), /cannot run .*apt-get install facter, or set facts.facter: false/);
});

test("as another user than root, Facter is pointed at the system's external fact directories (root's Facter reads them itself)", () => {
  assert.deepEqual(facterArgs(0, () => true), ["--json", "--show-legacy"]);
  assert.deepEqual(facterArgs(998, () => true), ["--json", "--show-legacy", "--external-dir", "/etc/facter/facts.d", "--external-dir", "/etc/puppetlabs/facter/facts.d"]);
  assert.deepEqual(facterArgs(998, (d) => d === "/etc/facter/facts.d"), ["--json", "--show-legacy", "--external-dir", "/etc/facter/facts.d"], "only directories that exist");
});

test("the real facter, as an unprivileged user, reads external facts from a directory it is given", { skip: process.getuid?.() !== 0 && "needs root to switch users" }, async () => {
  // what runFacter does for the muster user, with a scratch directory standing in for /etc/facter/facts.d
  const dir = join(tmp.path, "facts.d");
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  chmodSync(tmp.path, 0o755);
  writeFileSync(join(dir, "region.yaml"), "muster_test_region: eu-central-1\n", { mode: 0o644 });
  const r = spawnSync("setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "env", "HOME=/nonexistent", "facter", "--json", "--external-dir", dir, "muster_test_region"], { encoding: "utf8" });
  assert.equal((JSON.parse(r.stdout) as Record<string, string>).muster_test_region, "eu-central-1", r.stderr);
});
