import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { puppetCodeDirs, puppetSettings } from "../../src/puppet/code-dirs.js";
import { tempDir } from "../support/collective.js";

// Puppet's own settings as the privileged helper reads them (`puppet config print`, one Ruby
// process each): kept while puppet.conf is the same file, unchanged, and printed again when it
// changes. A stand-in `puppet` prints what a real one would and counts its runs; the real one runs
// in hostile.test.ts, where puppet.conf moves the factpath.

test("printed once while puppet.conf is unchanged; again when it changes; every path of the code settings taken", async () => {
  const tmp = tempDir("code-dirs");
  try {
    const conf = join(tmp.path, "puppet.conf");
    const count = join(tmp.path, "runs");
    const fake = join(tmp.path, "puppet");
    writeFileSync(count, "");
    // prints confdir as given and the factpath puppet.conf names
    writeFileSync(
      fake,
      `#!/bin/sh\necho run >> ${count}\nfp=$(sed -n 's/^factpath = //p' ${conf})\nprintf 'confdir = ${tmp.path}\\nvardir = /var/cache/puppet\\nssldir = /var/lib/puppet/ssl\\ncertname = node1.example.net\\nfactpath = %s\\n' "$fp"\n`,
      { mode: 0o755 },
    );
    writeFileSync(conf, "factpath = /srv/facts-a\n");
    const inv = { puppetBin: fake, args: ["--confdir", tmp.path] };
    assert.equal((await puppetSettings(inv)).factpath, "/srv/facts-a");
    assert.equal((await puppetSettings(inv)).certname, "node1.example.net");
    assert.equal(readFileSync(count, "utf8"), "run\n", "the second read came from what was kept");
    writeFileSync(conf, "factpath = /srv/facts-b:/srv/facts-c\n");
    const dirs = await puppetCodeDirs([inv, inv]);
    assert.equal(readFileSync(count, "utf8"), "run\nrun\n", "puppet.conf changed: printed again, once for both");
    for (const p of ["/srv/facts-b", "/srv/facts-c", tmp.path, "/var/cache/puppet", "/var/lib/puppet/ssl"]) assert.ok(dirs.some((d) => d.path === p), `${p} in ${JSON.stringify(dirs)}`);
    assert.equal(dirs.some((d) => d.path === "node1.example.net"), false, "the certname is no path");
  } finally {
    tmp.remove();
  }
});

test("a Puppet that cannot print its settings refuses, naming why", async () => {
  await assert.rejects(puppetSettings({ puppetBin: "/bin/false", args: [] }), /puppet config print failed \(exit 1\), so the helper cannot tell where Puppet loads code from/);
});
