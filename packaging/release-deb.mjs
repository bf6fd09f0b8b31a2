#!/usr/bin/env node
// The .deb of an earlier commit, as that commit's own builder made it: for the tests and checks
// that upgrade from a version operators run (0.1.0 is commit a100ecc). A git worktree of the
// commit in a temp dir, `npm ci`, its build and its packaging/build-deb.mjs; the result is kept
// in the cache directory, named by commit, so the next run takes it from there.
//
//   node packaging/release-deb.mjs [--commit a100ecc] [--cache .muster/cache/releases]
//
// Prints the .deb's path as the last line. Needs the commit in this clone's history (a shallow
// clone does not have it: `git fetch --unshallow`).
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const RELEASE_0_1_0 = "a100ecc";
const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** The cached .deb for `commit`, building it first if it is not there. */
export function releaseDeb({ commit = RELEASE_0_1_0, cache = join(root, ".muster", "cache", "releases"), say = (l) => process.stderr.write(`release-deb: ${l}\n`) } = {}) {
  const git = (args, o = {}) => execFileSync("git", args, { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], ...o }).trim();
  let full;
  try {
    full = git(["rev-parse", "--verify", `${commit}^{commit}`]);
  } catch {
    throw new Error(`commit ${commit} is not in this clone's history (a shallow clone? git fetch --unshallow)`);
  }
  const dir = join(cache, full);
  const found = existsSync(dir) ? readdirSync(dir).find((f) => f.endsWith(".deb")) : undefined;
  if (found) return join(dir, found);
  mkdirSync(cache, { recursive: true });
  const work = mkdtempSync(join(tmpdir(), "muster-release-"));
  const tree = join(work, "tree");
  try {
    say(`building the package of ${commit} (${full.slice(0, 12)}): worktree, npm ci, build, its build-deb.mjs`);
    git(["worktree", "add", "--detach", tree, full]);
    const inTree = (cmd, args) => execFileSync(cmd, args, { cwd: tree, stdio: ["ignore", "ignore", "inherit"] });
    inTree("npm", ["ci", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error"]);
    inTree("npm", ["run", "build", "--silent"]);
    const out = join(work, "out");
    const built = execFileSync(process.execPath, [join(tree, "packaging", "build-deb.mjs"), "--out", out, "--compress", "gzip"], { cwd: tree, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] }).trim().split("\n").at(-1);
    // copied next to its final place, then renamed into it: a half-copied .deb is never found
    const name = built.split("/").at(-1);
    const part = `${dir}.part`;
    rmSync(part, { recursive: true, force: true });
    mkdirSync(part);
    copyFileSync(built, join(part, name));
    rmSync(dir, { recursive: true, force: true });
    renameSync(part, dir);
    return join(dir, name);
  } finally {
    try {
      git(["worktree", "remove", "--force", tree]);
    } catch {
      /* never added */
    }
    rmSync(work, { recursive: true, force: true });
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const argv = process.argv.slice(2);
  const opt = (k) => (argv.includes(k) ? argv[argv.indexOf(k) + 1] : undefined);
  try {
    process.stdout.write(`${releaseDeb({ ...(opt("--commit") ? { commit: opt("--commit") } : {}), ...(opt("--cache") ? { cache: resolve(opt("--cache")) } : {}) })}\n`);
  } catch (e) {
    process.stderr.write(`release-deb: ${e.message}\n`);
    process.exit(1);
  }
}
