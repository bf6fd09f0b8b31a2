#!/usr/bin/env node
// `npm run piuparts`: Debian's install, remove and purge tester on this tree's package, in clean
// Debian 12 (bookworm) and Debian 13 (trixie) chroots, and an upgrade from 0.1.0 in each; plus an
// install into a Debian 13 root without /proc, as image builders do it. Not in the test suite:
// it downloads from deb.debian.org and takes minutes (docs/decisions/privileged-helper.md, "The
// package"); test/packaging/ checks the same properties without a mirror.
//
//   node packaging/piuparts.mjs [--suite bookworm|trixie]... [--mirror URL]
//
// Needs root, piuparts, mmdebstrap (scripts/setup.sh installs them) and the mirror. Chroot
// tarballs are made once with mmdebstrap and kept a week in .muster/cache/piuparts; each run's
// logs go to .muster/piuparts/. Per suite:
//
//   install   minbase (+ apt-utils): install, remove, purge; nothing may be left, no link broken
//   upgrade   minbase with systemd: 0.1.0 from a local repository, then this package, then purge.
//             0.1.0 depended on systemd, so an upgrade starts where it could be installed: with
//             systemd already there (in a bare minbase, 0.1.0 pulls systemd in, and systemd's own
//             tmpfiles leave /var/lib/private and /root/.ssh behind when piuparts removes it)
//   no-proc   (trixie) `apt-get install` in a chroot where /proc is not mounted
//
// One leftover is the tester's, not the package's: /var/cache/debconf/tmp.ci/, which debconf
// leaves after any apt install in these chroots (installing `hello` leaves it too): ignored.
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { releaseDeb } from "./release-deb.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const argv = process.argv.slice(2);
const suites = argv.flatMap((a, i) => (a === "--suite" ? [argv[i + 1]] : []));
const mirror = argv.includes("--mirror") ? argv[argv.indexOf("--mirror") + 1] : "http://deb.debian.org/debian";
const SUITES = suites.length ? suites : ["bookworm", "trixie"];
const cache = join(root, ".muster", "cache", "piuparts");
const logs = join(root, ".muster", "piuparts");
const say = (l) => process.stderr.write(`piuparts: ${l}\n`);
const TESTER_LEFTOVER = "/var/cache/debconf/tmp.ci/";

if (process.getuid?.() !== 0) {
  say("needs root (piuparts and mmdebstrap build and enter chroots)");
  process.exit(64);
}
for (const tool of ["piuparts", "mmdebstrap", "apt-ftparchive"]) {
  if (spawnSync("sh", ["-c", `command -v ${tool}`]).status !== 0) {
    say(`${tool} is missing: apt-get install piuparts mmdebstrap apt-utils (scripts/setup.sh)`);
    process.exit(1);
  }
}
mkdirSync(cache, { recursive: true });
mkdirSync(logs, { recursive: true });

/** A chroot tarball, made once a week: minbase with apt-utils, and `extra` packages. */
function base(suite, name, extra) {
  const tgz = join(cache, `${suite}-${name}.tgz`);
  if (existsSync(tgz) && Date.now() - statSync(tgz).mtimeMs < 7 * 86400_000) return tgz;
  say(`${suite}: making the ${name} chroot (mmdebstrap, ${mirror})`);
  // mmdebstrap picks the format by the name's ending: the part file ends in .tgz too
  const part = tgz.replace(/\.tgz$/, ".part.tgz");
  rmSync(part, { recursive: true, force: true });
  execFileSync("mmdebstrap", ["--variant=minbase", `--include=${["apt-utils", ...extra].join(",")}`, "--mode=root", suite, part, mirror], { stdio: ["ignore", "ignore", "inherit"] });
  execFileSync("mv", [part, tgz]);
  return tgz;
}

const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const version = `${pkg.version.replace("-", "~")}+1`;
say(`building this tree's package as ${version} (after 0.1.0, for the upgrade)`);
const out = join(logs, "debs");
const deb = execFileSync(process.execPath, [join(root, "packaging", "build-deb.mjs"), "--out", out, "--compress", "gzip", "--version", version], { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] })
  .trim()
  .split("\n")
  .at(-1);
const old = releaseDeb({ say });
const repo = join(logs, "repo-0.1.0");
rmSync(repo, { recursive: true, force: true });
mkdirSync(repo, { recursive: true });
execFileSync("cp", [old, repo]);
writeFileSync(join(repo, "Packages"), execFileSync("apt-ftparchive", ["packages", "."], { cwd: repo, encoding: "utf8" }));

const results = [];
function check(name, fn) {
  const started = Date.now();
  let ok = false;
  let why = "";
  try {
    ok = fn();
  } catch (e) {
    why = e.message;
  }
  const s = ((Date.now() - started) / 1000).toFixed(0);
  results.push({ name, ok, s });
  say(`${ok ? "PASS" : "FAIL"} ${name} (${s} s)${why ? `: ${why}` : ""}`);
}

function piuparts(name, args) {
  const log = join(logs, `${name}.log`);
  const r = spawnSync("piuparts", ["-m", mirror, `--ignore=${TESTER_LEFTOVER}`, "-l", log, ...args, deb], { stdio: ["ignore", "ignore", "ignore"] });
  if (r.status !== 0) say(`${name}: see ${log} (its end says why)`);
  return r.status === 0;
}

for (const suite of SUITES) {
  const minbase = base(suite, "minbase", []);
  check(`${suite} install, remove, purge`, () => piuparts(`${suite}-install`, ["-d", suite, "-b", minbase, "--no-upgrade-test"]));
  const withSystemd = base(suite, "systemd", ["systemd"]);
  check(`${suite} upgrade from 0.1.0, then purge`, () => piuparts(`${suite}-upgrade`, ["-d", suite, "-b", withSystemd, `--bindmount=${repo}`, `--extra-repo=deb [trusted=yes] file://${repo} ./`]));
  if (suite === "trixie") {
    check(`${suite} install into a root without /proc`, () => {
      const dir = join(logs, `${suite}-no-proc`);
      rmSync(dir, { recursive: true, force: true });
      mkdirSync(dir, { recursive: true });
      execFileSync("tar", ["-C", dir, "-xzf", minbase]);
      execFileSync("cp", [deb, join(dir, "tmp")]);
      execFileSync("cp", ["/etc/resolv.conf", join(dir, "etc", "resolv.conf")]);
      if (readFileSync("/proc/self/mountinfo", "utf8").includes(` ${join(dir, "proc")} `)) throw new Error("/proc is mounted in the chroot");
      const inside = `apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends /tmp/${deb.split("/").at(-1)} && test ! -e /proc/self && getent passwd muster-web >/dev/null`;
      const r = spawnSync("chroot", [dir, "sh", "-c", inside], { encoding: "utf8" });
      writeFileSync(join(logs, `${suite}-no-proc.log`), `${r.stdout}${r.stderr}`);
      rmSync(dir, { recursive: true, force: true });
      if (r.status !== 0) throw new Error(`apt-get install failed: ${r.stderr.trim().split("\n").slice(-3).join(" | ")}`);
      return true;
    });
  }
}

const failed = results.filter((r) => !r.ok);
say(`${results.length - failed.length} of ${results.length} passed; logs in ${logs}`);
process.exit(failed.length ? 1 : 0);
