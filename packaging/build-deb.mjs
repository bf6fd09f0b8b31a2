#!/usr/bin/env node
// Builds muster_<version>_<arch>.deb from the compiled tree (npm run build first; `npm run package`
// does both, then packaging/apt-repo.mjs) and prints its path as the last line.
//
// The package carries its own Node.js runtime (docs/decisions/shipping.md): /usr/lib/muster/node
// runs /usr/lib/muster/app, which is what `npm pack` ships plus the production dependencies without
// what does not run (packaging/prune.mjs), so assets listed in package.json `files` come along
// without changes here. lintian reports no error on it (test/packaging/lintian.test.ts); the
// overrides in packaging/debian/lintian-overrides say why each remaining warning stays.
//
//   node packaging/build-deb.mjs [--out DIR] [--node PATH] [--compress xz|gzip|zstd|none] [--level 0-9] [--version V] [--repo DIR]
//
// --out defaults to build/; --node to the runtime the package ships (packaging/runtime.mjs: the
// Node.js LTS pinned in packaging/runtime/package-lock.json); --compress to xz (what a
// release ships; the tests use a faster one, the contents are the same). --level is dpkg-deb's
// compression level: the lab and the tests build with `--compress gzip --level 1` (2 s of gzip
// instead of 18 s at gzip's default, for a package 12% larger: 9 builds a suite run). --version builds the
// package as another version (a Debian version: 0.2.0, 0.2.0~rc1): the app's package.json says it
// too, so `muster --version` of the installed package agrees; for upgrade tests and hotfixes.
// --repo adds the package to the signed apt repository in DIR (packaging/apt-repo.mjs; `npm run
// package` writes build/apt), its key made once in $MUSTER_APT_GNUPGHOME or ~/.config/muster/apt-signing.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, copyFileSync, cpSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import { binFiles, pruneReason } from "./prune.mjs";
import { shippedNode } from "./runtime.mjs";
import { MAINTAINER, changelogEntry, changelogMdSection, copyrightFile, copyrightHolders, dep5License, genericLicenseText, licenseNames } from "./debian-meta.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const here = join(root, "packaging");
const USAGE = "usage: node packaging/build-deb.mjs [--out DIR] [--node PATH] [--compress xz|gzip|zstd|none] [--level 0-9] [--version DEBIAN_VERSION] [--repo DIR]";

function usage(msg) {
  process.stderr.write(`${msg}\n${USAGE}\n`);
  process.exit(64);
}

const opts = { out: join(root, "build"), node: undefined, compress: "xz", level: undefined, version: undefined, repo: undefined };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const k = argv[i];
  const v = argv[i + 1];
  if (k === "--help" || k === "-h") {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  if (!["--out", "--node", "--compress", "--level", "--version", "--repo"].includes(k)) usage(`unknown argument ${k}`);
  if (v === undefined) usage(`${k} needs a value`);
  opts[k.slice(2)] = v;
  i++;
}
if (!["xz", "gzip", "zstd", "none"].includes(opts.compress)) usage(`--compress takes xz, gzip, zstd or none, not ${opts.compress}`);
if (opts.level !== undefined && !/^[0-9]$/.test(opts.level)) usage(`--level takes a compression level from 0 to 9, not ${opts.level}`);
// Debian policy 5.6.12, without an epoch or a Debian revision (muster is a native package).
if (opts.version !== undefined && !/^[0-9][A-Za-z0-9.+~]*$/.test(opts.version)) usage(`--version ${opts.version} is not a native Debian version (digits first, then letters, digits, . + ~), e.g. 0.2.0 or 0.2.0~rc1`);
const out = resolve(opts.out);
try {
  opts.node ??= shippedNode();
} catch (e) {
  usage(e.message);
}

const say = (line) => process.stderr.write(`package: ${line}\n`);
const run = (cmd, args, o = {}) => execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], ...o });

const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
if (!existsSync(join(root, pkg.bin.muster))) usage(`${pkg.bin.muster} is missing: run \`npm run build\` first (or \`npm run package\`, which does both)`);
const arch = run("dpkg", ["--print-architecture"]).trim();
// A Debian version: npm's pre-release dash becomes a tilde (sorts before the release), and back.
const version = opts.version ?? pkg.version.replace("-", "~");
const npmVersion = version.replace("~", "-");
const nodeVersion = run(opts.node, ["--version"]).trim();

