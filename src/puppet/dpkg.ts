import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { MusterError } from "../errors.js";
import { isVersionPin, type PackageState } from "./resource-rule.js";

// What dpkg's own database says about a package, and dpkg's own order of versions: what the
// privileged helper checks a `package` change against in its turn, just before Puppet runs
// (src/puppet/resource-rule.ts `packageChangeRefusal` decides). dpkg itself answers both, so a
// version muster would order one way and apt another cannot slip through.

const run = promisify(execFile);
const FORMAT = "${binary:Package}\\t${db:Status-Want}\\t${db:Status-Status}\\t${Version}\\t${Essential}\\t${Protected}\\n";

/** The package as dpkg knows it (every architecture of it); unknown to dpkg: nothing installed, nothing held. */
export async function dpkgPackageState(name: string, o: { dpkgQuery?: string } = {}): Promise<Omit<PackageState, "pinNotLower">> {
  let out: string;
  try {
    out = (await run(o.dpkgQuery ?? "dpkg-query", ["-W", `-f=${FORMAT}`, "--", name], { timeout: 30_000 })).stdout;
  } catch (e) {
    const err = e as { code?: number | string; stderr?: string };
    if (err.code === 1 && /no packages found matching/.test(err.stderr ?? "")) return { installed: [], held: false, essential: false, protected: false };
    throw new MusterError("MUSTER_PUPPET_FAILED", `dpkg-query ${name} failed: ${(err.stderr ?? String(e)).trim()}`);
  }
  const rows = out
    .split("\n")
    .filter(Boolean)
    .map((l) => l.split("\t"));
  return {
    installed: rows.filter((r) => r[2] === "installed").map((r) => r[3]!),
    held: rows.some((r) => r[1] === "hold"),
    essential: rows.some((r) => r[4] === "yes"),
    protected: rows.some((r) => r[5] === "yes"),
  };
}

/** Whether version `a` is at least `b`, in dpkg's order (`dpkg --compare-versions a ge b`). */
export async function versionAtLeast(a: string, b: string, o: { dpkg?: string } = {}): Promise<boolean> {
  try {
    await run(o.dpkg ?? "dpkg", ["--compare-versions", a, "ge", b], { timeout: 30_000 });
    return true;
  } catch (e) {
    const err = e as { code?: number | string; stderr?: string };
    if (err.code === 1 && !err.stderr) return false;
    throw new MusterError("MUSTER_PUPPET_FAILED", `dpkg --compare-versions ${a} ge ${b} failed: ${(err.stderr ?? String(e)).trim()}`);
  }
}

/** The state packageChangeRefusal decides on, with `ensure` a version pin compared against every installed version. */
export async function packageState(name: string, ensure: string | undefined): Promise<PackageState> {
  const st = await dpkgPackageState(name);
  const pin = ensure !== undefined && isVersionPin(ensure);
  const notLower = pin && st.installed.length > 0 ? (await Promise.all(st.installed.map((v) => versionAtLeast(ensure, v)))).every(Boolean) : undefined;
  return { ...st, ...(notLower !== undefined ? { pinNotLower: notLower } : {}) };
}
