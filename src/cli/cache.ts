import * as nodeModule from "node:module";
import { createHash } from "node:crypto";
import { lstatSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { cacheBase, ensureCacheDir } from "../cache-dir.js";

// where a cache may be kept (the user's own directory): src/cache-dir.ts
export { cacheBase, ensureCacheDir, safeCacheDir } from "../cache-dir.js";

// The CLI's caches: Node's compile cache, the last discovery's answer (discovery-memory.ts), the
// broker members that did not answer its last connects (broker-memory.ts), and the heartbeats of
// the last full health read (health-memory.ts); for the privileged helper, Puppet's printed
// settings (puppet/code-dirs.ts keepPuppetSettingsIn).
// All are only ever kept in a directory of the invoking user's own that nobody else can write: a
// user's ~/.cache/muster ($XDG_CACHE_HOME/muster), or the directory systemd makes for a daemon
// (CacheDirectory=, $CACHE_DIRECTORY: /var/cache/muster/server for muster-server, owned by its
// user; /var/cache/muster/privileged for the root helper). Never the shared /tmp that Node would
// pick by default: the compile cache holds code the process will run.

/**
 * The file in the cache's `kind` directory (made 0700 when missing) for `question`, named by a hash
 * of it; undefined for no cache. The discovery and health memories keep one small JSON file each.
 */
export function cacheFileFor(env: NodeJS.ProcessEnv, kind: string, question: unknown): string | undefined {
  const base = cacheBase(env);
  const dir = base && ensureCacheDir(join(base, kind));
  if (!dir) return undefined;
  return join(dir, `${createHash("sha256").update(JSON.stringify(question)).digest("hex").slice(0, 32)}.json`);
}

/** Replaces `file` whole (a reader never sees half of it), 0600; a full disk or read-only cache keeps the old one. */
export function writeCacheFile(file: string, text: string): void {
  try {
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, text, { mode: 0o600 });
    renameSync(tmp, file);
  } catch {
    // no cache this time: the next command does without, as with none
  }
}

/**
 * `file` as a store that only its owner's own file feeds: read gives its text only when it is a
 * regular file of this user's that no one else may read or write (the privileged helper's Puppet
 * settings say where root loads code from), else undefined; write replaces it whole (writeCacheFile).
 */
export function ownCacheFile(file: string): { read(): string | undefined; write(text: string): void } {
  return {
    read() {
      try {
        const st = lstatSync(file);
        if (!st.isFile() || st.uid !== process.geteuid?.() || (st.mode & 0o077) !== 0) return undefined;
        return readFileSync(file, "utf8");
      } catch {
        return undefined; // none yet
      }
    },
    write: (text) => writeCacheFile(file, text),
  };
}

// Node 22 and later keep the V8 code of the modules a process compiles in a directory, so the next
// `muster` start reads its modules' code instead of compiling them again (issue 29: every command
// starts within 1.25x of a bare node). Node checks each entry against its module's source, so an
// upgraded package recompiles what changed. Node 20 has no compile cache (no enableCompileCache).

/**
 * Where this process's compile cache goes, or undefined for none. NODE_COMPILE_CACHE (Node's own
 * switch) wins and is left to Node; MUSTER_COMPILE_CACHE=off turns it off, or names the directory.
 */
export function compileCacheDir(env: NodeJS.ProcessEnv): string | undefined {
  if (env.NODE_COMPILE_CACHE !== undefined || env.NODE_DISABLE_COMPILE_CACHE) return undefined;
  const own = env.MUSTER_COMPILE_CACHE;
  if (own !== undefined) return own === "" || own === "off" || own === "0" ? undefined : own;
  const base = cacheBase(env);
  return base && join(base, "compile-cache");
}

type WithCompileCache = typeof nodeModule & { enableCompileCache?: (dir?: string) => { status: number; directory?: string } };

/** Turns the compile cache on for every module loaded from now on, where it is safe; never fails. */
export function enableCompileCache(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const enable = (nodeModule as WithCompileCache).enableCompileCache;
  const dir = enable && compileCacheDir(env);
  if (!enable || !dir || !ensureCacheDir(dir)) return undefined;
  try {
    return enable(dir).directory;
  } catch {
    return undefined;
  }
}
