#!/usr/bin/env node
// Builds muster_<version>_<arch>.deb from the compiled tree (npm run build first; `npm run package`
// does both) and prints its path as the last line.
//
// The package carries its own Node.js runtime (docs/decisions/shipping.md): /usr/lib/muster/node
// runs /usr/lib/muster/app, which is exactly what `npm pack` ships plus the production
// dependencies, so assets listed in package.json `files` come along without changes here.
//
//   node packaging/build-deb.mjs [--out DIR] [--node PATH] [--compress xz|gzip|zstd|none]
//
// --out defaults to build/; --node to the node running this script; --compress to xz (what a
// release ships; the tests use a faster one, the contents are the same).
import { execFileSync } from "node:child_process";
import { chmodSync, copyFileSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const here = join(root, "packaging");

function usage(msg) {
  process.stderr.write(`${msg}\nusage: node packaging/build-deb.mjs [--out DIR] [--node PATH] [--compress xz|gzip|zstd|none]\n`);
  process.exit(64);
}

const opts = { out: join(root, "build"), node: process.execPath, compress: "xz" };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const k = argv[i];
  const v = argv[i + 1];
  if (!["--out", "--node", "--compress"].includes(k)) usage(`unknown argument ${k}`);
  if (v === undefined) usage(`${k} needs a value`);
  opts[k.slice(2)] = v;
  i++;
}
if (!["xz", "gzip", "zstd", "none"].includes(opts.compress)) usage(`--compress takes xz, gzip, zstd or none, not ${opts.compress}`);
const out = resolve(opts.out);

const say = (line) => process.stderr.write(`package: ${line}\n`);
const run = (cmd, args, o = {}) => execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], ...o });

const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
if (!existsSync(join(root, pkg.bin.muster))) usage(`${pkg.bin.muster} is missing: run \`npm run build\` first (or \`npm run package\`, which does both)`);
const arch = run("dpkg", ["--print-architecture"]).trim();
// A Debian version: npm's pre-release dash becomes a tilde (sorts before the release).
const version = pkg.version.replace("-", "~");
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
say("production dependencies (npm ci --omit=dev, from the npm cache when it can)");
run("npm", ["ci", "--omit=dev", "--ignore-scripts", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: app, stdio: ["ignore", "ignore", "inherit"] });
rmSync(join(app, "package-lock.json"));
// sodium-native (libsodium for ed25519, src/protocol/ed25519.ts) carries prebuilt addons for 13
// platforms; the package runs on one: keep the shipped node's linux-<arch> .node, drop about 17 MB.
const prebuilds = join(app, "node_modules", "sodium-native", "prebuilds");
const keep = `linux-${run(opts.node, ["-p", "process.arch"]).trim()}`;
if (!existsSync(join(prebuilds, keep))) say(`warning: sodium-native has no ${keep} prebuild; muster will verify with OpenSSL (slower)`);
else {
  for (const d of readdirSync(prebuilds)) if (d !== keep) rmSync(join(prebuilds, d), { recursive: true, force: true });
  for (const f of readdirSync(join(prebuilds, keep))) if (f.endsWith(".bare")) rmSync(join(prebuilds, keep, f)); // for the Bare runtime, not Node
}

// 2. The runtime, and a launcher that finds it next to itself (so an unpacked tree works too).
say(`Node.js runtime ${nodeVersion} from ${opts.node}`);
copyFileSync(opts.node, join(lib, "node"));
chmodSync(join(lib, "node"), 0o755);
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

// 3. systemd units, default configs (conffiles), docs and examples.
const units = join(stage, "lib", "systemd", "system");
mkdirSync(units, { recursive: true });
for (const f of readdirSync(join(here, "systemd"))) copyFileSync(join(here, "systemd", f), join(units, f));
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
for (const f of ["deploy.md", "security.md", "provisioner.md", "registry.md"]) if (existsSync(join(root, "docs", f))) copyFileSync(join(root, "docs", f), join(doc, f));
writeFileSync(
  join(doc, "copyright"),
  `muster ${pkg.version}: ${pkg.license}.\nIt ships the Node.js runtime ${nodeVersion} (/usr/lib/muster/node): MIT license, https://nodejs.org/.\nThird-party modules under /usr/lib/muster/app/node_modules carry their own licenses.\n`,
);

// 4. Control files.
const debian = join(stage, "DEBIAN");
mkdirSync(debian);
for (const f of ["postinst", "prerm", "postrm"]) {
  copyFileSync(join(here, "debian", f), join(debian, f));
  chmodSync(join(debian, f), 0o755);
}
writeFileSync(join(debian, "conffiles"), conffiles.join("\n") + "\n");
const duKb = (p) => {
  let n = 0;
  const walk = (d) => {
    for (const e of readdirSync(d)) {
      const q = join(d, e);
      const s = statSync(q);
      if (s.isDirectory()) walk(q);
      else n += Math.ceil(s.size / 1024);
    }
  };
  walk(p);
  return n;
};
writeFileSync(
  join(debian, "control"),
  [
    "Package: muster",
    `Version: ${version}`,
    `Architecture: ${arch}`,
    "Maintainer: muster developers <muster@example.net>",
    `Installed-Size: ${duKb(join(stage, "usr")) + duKb(join(stage, "lib")) + duKb(join(stage, "etc"))}`,
    // The shipped node links only against these; useradd (passwd) makes the muster user in postinst.
    "Depends: libc6 (>= 2.28), libstdc++6 (>= 10), libgcc-s1, passwd",
    "Recommends: puppet-agent | puppet, facter",
    "Suggests: nats-server, monitoring-plugins-basic",
    "Section: admin",
    "Priority: optional",
    "Homepage: https://github.com/muster/muster",
    `Description: ${pkg.description.replace(/:.*/, "")}`,
    ` ${pkg.description}`,
    " .",
    ` Ships its own Node.js runtime (${nodeVersion}), so it needs no Node.js on the`,
    " machine. Units: muster-server, muster-provisioner, muster-registry.",
    "",
  ].join("\n"),
);

// 5. The archive.
const deb = join(out, `muster_${version}_${arch}.deb`);
say(`dpkg-deb --build (${opts.compress})`);
run("dpkg-deb", ["--root-owner-group", `-Z${opts.compress}`, "--build", stage, deb], { stdio: ["ignore", "ignore", "inherit"] });
rmSync(stage, { recursive: true, force: true });
process.stdout.write(`${deb}\n`);