const stage = join(out, "stage");
rmSync(stage, { recursive: true, force: true });
mkdirSync(stage, { recursive: true });
const lib = join(stage, "usr", "lib", "muster");
mkdirSync(lib, { recursive: true });

// 1. The app: what `npm pack` ships (package.json `files`), unpacked, then its production deps.
say("npm pack (what the npm package ships)");
const packed = JSON.parse(run("npm", ["pack", "--ignore-scripts", "--json", "--pack-destination", out], { cwd: root }));
const tarball = join(out, packed[0].filename);
run("tar", ["-xzf", tarball, "-C", lib]);
rmSync(tarball);
const app = join(lib, "app");
renameSync(join(lib, "package"), app);
copyFileSync(join(root, "package-lock.json"), join(app, "package-lock.json"));
// npm ci's tree depends on package-lock.json alone: kept in .muster/cache/deb-deps by the lock's
// hash, a later build copies it (a suite run builds 9 packages; npm ci took 6 s of CPU each). Written
// whole under a temporary name, then renamed: a build beside this one sees all of it or none.
const depsCache = join(root, ".muster", "cache", "deb-deps", createHash("sha256").update(readFileSync(join(root, "package-lock.json"))).digest("hex").slice(0, 16));
if (existsSync(join(depsCache, "complete"))) {
  say(`production dependencies (npm ci --omit=dev's tree for this package-lock.json, from ${relative(root, depsCache)})`);
  cpSync(join(depsCache, "node_modules"), join(app, "node_modules"), { recursive: true, verbatimSymlinks: true });
} else {
  say("production dependencies (npm ci --omit=dev, from the npm cache when it can)");
  run("npm", ["ci", "--omit=dev", "--ignore-scripts", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: app, stdio: ["ignore", "ignore", "inherit"] });
  const tmp = `${depsCache}.${process.pid}.tmp`;
  try {
    cpSync(join(app, "node_modules"), join(tmp, "node_modules"), { recursive: true, verbatimSymlinks: true });
    writeFileSync(join(tmp, "complete"), "");
    renameSync(tmp, depsCache);
  } catch {
    // another build stored it first, or the cache cannot be written: this build has its tree
    rmSync(tmp, { recursive: true, force: true });
  }
}
rmSync(join(app, "package-lock.json"));
rmSync(join(app, "node_modules", ".package-lock.json"), { force: true });
if (version !== pkg.version.replace("-", "~")) {
  const appPkg = JSON.parse(readFileSync(join(app, "package.json"), "utf8"));
  appPkg.version = npmVersion;
  writeFileSync(join(app, "package.json"), `${JSON.stringify(appPkg, null, 2)}\n`);
}
const modulesDir = join(app, "node_modules");

// sodium-native (libsodium for ed25519, src/protocol/ed25519.ts) carries prebuilt addons for 13
// platforms; the package runs on one: keep the shipped node's linux-<arch> .node, drop about 17 MB.
const prebuilds = join(modulesDir, "sodium-native", "prebuilds");
const keep = `linux-${run(opts.node, ["-p", "process.arch"]).trim()}`;
if (!existsSync(join(prebuilds, keep))) say(`warning: sodium-native has no ${keep} prebuild; muster will verify with OpenSSL (slower)`);
else {
  for (const d of readdirSync(prebuilds)) if (d !== keep) rmSync(join(prebuilds, d), { recursive: true, force: true });
  for (const f of readdirSync(join(prebuilds, keep))) if (f.endsWith(".bare")) rmSync(join(prebuilds, keep, f)); // for the Bare runtime, not Node
}
// libsodium's C sources and headers: the prebuilt addon is what loads.
for (const d of ["deps", "src", "include", "vendor", "CMakeLists.txt"]) rmSync(join(modulesDir, "sodium-native", d), { recursive: true, force: true });
// The npm package's README is docs/: /usr/share/doc/muster has the operator's documents.
rmSync(join(app, "README.md"), { force: true });

