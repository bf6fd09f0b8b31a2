import { after, test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runFacter } from "../../src/puppet/index.js";
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
