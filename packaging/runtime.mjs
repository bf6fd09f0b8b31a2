// The Node.js runtime the .deb ships: the official binary of a supported LTS line, from the npm
// registry's node-linux-<arch> package, pinned (with its integrity) in packaging/runtime/package-lock.json.
// A package of its own, not a devDependency of muster: its `node` bin would otherwise shadow the
// developer's node in every npm script. docs/decisions/0008-node-runtime.md says which line and why.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const dir = join(dirname(fileURLToPath(import.meta.url)), "runtime");

/** The package that carries the runtime for this machine's architecture (x64 only for now). */
export function runtimePackage(arch = process.arch) {
  const deps = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).dependencies;
  const name = `node-linux-${arch}`;
  if (!deps[name]) throw new Error(`the shipped runtime is pinned for ${Object.keys(deps).map((d) => d.replace("node-linux-", "")).join(", ")} only, not ${arch}: add ${name} to packaging/runtime/package.json (docs/decisions/0008-node-runtime.md)`);
  return { name, version: deps[name] };
}

/**
 * The path of the shipped node binary, installed from the lock file first when it is missing
 * (`npm ci` in packaging/runtime; scripts/setup.sh does the same).
 */
export function shippedNode({ install = true } = {}) {
  const { name, version } = runtimePackage();
  const bin = join(dir, "node_modules", name, "bin", "node");
  const installed = () => existsSync(bin) && JSON.parse(readFileSync(join(dir, "node_modules", name, "package.json"), "utf8")).version === version;
  if (!installed() && install) execFileSync("npm", ["ci", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: dir, stdio: ["ignore", "ignore", "inherit"] });
  if (!installed()) throw new Error(`the shipped runtime ${name}@${version} is not installed in ${dir} (npm ci there)`);
  return bin;
}