// Only what runs (packaging/prune.mjs): every package's tests, docs, declarations, configs and
// unused CLIs go; what is left is counted in the summary line.
say("production dependencies without tests, docs, declarations, source maps, configs and CLIs");
const packages = [];
const findPackages = (dir) => {
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (e.startsWith("@")) findPackages(p);
    else if (existsSync(join(p, "package.json"))) {
      packages.push(p);
      if (existsSync(join(p, "node_modules"))) findPackages(join(p, "node_modules"));
    }
  }
};
findPackages(modulesDir);
let pruned = 0;
for (const p of packages) {
  const pj = JSON.parse(readFileSync(join(p, "package.json"), "utf8"));
  for (const f of binFiles(pj)) if (existsSync(join(p, f))) (rmSync(join(p, f)), pruned++);
  const walk = (dir) => {
    for (const e of readdirSync(dir)) {
      const abs = join(dir, e);
      const rel = relative(p, abs);
      if (rel === "node_modules") continue; // nested packages are walked on their own
      const st = lstatSync(abs);
      if (pruneReason(rel, st.isDirectory())) {
        rmSync(abs, { recursive: true, force: true });
        pruned++;
      } else if (st.isDirectory()) walk(abs);
    }
    if (dir !== p && readdirSync(dir).length === 0) rmSync(dir, { recursive: true });
  };
  walk(p);
}
say(`left out ${pruned} files and directories nobody runs`);

// Scripts run by /usr/bin/muster's node, never as programs: no execute bit, no `#!` naming a node
// the machine may not have (lintian: missing-dep-for-interpreter); `//!` keeps line numbers.
const normalise = (dir) => {
  for (const e of readdirSync(dir)) {
    const abs = join(dir, e);
    const st = lstatSync(abs);
    if (st.isSymbolicLink()) continue;
    if (st.isDirectory()) {
      chmodSync(abs, 0o755);
      normalise(abs);
      continue;
    }
    chmodSync(abs, 0o644);
    if (/\.[cm]?js$/.test(e)) {
      const text = readFileSync(abs);
      if (text[0] === 0x23 && text[1] === 0x21) writeFileSync(abs, Buffer.concat([Buffer.from("//"), text.subarray(2)]));
    }
  }
};
normalise(app);

// 2. The runtime (stripped: lintian unstripped-binary-or-object, and 10 MB less), and a launcher
// that finds it next to itself (so an unpacked tree works too).
say(`Node.js runtime ${nodeVersion} from ${opts.node}`);
copyFileSync(opts.node, join(lib, "node"));
chmodSync(join(lib, "node"), 0o755);
// dh_strip's flags: debug symbols and the .comment/.note sections go; the dynamic symbol table
// that addons (sodium-native) resolve napi_* through is never stripped.
const strip = (f) => run("strip", ["--remove-section=.comment", "--remove-section=.note", "--strip-unneeded", f]);
strip(join(lib, "node"));
for (const p of packages) {
  const walk = (dir) => {
    for (const e of readdirSync(dir)) {
      const abs = join(dir, e);
      if (lstatSync(abs).isDirectory()) walk(abs);
      else if (e.endsWith(".node")) strip(abs);
    }
  };
  walk(p);
}
mkdirSync(join(stage, "usr", "bin"), { recursive: true });
writeFileSync(
  join(stage, "usr", "bin", "muster"),
  `#!/bin/sh
# muster, with the Node.js runtime it ships (${nodeVersion}), whatever node is on PATH.
lib="$(dirname "$(readlink -f "$0")")/../lib/muster"
exec "$lib/node" "$lib/app/${pkg.bin.muster}" "$@"
`,
  { mode: 0o755 },
);

// npm's links to dependencies' command-line scripts: the scripts were pruned, and nothing runs them.
for (const p of [modulesDir, ...packages.map((q) => join(q, "node_modules"))]) rmSync(join(p, ".bin"), { recursive: true, force: true });

