import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { MusterError } from "../errors.js";

// `muster lab up --from-package FILE`: the lab runs the muster of a built .deb (npm run package),
// unpacked as dpkg would install it, instead of this checkout's. The package's launcher finds its
// own Node.js runtime next to itself, so the unpacked tree runs as installed.

export interface UnpackedMuster {
  /** <dir>/usr/bin/muster */
  bin: string;
  /** What `muster --version` of the package says. */
  version: string;
}

export function unpackMuster(deb: string, dir: string): UnpackedMuster {
  const file = resolve(deb);
  if (!existsSync(file)) throw new MusterError("MUSTER_USAGE", `--from-package: no file ${deb} (build one with \`npm run package\`; it prints the path)`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  try {
    execFileSync("dpkg-deb", ["-x", file, dir], { stdio: ["ignore", "ignore", "pipe"] });
  } catch (e) {
    const err = e as { code?: string; stderr?: Buffer };
    const why = err.code === "ENOENT" ? "dpkg-deb is not installed (apt-get install dpkg)" : (err.stderr?.toString().trim() ?? String(e));
    throw new MusterError("MUSTER_USAGE", `--from-package: cannot unpack ${deb}: ${why}`, { cause: e });
  }
  const bin = join(dir, "usr", "bin", "muster");
  if (!existsSync(bin)) throw new MusterError("MUSTER_USAGE", `--from-package: ${deb} holds no usr/bin/muster: is it a muster package?`);
  let version: string;
  try {
    version = execFileSync(bin, ["--version"], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }).trim();
  } catch (e) {
    throw new MusterError("MUSTER_USAGE", `--from-package: the packaged muster does not run: ${(e as { stderr?: string }).stderr?.trim() || (e as Error).message}`, { cause: e });
  }
  return { bin, version };
}
