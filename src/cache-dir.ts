import { lstatSync, mkdirSync } from "node:fs";
import { join } from "node:path";

// Where a process may keep a cache (the CLI's, src/cli/cache.ts; the lab's compiled Clojure,
// src/lab/clojure-aot.ts): only a directory of the invoking user's own that nobody else can write,
// as systemd's CacheDirectory= or the user's ~/.cache/muster. Never the shared /tmp: a cache may
// hold code the process will run.

/** The base of this process's caches, or undefined for none (no home: a system unit without one). */
export function cacheBase(env: NodeJS.ProcessEnv): string | undefined {
  const systemd = env.CACHE_DIRECTORY?.split(":")[0];
  if (systemd?.startsWith("/")) return systemd;
  if (env.XDG_CACHE_HOME?.startsWith("/")) return join(env.XDG_CACHE_HOME, "muster");
  if (env.HOME?.startsWith("/") && env.HOME !== "/") return join(env.HOME, ".cache", "muster");
  return undefined;
}

/** True when `dir` is a real directory of this user's that no one else may write. */
export function safeCacheDir(dir: string, uid = process.geteuid?.()): boolean {
  try {
    const st = lstatSync(dir);
    return st.isDirectory() && st.uid === uid && (st.mode & 0o022) === 0;
  } catch {
    return false;
  }
}

/** `dir`, made (0700) when missing, if it is safe to keep a cache in; else undefined. Never throws. */
export function ensureCacheDir(dir: string): string | undefined {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    return safeCacheDir(dir) ? dir : undefined;
  } catch {
    return undefined; // a read-only home, a full disk: no cache
  }
}
