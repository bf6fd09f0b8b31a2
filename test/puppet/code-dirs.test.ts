import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
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

/** `puppetSettings` in a process of its own (the helper after its idle exit), keeping them in `store` as the helper does (ownCacheFile): its factpath. */
function inFreshProcess(inv: { puppetBin: string; args: string[] }, store: string): string {
  const mod = new URL("../../src/puppet/code-dirs.js", import.meta.url).href;
  const cache = new URL("../../src/cli/cache.js", import.meta.url).href;
  const code = `const m = await import(${JSON.stringify(mod)}); const c = await import(${JSON.stringify(cache)}); m.keepPuppetSettingsIn(c.ownCacheFile(${JSON.stringify(store)})); process.stdout.write((await m.puppetSettings(${JSON.stringify(inv)})).factpath ?? "");`;
  return execFileSync(process.execPath, ["--input-type=module", "-e", code], { encoding: "utf8" });
}

test("kept between processes in the helper's own file: a fresh process prints nothing while puppet.conf and Puppet are unchanged; a changed puppet.conf, another Puppet, a file others may write or a garbled one are printed afresh", () => {
  const tmp = tempDir("code-dirs-kept");
  try {
    const conf = join(tmp.path, "puppet.conf");
    const count = join(tmp.path, "runs");
    const fake = join(tmp.path, "puppet");
    const cacheDir = join(tmp.path, "cache");
    mkdirSync(cacheDir, { mode: 0o700 });
    const store = join(cacheDir, "puppet-settings.json");
    writeFileSync(count, "");
    const writeFake = (extra = "") =>
      writeFileSync(fake, `#!/bin/sh\necho run >> ${count}\nfp=$(sed -n 's/^factpath = //p' ${conf})\nprintf 'confdir = ${tmp.path}\\nvardir = /var/cache/puppet\\nssldir = /var/lib/puppet/ssl\\ncertname = node1.example.net\\nfactpath = %s\\n' "$fp"\n${extra}`, { mode: 0o755 });
    writeFake();
    writeFileSync(conf, "factpath = /srv/facts-a\n");
    const inv = { puppetBin: fake, args: ["--confdir", tmp.path] };
    const runs = () => readFileSync(count, "utf8").split("\n").filter(Boolean).length;
    assert.equal(inFreshProcess(inv, store), "/srv/facts-a");
    assert.equal(runs(), 1);
    assert.equal(statSync(store).mode & 0o777, 0o600, "the kept file is its owner's alone");
    assert.equal(inFreshProcess(inv, store), "/srv/facts-a");
    assert.equal(runs(), 1, "a second process took them from the file");
    writeFileSync(conf, "factpath = /srv/facts-b\n");
    assert.equal(inFreshProcess(inv, store), "/srv/facts-b", "puppet.conf changed: printed again");
    assert.equal(runs(), 2);
    writeFake("# another Puppet\n");
    assert.equal(inFreshProcess(inv, store), "/srv/facts-b");
    assert.equal(runs(), 3, "another Puppet binary: printed again");
    // a file others could have written: not believed, and replaced by one of its owner's alone
    const forged = JSON.parse(readFileSync(store, "utf8")) as { entries: Record<string, { settings: Record<string, string> }> };
    for (const e of Object.values(forged.entries)) e.settings.factpath = "/tmp/forged";
    writeFileSync(store, JSON.stringify(forged));
    chmodSync(store, 0o666);
    assert.equal(inFreshProcess(inv, store), "/srv/facts-b", "a file others may write is not taken");
    assert.equal(runs(), 4);
    assert.equal(statSync(store).mode & 0o777, 0o600);
    writeFileSync(store, "{ not json", { mode: 0o600 });
    assert.equal(inFreshProcess(inv, store), "/srv/facts-b", "a garbled file: printed afresh");
    assert.equal(runs(), 5);
    assert.equal(inFreshProcess(inv, store), "/srv/facts-b");
    assert.equal(runs(), 5, "and kept again");
  } finally {
    tmp.remove();
  }
});
