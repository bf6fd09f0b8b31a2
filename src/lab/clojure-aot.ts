import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, realpathSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { cacheBase, ensureCacheDir } from "../cache-dir.js";

// Debian's Clojure jars (puppetserver, PuppetDB) carry their Clojure as source, compiled at every
// start of the JVM: most of a start's CPU. Compiled ahead of time once, into a cache, and put on
// the classpath before the jar, the same code loads as classes instead (Clojure loads a
// namespace's class when it is newer than its source). The cache is the user's own
// (~/.cache/muster/clojure, 0700, as the CLI's caches): the classes are code a root JVM will run,
// so never a shared /tmp directory another user could have made first.

const inFlight = new Map<string, Promise<string | undefined>>();

/** The Clojure namespaces a trapperkeeper app loads: its entry point and every service its bootstrap files name. */
export function bootstrapNamespaces(main: string, bootstrapText: string): string[] {
  const services = bootstrapText
    .split("\n")
    .map((l) => l.replace(/#.*/, "").trim())
    .filter(Boolean)
    .map((l) => l.split("/")[0]!);
  return [...new Set([main, ...services])];
}

/**
 * A directory of `jar`'s namespaces compiled ahead of time, kept per jar, java and namespace list;
 * compiled now when missing (about 20 s of CPU for puppetserver's). Undefined when there is no
 * cache of the user's own or the compile failed (once: <dir>.failed says why, and stops a retry at
 * every start): the caller then runs the jar as it is, slower but the same code. Two callers in one process share one compile; two processes may both compile, and
 * the first to finish keeps its copy.
 */
export async function compiledClojure(name: string, jar: string, namespaces: string[], env: NodeJS.ProcessEnv = process.env): Promise<string | undefined> {
  // the base checked too: a directory others may write lets them swap the one below it
  const base = cacheBase(env);
  const own = base && ensureCacheDir(base);
  const cache = own && ensureCacheDir(join(own, "clojure"));
  if (!cache) return undefined;
  let key: string;
  try {
    const java = realpathSync("/usr/bin/java");
    const j = statSync(jar);
    key = createHash("sha256")
      .update(JSON.stringify([j.size, j.mtimeMs, java, statSync(java).mtimeMs, namespaces]))
      .digest("hex")
      .slice(0, 16);
  } catch {
    return undefined; // no jar or no java: the start says so
  }
  const dir = join(cache, `${name}-${key}`);
  if (existsSync(join(dir, "done"))) return dir;
  if (existsSync(`${dir}.failed`)) return undefined; // tried once; why is in that file
  let p = inFlight.get(dir);
  if (!p) {
    p = compile(cache, dir, jar, namespaces).finally(() => inFlight.delete(dir));
    inFlight.set(dir, p);
  }
  return p;
}

async function compile(cache: string, dir: string, jar: string, namespaces: string[]): Promise<string | undefined> {
  const work = mkdtempSync(join(cache, "compiling-"));
  try {
    const script = `(binding [*compile-path* ${JSON.stringify(work)}] (doseq [n '[${namespaces.join(" ")}]] (compile n)))`;
    await new Promise<void>((resolve, reject) =>
      execFile("java", ["-XX:TieredStopAtLevel=1", "-cp", `${jar}:${work}`, "clojure.main", "-e", script], { timeout: 300_000, maxBuffer: 16 << 20 }, (err, _out, stderr) =>
        err ? reject(new Error(`${err.message}\n${stderr.slice(-2000)}`)) : resolve(),
      ),
    );
    writeFileSync(join(work, "done"), `${namespaces.join("\n")}\n`);
    try {
      renameSync(work, dir);
    } catch {
      // another process compiled it meanwhile: theirs is as good
    }
    return existsSync(join(dir, "done")) ? dir : undefined;
  } catch (e) {
    // the jar runs from source instead, and later starts do not try again for this jar and java
    try {
      writeFileSync(`${dir}.failed`, `${(e as Error).message}\n`, { mode: 0o600 });
    } catch {
      /* a full disk: the next start tries again */
    }
    return undefined;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** The bootstrap files of a directory of them (trapperkeeper's services.d), as one text. */
export function readBootstrap(files: string[]): string {
  return files
    .map((f) => {
      try {
        return readFileSync(f, "utf8");
      } catch {
        return ""; // not installed: the start says so
      }
    })
    .join("\n");
}