// 3. systemd units (in /usr/lib/systemd/system: where Debian 13 puts them, and where systemd and
// lintian on Debian 12 accept them too), the daemons' users (sysusers.d) and /run/muster
// (tmpfiles.d), default configs (conffiles), docs and examples, lintian's overrides.
const units = join(stage, "usr", "lib", "systemd", "system");
mkdirSync(units, { recursive: true });
for (const f of readdirSync(join(here, "systemd"))) copyFileSync(join(here, "systemd", f), join(units, f));
for (const [d, f] of [
  ["sysusers.d", "muster.sysusers"],
  ["tmpfiles.d", "muster.tmpfiles"],
]) {
  mkdirSync(join(stage, "usr", "lib", d), { recursive: true });
  copyFileSync(join(here, "debian", f), join(stage, "usr", "lib", d, "muster.conf"));
}
const etc = join(stage, "etc", "muster");
mkdirSync(etc, { recursive: true });
const conffiles = [];
for (const f of readdirSync(join(here, "etc")).sort()) {
  copyFileSync(join(here, "etc", f), join(etc, f));
  conffiles.push(`/etc/muster/${f}`);
}
const doc = join(stage, "usr", "share", "doc", "muster");
mkdirSync(join(doc, "examples"), { recursive: true });
for (const f of ["server.yaml", "provisioner.yaml"]) copyFileSync(join(root, "examples", f), join(doc, "examples", f));
if (existsSync(join(root, "examples", "cloud-init"))) cpSync(join(root, "examples", "cloud-init"), join(doc, "cloud-init"), { recursive: true });
for (const f of ["deploy.md", "security.md", "provisioner.md", "registry.md", "web.md"]) if (existsSync(join(root, "docs", f))) copyFileSync(join(root, "docs", f), join(doc, f));
mkdirSync(join(stage, "usr", "share", "man", "man1"), { recursive: true });
writeFileSync(join(stage, "usr", "share", "man", "man1", "muster.1.gz"), gzipSync(readFileSync(join(here, "man", "muster.1")), { level: 9 }));
mkdirSync(join(stage, "usr", "share", "lintian", "overrides"), { recursive: true });
copyFileSync(join(here, "debian", "lintian-overrides"), join(stage, "usr", "share", "lintian", "overrides", "muster"));

// changelog.gz (a native package's, gzip -9n as policy 12.7 asks): this version's entry.
writeFileSync(join(doc, "changelog.gz"), gzipSync(changelog(), { level: 9 }));
// copyright (DEP-5): muster, Node.js and every npm package shipped, from their package.json.
writeFileSync(join(doc, "copyright"), copyright());

// 4. Control files.
const debian = join(stage, "DEBIAN");
mkdirSync(debian);
for (const f of ["postinst", "prerm", "postrm"]) {
  copyFileSync(join(here, "debian", f), join(debian, f));
  chmodSync(join(debian, f), 0o755);
}
writeFileSync(join(debian, "conffiles"), conffiles.join("\n") + "\n");
// md5sums (as dh_md5sums: every file but the conffiles, which dpkg tracks on its own) for debsums.
const sums = [];
const sumWalk = (d) => {
  for (const e of readdirSync(d).sort()) {
    const q = join(d, e);
    const s = lstatSync(q);
    if (s.isDirectory()) sumWalk(q);
    else if (s.isFile() && !conffiles.includes(`/${relative(stage, q)}`)) sums.push(`${createHash("md5").update(readFileSync(q)).digest("hex")}  ${relative(stage, q)}`);
  }
};
for (const top of readdirSync(stage).sort()) if (top !== "DEBIAN") sumWalk(join(stage, top));
writeFileSync(join(debian, "md5sums"), sums.join("\n") + "\n");
const installedKb = (() => {
  // dpkg-gencontrol's rule: the sum of every file's size in KiB, rounded up, plus one per entry.
  let n = 0;
  const walk = (d) => {
    for (const e of readdirSync(d)) {
      const q = join(d, e);
      const s = lstatSync(q);
      n += s.isDirectory() ? 1 : Math.ceil(s.size / 1024);
      if (s.isDirectory()) walk(q);
    }
  };
  for (const top of readdirSync(stage)) if (top !== "DEBIAN") walk(join(stage, top));
  return n;
})();
writeFileSync(
  join(debian, "control"),
  [
    "Package: muster",
    `Version: ${version}`,
    `Architecture: ${arch}`,
    `Maintainer: ${MAINTAINER}`,
    `Installed-Size: ${installedKb}`,
    // The shipped node links only against these. systemd-sysusers makes the daemons' users in
    // postinst: systemd's where it is installed (it provides systemd-sysusers), else the
    // standalone one, so a minimal system or container does not get all of systemd (and its
    // tmpfiles' leftovers) for a CLI. init-system-helpers gives deb-systemd-invoke for the
    // restart on upgrade. openssl: the site's CA and its certificates (muster ca, muster broker
    // bootstrap-credential) are made with it, on a workstation too.
    "Depends: libc6 (>= 2.28), libstdc++6 (>= 10), libgcc-s1, systemd-standalone-sysusers | systemd-sysusers, init-system-helpers (>= 1.52), openssl",
    // Every node runs Puppet, so it is recommended (apt installs it by default); an operator's
    // workstation installs with --no-install-recommends and gets no Puppet, Facter or Ruby
    // (docs/deploy.md#the-workstation): one package for both, no second runtime to ship.
    "Recommends: puppet-agent | puppet, facter",
    "Suggests: nats-server, monitoring-plugins-basic",
    "Section: admin",
    "Priority: optional",
    "Homepage: https://github.com/muster/muster",
    "Description: take servers from first boot to Puppet-managed, then run the fleet",
    " muster re-imagines MCollective and mcprovision over NATS: a node daemon",
    " hosting agents, clients that find nodes by facts and classes, a provisioner",
    " that drives new machines through certificate signing and Puppet runs, and",
    " fleet-wide Puppet runs, resources, NRPE checks and a registry.",
    " .",
    ` Ships its own Node.js runtime (${nodeVersion}), so it needs no Node.js on the`,
    " machine. Units: muster-server (unprivileged, with muster-privileged.socket",
    " for the few operations that need root), muster-provisioner, muster-registry,",
    " muster-web, each daemon as a user of its own.",
    "",
  ].join("\n"),
);

