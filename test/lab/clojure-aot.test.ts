import { test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { bootstrapNamespaces, compiledClojure } from "../../src/lab/clojure-aot.js";

// The ahead-of-time compile of Debian's Clojure jars (puppetserver's, PuppetDB's): which namespaces,
// and where the classes may be kept. The compile itself runs in every test that starts a
// puppetserver (lab/puppetserver.ts) or PuppetDB (support/puppetdb.ts).

test("the namespaces of a trapperkeeper app: its entry point and each service's, comments and blank lines skipped, each once", () => {
  const text = ["# services", "puppetlabs.services.a.a-service/a-service", "", "puppetlabs.services.a.a-service/other-service  # same namespace", "puppetlabs.b/b-service"].join("\n");
  assert.deepEqual(bootstrapNamespaces("puppetlabs.trapperkeeper.main", text), ["puppetlabs.trapperkeeper.main", "puppetlabs.services.a.a-service", "puppetlabs.b"]);
});

test("classes a root JVM will run are never kept where another user could write: a cache others may write gives none, and nothing is compiled there", async () => {
  const home = mkdtempSync(join(tmpdir(), "muster-aot-"));
  try {
    const cache = join(home, "cache");
    mkdirSync(join(cache, "muster"), { recursive: true });
    chmodSync(join(cache, "muster"), 0o777);
    assert.equal(await compiledClojure("x", "/usr/share/puppetserver/puppetserver.jar", ["a.b"], { XDG_CACHE_HOME: cache }), undefined);
    assert.deepEqual(readdirSync(join(cache, "muster")), []);
    // no cache at all (a unit without a home): none either
    assert.equal(await compiledClojure("x", "/usr/share/puppetserver/puppetserver.jar", ["a.b"], {}), undefined);
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});

test("a jar that is not there gives no classes (the start then reports the missing jar itself)", async () => {
  const home = mkdtempSync(join(tmpdir(), "muster-aot-"));
  try {
    assert.equal(await compiledClojure("x", join(home, "missing.jar"), ["a.b"], { XDG_CACHE_HOME: home }), undefined);
    assert.equal(statSync(join(home, "muster", "clojure")).mode & 0o777, 0o700, "the cache directory itself is made, 0700");
    assert.deepEqual(readdirSync(join(home, "muster", "clojure")), []);
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});

test("a compile that fails is tried once: the jar then runs from source, and the reason is kept beside where the classes would be", async () => {
  const home = mkdtempSync(join(tmpdir(), "muster-aot-"));
  try {
    const jar = "/usr/share/puppetserver/puppetserver.jar"; // scripts/setup.sh installs puppetserver
    assert.equal(await compiledClojure("bogus", jar, ["muster.no.such.namespace"], { XDG_CACHE_HOME: home }), undefined);
    const dir = join(home, "muster", "clojure");
    const failed = readdirSync(dir).filter((f) => f.endsWith(".failed"));
    assert.equal(failed.length, 1, readdirSync(dir).join(", "));
    assert.match(readFileSync(join(dir, failed[0]!), "utf8"), /muster\/no\/such\/namespace/);
    // asked again: no second compile (it would rewrite the reason), nothing left behind
    writeFileSync(join(dir, failed[0]!), "kept\n");
    assert.equal(await compiledClojure("bogus", jar, ["muster.no.such.namespace"], { XDG_CACHE_HOME: home }), undefined);
    assert.equal(readFileSync(join(dir, failed[0]!), "utf8"), "kept\n");
    assert.deepEqual(readdirSync(dir).filter((f) => f.startsWith("compiling-")), []);
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});
