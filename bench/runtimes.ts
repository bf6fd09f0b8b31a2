import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { repoRoot } from "./paths.js";

// What the start-up and memory benches share: the runtimes they measure side by side (issue 29: the
// shipped Node.js, with the system's Node 20 beside it) and a scratch environment.

export interface Runtime {
  /** e.g. "v24.21.0 (shipped)" */
  name: string;
  path: string;
  version: string;
}

/** `shipped,/usr/bin/node`: `shipped` is the Node.js the .deb ships (packaging/runtime.mjs installs it when missing). */
export async function benchRuntimes(list: string): Promise<Runtime[]> {
  const out: Runtime[] = [];
  for (const spec of list.split(",").map((r) => r.trim()).filter(Boolean)) {
    const path = spec === "shipped" ? ((await import(join(repoRoot, "packaging", "runtime.mjs"))) as { shippedNode(): string }).shippedNode() : spec;
    const r = spawnSync(path, ["--version"], { encoding: "utf8" });
    if (r.status !== 0) throw new Error(`runtime ${spec}: ${path} --version failed: ${r.stderr || r.error?.message}`);
    const version = r.stdout.trim();
    out.push({ name: spec === "shipped" ? `${version} (shipped)` : version, path, version });
  }
  return out;
}

/**
 * The environment the measured processes get: no inherited muster, XDG config or Node settings;
 * keys and config in `dir` (this process's too), and the caches (compile cache, discovery memory)
 * there as well, filled by the warm-up as a user's are after a first run, then thrown away.
 */
export function scratchEnv(dir: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("MUSTER_") && k !== "XDG_CONFIG_HOME" && !k.startsWith("NODE_")) env[k] = v;
  env.MUSTER_CONFIG_DIR = dir;
  env.XDG_CACHE_HOME = join(dir, "cache");
  process.env.MUSTER_CONFIG_DIR = dir;
  return env;
}