// 5. The archive.
const deb = join(out, `muster_${version}_${arch}.deb`);
say(`dpkg-deb --build (${opts.compress}${opts.level === undefined ? "" : ` level ${opts.level}`})`);
run("dpkg-deb", ["--root-owner-group", `-Z${opts.compress}`, ...(opts.level === undefined ? [] : [`-z${opts.level}`]), "--build", stage, deb], { stdio: ["ignore", "ignore", "inherit"] });
rmSync(stage, { recursive: true, force: true });
say(`${deb}: ${(statSync(deb).size / 1e6).toFixed(1)} MB, installed ${(installedKb / 1024).toFixed(1)} MiB`);
if (opts.repo) {
  const { writeAptRepo } = await import("./apt-repo.mjs");
  writeAptRepo({ repo: opts.repo, debs: [deb] });
}
process.stdout.write(`${deb}\n`);

function changelog() {
  let changes;
  const md = join(root, "CHANGELOG.md");
  if (existsSync(md)) changes = changelogMdSection(readFileSync(md, "utf8"), npmVersion);
  let date = new Date();
  try {
    const git = (args) => run("git", args, { cwd: root, stdio: ["ignore", "pipe", "ignore"] }).trim();
    date = new Date(git(["log", "-1", "--format=%cI"]));
    if (!changes) {
      // Since package.json's version last changed (the previous release), at most 40 lines.
      const since = git(["log", "-1", "--format=%H", "-G", '"version":', "--", "package.json"]);
      const subjects = git(["log", "--no-merges", "--format=%s", since ? `${since}..HEAD` : "HEAD", "-n", "41"]).split("\n").filter(Boolean);
      changes = subjects.slice(0, 40);
      if (subjects.length > 40) changes.push("... and earlier changes: git log in the source tree.");
    }
  } catch {
    /* not a git checkout (a source tarball): the version alone */
  }
  if (!changes?.length) changes = [`muster ${npmVersion}.`];
  return changelogEntry({ version, changes, date });
}

function copyright() {
  const modules = [];
  const texts = {};
  for (const p of packages) {
    const pj = JSON.parse(readFileSync(join(p, "package.json"), "utf8"));
    const license = dep5License(pj);
    const licFile = readdirSync(p).find((f) => /^(LICEN[CS]E|COPYING)([.-][A-Za-z0-9]+)?$/i.test(f));
    const licText = licFile ? readFileSync(join(p, licFile), "utf8") : undefined;
    // a package's own LICENSE gives the shared text of its licence, the first time one is seen
    if (licText && licenseNames(license).length === 1 && !texts[license]) {
      const generic = genericLicenseText(licText);
      if (generic.length > 100) texts[license] = generic;
    }
    modules.push({ dir: relative(stage, p), name: pj.name, version: pj.version, license, holders: copyrightHolders(licText, pj) });
  }
  const nodeLicense = [join(dirname(opts.node), "..", "share", "doc", "nodejs", "LICENSE"), join(dirname(opts.node), "..", "LICENSE"), "/usr/share/doc/nodejs/copyright"].find((f) => existsSync(f));
  const licenseText = nodeLicense ? readFileSync(nodeLicense, "utf8") : `Node.js ${nodeVersion} is licensed under the Expat (MIT) licence with bundled components under their own;\nthe full text: https://github.com/nodejs/node/blob/${nodeVersion}/LICENSE`;
  return copyrightFile({ version, modules, texts, node: { version: nodeVersion, licenseText } });
}
