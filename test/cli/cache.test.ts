import { after, test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, mkdirSync, statSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { cacheBase, compileCacheDir, ensureCacheDir, safeCacheDir } from "../../src/cli/cache.js";
import { discoveryMemory } from "../../src/cli/discovery-memory.js";
import { emptyFilter } from "../../src/protocol/types.js";
import { tempDir } from "../support/collective.js";

// Where the CLI keeps its caches (Node's compile cache, the last discovery's answer): only ever a
// directory of the user's own that nobody else can write, never the shared /tmp.

const tmp = tempDir("cache");
after(() => tmp.remove());

test("the cache directory: systemd's CacheDirectory, else XDG_CACHE_HOME, else ~/.cache; none without a home", () => {
  assert.equal(cacheBase({ CACHE_DIRECTORY: "/var/cache/muster/server", HOME: "/home/a" }), "/var/cache/muster/server");
  assert.equal(cacheBase({ XDG_CACHE_HOME: "/x/cache", HOME: "/home/a" }), "/x/cache/muster");
  assert.equal(cacheBase({ HOME: "/home/a" }), "/home/a/.cache/muster");
  assert.equal(cacheBase({ HOME: "/" }), undefined);
  assert.equal(cacheBase({ XDG_CACHE_HOME: "relative" }), undefined);
  assert.equal(compileCacheDir({ HOME: "/home/a" }), "/home/a/.cache/muster/compile-cache");
  assert.equal(compileCacheDir({ HOME: "/home/a", NODE_COMPILE_CACHE: "/n" }), undefined, "Node's own switch is left to Node");
  assert.equal(compileCacheDir({ HOME: "/home/a", MUSTER_COMPILE_CACHE: "off" }), undefined);
  assert.equal(compileCacheDir({ HOME: "/home/a", MUSTER_COMPILE_CACHE: "/c" }), "/c");
});

test("a cache directory others can write, or a symlink, is refused; one made here is 0700", () => {
  const made = ensureCacheDir(join(tmp.path, "mine", "compile-cache"));
  assert.ok(made);
  assert.equal(statSync(made).mode & 0o777, 0o700);
  const shared = join(tmp.path, "shared");
  mkdirSync(shared);
  chmodSync(shared, 0o777);
  assert.equal(safeCacheDir(shared), false);
  assert.equal(ensureCacheDir(shared), undefined);
  const link = join(tmp.path, "link");
  symlinkSync(made, link);
  assert.equal(safeCacheDir(link), false);
  assert.equal(safeCacheDir(made, (process.geteuid?.() ?? 0) + 1), false, "another user's");
});

test("discovery memory: per broker, collective and filter; an empty answer forgets; off with MUSTER_DISCOVERY_CACHE=off", () => {
  const env = { XDG_CACHE_HOME: join(tmp.path, "xdg") };
  const q = { servers: ["nats://127.0.0.1:4222"], collective: "muster", filter: emptyFilter() };
  assert.equal(discoveryMemory(q, env).anticipate, undefined);
  discoveryMemory(q, env).remember(["a", "b"]);
  assert.deepEqual(discoveryMemory(q, env).anticipate, ["a", "b"]);
  assert.equal(statSync(join(tmp.path, "xdg", "muster", "discovery")).mode & 0o777, 0o700);
  assert.equal(discoveryMemory({ ...q, collective: "other" }, env).anticipate, undefined);
  assert.equal(discoveryMemory({ ...q, filter: { ...emptyFilter(), identity: ["a"] } }, env).anticipate, undefined);
  assert.equal(discoveryMemory(q, { ...env, MUSTER_DISCOVERY_CACHE: "off" }).anticipate, undefined);
  discoveryMemory(q, env).remember([]);
  assert.equal(discoveryMemory(q, env).anticipate, undefined);
});
