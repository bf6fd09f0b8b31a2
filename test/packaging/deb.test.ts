import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmodSync, cpSync, existsSync, mkdirSync, readFileSync, readlinkSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { readFile } from "node:fs/promises";
import { promisify } from "node:util";
import { parse as parseYaml, stringify as toYaml } from "yaml";
import { unpackMuster } from "../../src/lab/package.js";
import { loadProvisionerConfig } from "../../src/provisioner/config.js";
import { loadRegistryConfig } from "../../src/registry/config.js";
import { loadServerConfig } from "../../src/server/config.js";
import { loadWebConfig } from "../../src/web/config.js";
import { startNats } from "../support/index.js";
import { cleanEnv, repoRoot, runCli, spawnMuster, startBroker, tempDir, type Broker, type MusterProcess } from "../support/collective.js";

// The .deb as an operator gets it: built by packaging/build-deb.mjs (what `npm run package` runs
// after the build), read with dpkg-deb, its units checked by systemd-analyze, unpacked into a
// throwaway root and run from there with no Node.js on PATH, and installed, removed and purged by
// real dpkg into another throwaway root (maintainer scripts included, via DPKG_ROOT).

const run = promisify(execFile);
const tmp = tempDir("deb");
const pkg = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as { version: string };
/** Each daemon and the user of its own it runs as. */
const DAEMONS: Record<string, string> = { "muster-server": "muster", "muster-provisioner": "muster-provisioner", "muster-registry": "muster-registry", "muster-web": "muster-web" };
const UNITS = Object.keys(DAEMONS);
/** Every unit file the package ships: the daemons, and the privileged helper with its socket. */
const UNIT_FILES = [...UNITS.map((u) => `${u}.service`), "muster-privileged.service", "muster-privileged.socket"];
const CONFFILES = ["/etc/muster/provisioner.yaml", "/etc/muster/registry.yaml", "/etc/muster/server.yaml", "/etc/muster/web.yaml"];
/** Where Debian 13 puts units, and where Debian 12's systemd and lintian take them too. */
const UNIT_DIR = ["usr", "lib", "systemd", "system"];

let deb: string;
let root: string;
let broker: Broker;
let server: MusterProcess | undefined;

before(async () => {
  // gzip: the release's xz takes a minute on a busy machine; the contents are the same.
  const built = await run(process.execPath, [join(repoRoot, "packaging", "build-deb.mjs"), "--out", join(tmp.path, "out"), "--compress", "gzip", "--level", "1"], { cwd: repoRoot, maxBuffer: 16 << 20 });
  deb = built.stdout.trim().split("\n").at(-1)!;
  root = join(tmp.path, "root");
  mkdirSync(root);
  await run("dpkg-deb", ["-x", deb, root]);
  broker = await startBroker();
});

after(async () => {
  await server?.stop();
  await broker?.dispose();
  tmp.remove();
});

test("build-deb refuses a compression level it cannot pass to dpkg-deb: exit 64 with what --level takes, nothing built", async () => {
  for (const level of ["10", "fast", "-1"]) {
    const out = join(tmp.path, `bad-level-${level}`);
    const r = await run(process.execPath, [join(repoRoot, "packaging", "build-deb.mjs"), "--out", out, "--level", level], { cwd: repoRoot }).then(
      () => ({ code: 0, stderr: "" }),
      (e: { code: number; stderr: string }) => e,
    );
    assert.equal(r.code, 64, `--level ${level}`);
    assert.match(r.stderr, /--level takes a compression level from 0 to 9/);
    assert.equal(existsSync(out), false, `--level ${level}: nothing built`);
  }
});

test("npm run package's last line is the path of muster_<version>_<arch>.deb", async () => {
  const arch = (await run("dpkg", ["--print-architecture"])).stdout.trim();
  assert.equal(deb, join(tmp.path, "out", `muster_${pkg.version}_${arch}.deb`));
  assert.ok(existsSync(deb));
  const field = async (f: string) => (await run("dpkg-deb", ["--field", deb, f])).stdout.trim();
  assert.equal(await field("Package"), "muster");
  assert.equal(await field("Version"), pkg.version);
  assert.equal(await field("Architecture"), arch);
  // No nodejs: the package carries its runtime; only what that node binary links against.
  assert.doesNotMatch(await field("Depends"), /node/);
  assert.match(await field("Depends"), /libc6/);
  // a workstation installs without recommends and gets no Puppet, Facter or Ruby; nodes get them
  assert.doesNotMatch(await field("Depends"), /puppet|facter|ruby/);
  assert.match(await field("Recommends"), /puppet-agent \| puppet, facter/);
});

test("dpkg-deb: the launcher, the runtime, the app without dev dependencies, units, conffiles, maintainer scripts", async () => {
  const listing = (await run("dpkg-deb", ["--contents", deb], { maxBuffer: 64 << 20 })).stdout.split("\n").filter(Boolean);
  const entry = (path: string) => listing.find((l) => l.endsWith(` .${path}`) || l.includes(` .${path} -> `));
  for (const p of ["/usr/bin/muster", "/usr/lib/muster/node"]) assert.match(entry(p) ?? `${p} missing`, /^-rwxr-xr-x root\/root /, p);
  for (const p of ["/usr/lib/muster/app/dist/src/cli/main.cjs", "/usr/lib/muster/app/dist/src/cli/main.js", "/usr/lib/muster/app/dist/src/cli/help.json", "/usr/lib/muster/app/package.json", "/usr/lib/muster/app/puppet/modules/muster/lib/puppet/functions/search_nodes.rb", "/usr/lib/muster/app/node_modules/@nats-io/transport-node/package.json"]) {
    assert.ok(entry(p), `${p} is in the package`);
  }
  for (const u of UNIT_FILES) assert.ok(entry(`/usr/lib/systemd/system/${u}`), `${u} is in the package`);
  assert.deepEqual(listing.filter((l) => / \.\/lib\//.test(l)), [], "nothing under /lib: units live in /usr/lib");
  // npm's links to dependencies' scripts point at what the prune removed: none ships, and every
  // link that does ship leads to a file in the package (piuparts fails a package on broken links)
  assert.deepEqual(listing.filter((l) => l.includes("/node_modules/.bin/")), []);
  const links = listing.filter((l) => l.startsWith("l")).map((l) => /\.(\/\S+) -> (\S+)$/.exec(l)!);
  const broken = links.filter(([, at, to]) => !existsSync(join(root, to!.startsWith("/") ? to! : join(at!, "..", to!))));
  assert.deepEqual(broken.map(([l]) => l), []);
  for (const p of ["/usr/lib/sysusers.d/muster.conf", "/usr/lib/tmpfiles.d/muster.conf", "/usr/share/man/man1/muster.1.gz", "/usr/share/doc/muster/changelog.gz", "/usr/share/doc/muster/copyright"]) assert.ok(entry(p), `${p} is in the package`);
  for (const c of CONFFILES) assert.ok(entry(c), `${c} is in the package`);
  // What npm pack ships: compiled JavaScript, not sources, tests or dev tools.
  const names = listing.map((l) => l.replace(/^.* \.\//, "/"));
  // sources stay out, except the web console's assets, which the browser loads as they are
  assert.deepEqual(names.filter((n) => (/\/app\/(src|test|bench)\//.test(n) && !/\/app\/src\/(web\/(assets\/.*)?)?$/.test(n)) || /\/app\/dist\/test\//.test(n)), []);
  for (const asset of ["index.html", "login.html", "app.js"]) assert.ok(names.includes(`/usr/lib/muster/app/src/web/assets/${asset}`), `the console's ${asset} ships`);
  assert.ok(names.includes("/usr/lib/muster/app/node_modules/lit-html/package.json"), "the console's view library ships from node_modules");
  // libsodium for ed25519: this platform's prebuilt addon, and no other platform's
  const prebuilds = [...new Set(names.map((n) => /\/node_modules\/sodium-native\/prebuilds\/([^/]+)\//.exec(n)?.[1]).filter(Boolean))];
  assert.deepEqual(prebuilds, [`linux-${process.arch}`]);
  // our devDependencies stay out (a runtime dependency may pull in an @types package: lit-html does)
  const dev = Object.keys((JSON.parse(readFileSync(new URL("../../../package.json", import.meta.url), "utf8")) as { devDependencies: Record<string, string> }).devDependencies);
  assert.deepEqual(names.filter((n) => dev.some((d) => n.startsWith(`/usr/lib/muster/app/node_modules/${d}/`))), [], "no devDependencies");
  assert.ok(listing.every((l) => l.includes(" root/root ")), "every file belongs to root");
  // Only what runs: no tests, fixtures, docs, declarations, source maps, lint configs or dependency CLIs.
  const deps = names.filter((n) => n.startsWith("/usr/lib/muster/app/node_modules/"));
  assert.deepEqual(deps.filter((n) => /\/(test|tests|__tests__|fixtures|benchmarks?|examples?|docs|integration)\/|\.d\.[cm]?ts$|\.map$|\.[cm]?ts$|\/\.(eslintrc|npmignore|editorconfig|prettierrc)|\.md$/i.test(n) && !/\/LICEN[CS]E/i.test(n)), []);
  for (const cli of ["semver/bin/semver.js", "yaml/bin.mjs", "pino/bin.js", "mime/cli.js"]) assert.ok(!names.includes(`/usr/lib/muster/app/node_modules/${cli}`), `${cli} (a dependency's CLI) is left out`);
  // the one executable is the runtime: scripts are run by it, never as programs
  assert.deepEqual(listing.filter((l) => l.startsWith("-rwx") && l.includes("/usr/lib/muster/")).map((l) => l.replace(/^.* \.\//, "/")), ["/usr/lib/muster/node"]);

  const ctl = join(tmp.path, "control");
  await run("dpkg-deb", ["--control", deb, ctl]);
  assert.deepEqual(readFileSync(join(ctl, "conffiles"), "utf8").trim().split("\n").sort(), CONFFILES);
  // md5sums covers every file but the conffiles, and they match (debsums checks an installed system so)
  const sums = readFileSync(join(ctl, "md5sums"), "utf8").trim().split("\n");
  assert.equal(sums.length, names.filter((n) => !n.endsWith("/") && !CONFFILES.includes(n) && listing.find((l) => l.endsWith(` .${n}`))?.startsWith("-")).length, "one line per file");
  await run("md5sum", ["--check", "--quiet", join(ctl, "md5sums")], { cwd: root });
  for (const s of ["postinst", "prerm", "postrm"]) {
    const text = readFileSync(join(ctl, s), "utf8");
    assert.match(text, /^#!\/bin\/sh\n/, `${s} is a shell script`);
    await run("sh", ["-n", join(ctl, s)]); // parses
  }
});

/** A unit's [Service] settings (the last value of a repeated key). */
function service(unit: string): Map<string, string> {
  const text = readFileSync(join(root, ...UNIT_DIR, `${unit}.service`), "utf8");
  const body = text.slice(text.indexOf("[Service]"), text.indexOf("[Install]"));
  return new Map(body.split("\n").filter((l) => /^[A-Za-z]+=/.test(l)).map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]));
}

test("units: each daemon runs as a user of its own with no capability, system read-only and home hidden; the helper as root, socket-activated, with limits", () => {
  for (const u of UNITS) {
    const s = service(u);
    assert.equal(s.get("NoNewPrivileges"), "yes", u);
    assert.equal(s.get("Restart"), "on-failure", u);
    assert.match(s.get("ExecStart")!, /^\/usr\/bin\/muster /, u);
    const config = /--config (\S+)/.exec(s.get("ExecStart")!)?.[1];
    assert.ok(config && CONFFILES.includes(config), `${u} reads a conffile (${config})`);
    // None of the daemons reloads its config on a signal (SIGHUP would end it): a reload would lie.
    assert.equal(s.has("ExecReload"), false, `${u} has no ExecReload`);
  }
  for (const u of UNITS) {
    const s = service(u);
    assert.equal(s.get("User"), DAEMONS[u], u);
    assert.equal(s.get("Group"), DAEMONS[u], u);
    assert.equal(s.get("ProtectSystem"), "strict", u);
    assert.equal(s.get("ProtectHome"), "yes", u);
    assert.equal(s.get("CapabilityBoundingSet"), "", `${u} keeps no capability`);
  }
  // What needs root, the server asks of the privileged helper (docs/decisions/privileged-helper.md).
  const helper = service("muster-privileged");
  assert.equal(helper.get("User"), undefined, "the helper runs as root");
  assert.match(helper.get("ExecStart")!, /^\/usr\/bin\/muster privileged serve --config \/etc\/muster\/server\.yaml --client-user muster --idle-exit 10$/);
  assert.equal(helper.get("KillMode"), "mixed", "a restart waits for the Puppet run in flight");
  assert.equal(helper.get("TasksMax"), "512");
  assert.equal(helper.get("MemoryMax"), "2G");
  // Puppet run as the daemon's user (puppet config print) needs a home it can write under ProtectSystem=strict
  const server = service("muster-server");
  assert.ok(server.get("StateDirectory")!.split(" ").includes("muster/server"));
  assert.match(readFileSync(join(root, ...UNIT_DIR, "muster-server.service"), "utf8"), /^Environment=HOME=\/var\/lib\/muster\/server$/m);
  const socket = readFileSync(join(root, ...UNIT_DIR, "muster-privileged.socket"), "utf8");
  assert.match(socket, /^ListenStream=\/run\/muster\/privileged\.sock$/m);
  assert.match(socket, /^SocketUser=root$/m);
  assert.match(socket, /^SocketGroup=muster$/m);
  assert.match(socket, /^SocketMode=0660$/m);
  // /run/muster: root and muster's group, whoever makes it (tmpfiles, or systemd for the socket)
  assert.match(readFileSync(join(root, "usr", "lib", "tmpfiles.d", "muster.conf"), "utf8"), /^d \/run\/muster 0750 root muster -$/m);
  assert.match(socket, /^DirectoryMode=0750$/m, "the socket's directory as tmpfiles makes it, never wider");
  const serverUnit = readFileSync(join(root, ...UNIT_DIR, "muster-server.service"), "utf8");
  assert.match(serverUnit, /^Wants=.*muster-privileged\.socket/m);
  assert.match(serverUnit, /^Also=muster-privileged\.socket$/m, "enabling the server enables its helper's socket");
  // The packaged server config names the helper the server's unit needs.
  assert.equal(loadServerConfig(join(root, "etc", "muster", "server.yaml")).privileged_helper, "/run/muster/privileged.sock");
});

test("systemd-analyze verify accepts the units as installed, and flags a broken one", async () => {
  // verify resolves ExecStart and the units' dependencies inside --root: give it the host's units.
  const vroot = join(tmp.path, "verify-root");
  cpSync(root, vroot, { recursive: true, verbatimSymlinks: true });
  mkdirSync(join(vroot, "usr", "lib", "systemd"), { recursive: true });
  cpSync("/lib/systemd/system", join(vroot, "usr", "lib", "systemd", "system"), { recursive: true, verbatimSymlinks: true });
  const units = UNIT_FILES.map((u) => join(vroot, ...UNIT_DIR, u));
  const ok = await run("systemd-analyze", ["verify", "--man=no", `--root=${vroot}`, ...units]);
  assert.equal(ok.stderr.trim(), "", "no warnings");

  const broken = join(vroot, ...UNIT_DIR, "muster-broken.service");
  writeFileSync(broken, readFileSync(units[1]!, "utf8").replace("NoNewPrivileges=yes", "NoNewPrivilege=yes").replace("/usr/bin/muster", "/usr/bin/muster-gone"));
  const bad = await run("systemd-analyze", ["verify", "--man=no", `--root=${vroot}`, broken]).then(
    () => undefined,
    (e: { stderr: string }) => e,
  );
  assert.ok(bad, "verify fails on a unit whose command is missing");
  assert.match(bad.stderr, /Unknown key 'NoNewPrivilege'/);
  assert.match(bad.stderr, /muster-gone/);
});

/** systemd-analyze security's overall exposure of a unit file, offline (no systemd needed). */
async function exposure(unitFile: string): Promise<number> {
  const r = await run("systemd-analyze", ["security", "--offline=true", "--no-pager", unitFile]).catch((e: { stdout: string }) => e);
  const m = /Overall exposure level for \S+: (\d+\.\d)/.exec(r.stdout);
  assert.ok(m, `no exposure level in: ${r.stdout.slice(-300)}`);
  return Number(m[1]);
}

test("systemd-analyze security: the server, provisioner, registry and console expose 2.0 or less; the root helper scores as root", async () => {
  const unit = (u: string) => join(root, ...UNIT_DIR, u);
  const scores = Object.fromEntries(await Promise.all([...UNITS.map((u) => `${u}.service`), "muster-privileged.service"].map(async (u) => [u, await exposure(unit(u))] as const)));
  for (const u of UNITS) assert.ok(scores[`${u}.service`]! <= 2.0, `${u}: ${JSON.stringify(scores)}`);
  // the measure can fail: the helper runs Puppet as root with the system writable, and says so
  assert.ok(scores["muster-privileged.service"]! > 5.0, JSON.stringify(scores));
});

test("lintian: no error and no warning on the package; every override carries its reason", async () => {
  const r = await run("lintian", ["--tag-display-limit", "0", "--fail-on", "none", deb], { maxBuffer: 16 << 20 });
  const tags = r.stdout.split("\n").filter((l) => /^[EW]: /.test(l));
  assert.deepEqual(tags, [], "lintian errors and warnings");
  // an override is a decision: a comment line right above each one says why
  const overrides = readFileSync(join(root, "usr", "share", "lintian", "overrides", "muster"), "utf8").split("\n");
  overrides.forEach((l, i) => {
    if (l.trim() !== "" && !l.startsWith("#")) assert.match(overrides[i - 1] ?? "", /^# \S.{20,}/, `override ${l} has a one-line reason above it`);
  });
  assert.ok(overrides.some((l) => l.startsWith("muster: ")), "the overrides file is the one lintian reads");
});

test("changelog and copyright: the version's entry, and DEP-5 naming muster's Apache-2.0, Node.js and every bundled npm package", async () => {
  const { stdout: changelog } = await run("sh", ["-c", `gzip -dc "${join(root, "usr", "share", "doc", "muster", "changelog.gz")}"`]);
  assert.match(changelog, new RegExp(`^muster \\(${pkg.version.replace(/\./g, "\\.")}\\) unstable; urgency=medium\n`));
  assert.match(changelog, /\n -- .+ <.+>  \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d \+0000\n$/);
  const copyright = readFileSync(join(root, "usr", "share", "doc", "muster", "copyright"), "utf8");
  assert.match(copyright, /^Format: https:\/\/www\.debian\.org\/doc\/packaging-manuals\/copyright-format\/1\.0\/\n/);
  assert.match(copyright, /Files: \*\nCopyright: muster developers\nLicense: Apache-2\.0\n/);
  assert.match(copyright, /\/usr\/share\/common-licenses\/Apache-2\.0/);
  assert.match(copyright, /Files: usr\/lib\/muster\/node\n/);
  // every package directory shipped under node_modules has its paragraph, with its package.json's licence
  const nm = join(root, "usr", "lib", "muster", "app", "node_modules");
  const dirs: string[] = [];
  const find = (d: string) => {
    for (const e of readdirSync(d)) {
      if (e.startsWith("@")) find(join(d, e));
      else if (existsSync(join(d, e, "package.json"))) {
        dirs.push(join(d, e));
        if (existsSync(join(d, e, "node_modules"))) find(join(d, e, "node_modules"));
      }
    }
  };
  find(nm);
  assert.ok(dirs.length > 50, `${dirs.length} packages`);
  for (const d of dirs) {
    const rel = d.slice(root.length + 1);
    const escaped = rel.replace(/[.*+?^${}()|[\]\\]/g, (c) => `\\${c}`);
    const para = new RegExp(`Files: ${escaped}/\\*\\nCopyright: .+(\\n .+)*\\nLicense: (\\S+)`).exec(copyright);
    assert.ok(para, `a paragraph for ${rel}`);
    const declared = (JSON.parse(readFileSync(join(d, "package.json"), "utf8")) as { license?: string }).license;
    const dep5: Record<string, string> = { MIT: "Expat", "BSD-2-Clause": "BSD-2-clause", "BSD-3-Clause": "BSD-3-clause" };
    assert.equal(para[2], dep5[declared ?? ""] ?? declared, `${rel}: the licence its package.json declares`);
  }
  for (const l of ["Expat", "ISC", "BlueOak-1.0.0", "Unlicense", "Node.js"]) assert.match(copyright, new RegExp(`^License: ${l.replace(".", "\\.")}\\n \\S`, "m"), `the text of ${l}`);
});

test("the default configs in /etc/muster load with the daemons' own loaders", () => {
  const server = loadServerConfig(join(root, "etc", "muster", "server.yaml"));
  assert.deepEqual(server.collectives, ["muster"]);
  const prov = loadProvisionerConfig(join(root, "etc", "muster", "provisioner.yaml"));
  assert.equal(prov.target.collective, "provisioning");
  assert.equal(prov.daemonize, false, "systemd supervises it: no self-daemonizing");
  const reg = loadRegistryConfig(join(root, "etc", "muster", "registry.yaml"));
  assert.equal(reg.http?.host, "127.0.0.1");
  // the console: loopback (behind a proxy, or its own tls:), every request authenticated by its tokens file
  const web = loadWebConfig(join(root, "etc", "muster", "web.yaml"));
  assert.equal(web.listen, "127.0.0.1:8480");
  assert.equal(web.auth.tokens_file, "/etc/muster/web.tokens");
});

/** A PATH with the tools the launcher uses (sh, dirname, readlink) and, if given, a decoy `node`. */
function toolsPath(name: string, decoyNode: boolean): string {
  const bin = join(tmp.path, name);
  mkdirSync(bin);
  for (const t of ["sh", "dirname", "readlink"]) symlinkSync(`/usr/bin/${t}`, join(bin, t));
  if (decoyNode) {
    writeFileSync(join(bin, "node"), '#!/bin/sh\necho "v18.19.0: an older node that cannot run muster" >&2\nexit 42\n');
    chmodSync(join(bin, "node"), 0o755);
  }
  return bin;
}

test("unpacked: muster --version runs on its own runtime even with an old node first on PATH", async () => {
  const PATH = toolsPath("decoy-bin", true);
  const r = await run(join(root, "usr", "bin", "muster"), ["--version"], { env: { PATH } });
  assert.equal(r.stdout.trim(), pkg.version);
});

test("the runtime is the supported LTS pinned in packaging/runtime, not the node that built the package", async () => {
  const pinned = (JSON.parse(readFileSync(join(repoRoot, "packaging", "runtime", "package.json"), "utf8")) as { dependencies: Record<string, string> }).dependencies[`node-linux-${process.arch}`];
  const r = await run(join(root, "usr", "lib", "muster", "node"), ["-p", "JSON.stringify({ version: process.version, lts: process.release.lts ?? null })"]);
  const shipped = JSON.parse(r.stdout) as { version: string; lts: string | null };
  assert.equal(shipped.version, `v${pinned}`);
  // an LTS release names its line (Krypton for 24); a Current or an odd line has none
  assert.ok(shipped.lts, `the shipped node ${shipped.version} is not an LTS release`);
  assert.match(await readFile(join(root, "usr", "share", "doc", "muster", "copyright"), "utf8"), new RegExp(`Node\\.js ${shipped.version.replace(/\./g, "\\.")}`));
});

test("unpacked: a real muster server with no node on PATH answers ping against a test broker", async () => {
  const PATH = toolsPath("no-node-bin", false);
  const probe = await run("/usr/bin/sh", ["-c", "command -v node || echo none"], { env: { PATH } });
  assert.equal(probe.stdout.trim(), "none", "no node on the server's PATH");
  const identity = "pkg1.deb.test";
  const config = join(tmp.path, "pkg-server.yaml");
  writeFileSync(config, toYaml({ identity, brokers: [broker.url], facts: { facter: false, extra: { packaged: true } }, registration: { interval: 0 }, log: { level: "warn" } }));
  // One config dir for server and client: the node trusts the local user's key (as on a single machine).
  const home = join(tmp.path, "home");
  const env = { ...cleanEnv(home), PATH };
  server = spawnMuster(["server", "--config", config], { env, bin: join(root, "usr", "bin", "muster") });
  await server.waitForLine(/ready/, 30_000);
  // It is the shipped runtime that runs it (the launcher execs it, so the pid is node's).
  assert.equal(readlinkSync(`/proc/${server.child.pid}/exe`), join(root, "usr", "lib", "muster", "node"));

  const ping = await runCli(["ping", "--broker", broker.url], { env: cleanEnv(home) });
  assert.equal(ping.code, 0, ping.stderr);
  assert.match(ping.stdout, new RegExp(identity.replace(/\./g, "\\.")));
  // The shipped runtime loads the shipped libsodium addon (node signatures at full speed).
  const doctor = await run(join(root, "usr", "bin", "muster"), ["doctor", "--json", "--broker", broker.url], { env }).catch((e: { stdout?: string }) => ({ stdout: e.stdout ?? "" }));
  const checks = (JSON.parse(doctor.stdout) as { checks: Array<{ name: string; detail: string }> }).checks;
  assert.match(checks.find((c) => c.name === "ed25519")?.detail ?? "no ed25519 check", /^libsodium /);
  const stopped = await server.stop();
  assert.equal(stopped.code, 0, "stops cleanly on SIGTERM");
});

/** A root dpkg can install into: an empty database and a minimal user database (root only). */
function dpkgRoot(name: string): string {
  const r = join(tmp.path, name);
  mkdirSync(join(r, "var", "lib", "dpkg", "info"), { recursive: true });
  mkdirSync(join(r, "var", "lib", "dpkg", "updates"));
  writeFileSync(join(r, "var", "lib", "dpkg", "status"), "");
  mkdirSync(join(r, "etc"));
  const users = { passwd: "root:x:0:0:root:/root:/bin/sh\n", group: "root:x:0:\n", shadow: "root:*:20000:0:99999:7:::\n", gshadow: "root:*::\n" };
  for (const [f, text] of Object.entries(users)) writeFileSync(join(r, "etc", f), text, { mode: f.endsWith("shadow") ? 0o640 : 0o644 });
  return r;
}

test("dpkg in a throwaway root: install keeps a cloud-init server.yaml and makes a user per daemon; reinstall is idempotent; remove keeps /etc/muster; purge removes it", async () => {
  const r = dpkgRoot("dpkg-root");
  const hostPasswd = readFileSync("/etc/passwd", "utf8");
  // Chrootless scripts with DPKG_ROOT (dpkg sets it): the dependencies are the machine's, not this root's.
  // This machine as one that once had the package: a leftover `muster` group (gid 995, Debian
  // keeps system groups on purge) in its /etc/group, bind-mounted in a mount namespace of dpkg's
  // own. The postinst must resolve names inside the root it installs into, never here.
  const hostGroups = join(tmp.path, "host-group");
  writeFileSync(hostGroups, readFileSync("/etc/group", "utf8").split("\n").filter((l) => l && !l.startsWith("muster:")).join("\n") + "\nmuster:x:995:\n");
  const dpkg = (...args: string[]) =>
    run("unshare", ["--mount", "--propagation", "private", "sh", "-c", 'mount --bind "$1" /etc/group && shift && exec "$@"', "sh", hostGroups, "dpkg", `--root=${r}`, "--force-not-root", "--force-script-chrootless", "--force-depends", "--log=/dev/null", ...args]);
  // As cloud-init does (examples/cloud-init/): the node's server.yaml is written before the package
  // is installed, and --force-confold keeps it.
  const cloud = (parseYaml(readFileSync(join(repoRoot, "examples", "cloud-init", "user-data.yaml"), "utf8")) as { write_files: { path: string; content: string }[] }).write_files;
  const cloudServer = cloud.find((f) => f.path === "/etc/muster/server.yaml")!.content;
  mkdirSync(join(r, "etc", "muster"));
  writeFileSync(join(r, "etc", "muster", "server.yaml"), cloudServer);
  await dpkg("--force-confold", "-i", deb);
  assert.equal(readFileSync(join(r, "etc", "muster", "server.yaml"), "utf8"), cloudServer, "the server.yaml cloud-init wrote is kept");
  const users = (f: string, name = "muster") => readFileSync(join(r, "etc", f), "utf8").split("\n").filter((l) => l.startsWith(`${name}:`));
  assert.equal(users("passwd").length, 1, "the muster user");
  assert.match(users("passwd")[0]!, /:\/var\/lib\/muster\/server:\/usr\/sbin\/nologin$/);
  assert.equal(users("group").length, 1, "the muster group");
  // a user of its own for each daemon, its home its state directory, none in muster's group
  for (const [u, home] of [["muster-provisioner", "provisioner"], ["muster-registry", "registry"], ["muster-web", "web"]] as const) {
    assert.match(users("passwd", u)[0] ?? `no ${u}`, new RegExp(`:/var/lib/muster/${home}:/usr/sbin/nologin$`), u);
  }
  assert.equal(users("group")[0]!.split(":")[3], "", "only the node daemon is in the group that reaches the helper's socket");
  assert.deepEqual(users("group", "muster-config")[0]!.split(":")[3]!.split(",").sort(), ["muster", "muster-provisioner", "muster-registry", "muster-web"]);
  assert.equal(readFileSync("/etc/passwd", "utf8"), hostPasswd, "the host's users are untouched");
  for (const c of CONFFILES) assert.ok(existsSync(join(r, c)), c);
  assert.ok(existsSync(join(r, "etc", "muster", "tls")), "the credentials directory");
  const gid = users("group")[0]!.split(":")[2];
  assert.notEqual(gid, "995", "the root's own muster group, not the machine's leftover one");
  // /run/muster as systemd-tmpfiles makes it from the shipped muster.conf, at boot before the socket
  await run("systemd-tmpfiles", [`--root=${r}`, "--create", "muster.conf"]);
  const { stdout: runDir } = await run("stat", ["-c", "%a %u %g", join(r, "run", "muster")]);
  assert.equal(runDir.trim(), `750 0 ${gid}`, "/run/muster: root and the node daemon's group only");
  const configGid = users("group", "muster-config")[0]!.split(":")[2];
  const { stdout: mode } = await run("stat", ["-c", "%a %g", join(r, "etc", "muster"), join(r, "etc", "muster", "tls")]);
  assert.deepEqual(mode.trim().split("\n"), [`750 ${configGid}`, `750 ${configGid}`], "/etc/muster: root and the daemons only");
  // each config readable by its own daemon's group: the cloud-init server.yaml (root:root as written) included
  for (const [c, g] of [["server.yaml", "muster"], ["provisioner.yaml", "muster-provisioner"], ["registry.yaml", "muster-registry"], ["web.yaml", "muster-web"]] as const) {
    const { stdout } = await run("stat", ["-c", "%a %g", join(r, "etc", "muster", c)]);
    assert.equal(stdout.trim(), `640 ${users("group", g)[0]!.split(":")[2]}`, c);
  }

  // An operator's edit to a conffile survives an upgrade (here: the same version again).
  writeFileSync(join(r, "etc", "muster", "server.yaml"), "collectives: [edited]\n");
  await dpkg("--force-confold", "-i", deb);
  assert.equal(users("passwd").length, 1, "reinstalling adds no second user");
  assert.equal(readFileSync(join(r, "etc", "muster", "server.yaml"), "utf8"), "collectives: [edited]\n");

  writeFileSync(join(r, "etc", "muster", "tls", "node.key"), "secret\n");
  await dpkg("--remove", "muster");
  assert.equal(existsSync(join(r, "usr", "bin", "muster")), false, "the program is gone");
  for (const c of CONFFILES) assert.ok(existsSync(join(r, c)), `remove keeps ${c}`);
  assert.ok(existsSync(join(r, "etc", "muster", "tls", "node.key")), "remove keeps credentials");

  // what the units' StateDirectory=, CacheDirectory= and LogsDirectory= make once they have run
  for (const d of ["lib/muster/server", "cache/muster/server", "cache/muster/privileged", "log/muster"]) {
    mkdirSync(join(r, "var", d), { recursive: true });
    writeFileSync(join(r, "var", d, "left"), "x");
  }
  await dpkg("--purge", "muster");
  assert.equal(existsSync(join(r, "etc", "muster")), false, "purge removes /etc/muster, credentials included");
  for (const d of ["lib", "cache", "log"]) assert.deepEqual(readdirSync(join(r, "var", d)).filter((n) => n === "muster"), [], `purge removes /var/${d}/muster`);
});

test("installs into a root without /proc, as image builders do: nothing in postinst needs it, and a systemd-tmpfiles that refuses (Debian 13's does there) stops nothing", async () => {
  const r = dpkgRoot("no-proc-root");
  for (const l of ["lib", "bin", "sbin"]) (mkdirSync(join(r, "usr", l), { recursive: true }), symlinkSync(`usr/${l}`, join(r, l)));
  // systemd 257's systemd-tmpfiles without /proc: "Failed to ... /proc", exit 1
  const bin = join(tmp.path, "no-proc-bin");
  mkdirSync(bin);
  writeFileSync(join(bin, "systemd-tmpfiles"), "#!/bin/sh\necho 'systemd-tmpfiles: /proc/ is not mounted' >&2\nexit 1\n", { mode: 0o755 });
  const PATH = `${bin}:/usr/sbin:/usr/bin:/sbin:/bin`;
  const script = 'mount -t tmpfs no-proc /proc && test -z "$(ls /proc)" && exec "$@"';
  await run("unshare", ["--mount", "--propagation", "private", "sh", "-c", script, "sh", "dpkg", `--root=${r}`, "--force-not-root", "--force-script-chrootless", "--force-depends", "--log=/dev/null", "-i", deb], { env: { ...process.env, PATH } });
  const status = await run("dpkg-query", [`--admindir=${r}/var/lib/dpkg`, "-W", "-f=${Status}", "muster"]);
  assert.equal(status.stdout, "install ok installed");
  assert.match(readFileSync(join(r, "etc", "passwd"), "utf8"), /^muster-provisioner:/m, "the users are made");
  assert.ok(existsSync(join(r, "usr", "lib", "systemd", "system", "muster-web.service")));
});

test("lab up --from-package unpacks a package and runs its muster; a missing file, a non-package and a foreign package are clear errors", async () => {
  const got = unpackMuster(deb, join(tmp.path, "lab-pkg"));
  assert.equal(got.bin, join(tmp.path, "lab-pkg", "usr", "bin", "muster"));
  assert.equal(got.version, pkg.version);

  assert.throws(() => unpackMuster(join(tmp.path, "nope.deb"), join(tmp.path, "x1")), /no file .*nope\.deb .*npm run package/);
  const cwd = join(tmp.path, "lab-cwd");
  mkdirSync(cwd);
  const cli = await runCli(["lab", "up", "--from-package", "nope.deb"], { env: cleanEnv(join(tmp.path, "lab-home")), cwd });
  assert.equal(cli.code, 64, cli.stderr);
  assert.match(cli.stderr, /--from-package: no file nope\.deb \(build one with `npm run package`/);
  assert.deepEqual(readdirSync(cwd), [], "nothing started, nothing written");
  const junk = join(tmp.path, "junk.deb");
  writeFileSync(junk, "not an archive\n");
  assert.throws(() => unpackMuster(junk, join(tmp.path, "x2")), /cannot unpack .*junk\.deb/);
  const foreign = join(tmp.path, "foreign");
  mkdirSync(join(foreign, "DEBIAN"), { recursive: true });
  mkdirSync(join(foreign, "usr", "share"), { recursive: true });
  writeFileSync(join(foreign, "DEBIAN", "control"), "Package: foreign\nVersion: 1\nArchitecture: all\nMaintainer: x <x@example.net>\nDescription: not muster\n");
  await run("dpkg-deb", ["--root-owner-group", "-Zgzip", "--build", foreign, join(tmp.path, "foreign.deb")]);
  assert.throws(() => unpackMuster(join(tmp.path, "foreign.deb"), join(tmp.path, "x3")), /holds no usr\/bin\/muster/);
});

test("unpacked: the provisioner (--once) and the registry run from the package with the shipped default configs, as their units run them", async () => {
  const nats = await startNats({ jetstream: true });
  try {
    const bin = join(root, "usr", "bin", "muster");
    const PATH = toolsPath("daemons-bin", false);
    // What the unit sets: MUSTER_CONFIG_DIR is the StateDirectory, the caller name the provisioner's.
    const state = join(tmp.path, "var-lib-muster");
    const provEnv = { ...cleanEnv(join(state, "provisioner"), { MUSTER_CALLER: "provisioner" }), PATH };
    const once = await run(bin, ["provisioner", "--config", join(root, "etc", "muster", "provisioner.yaml"), "--once", "--broker", nats.url], { env: provEnv }).catch((e: { code: number; stdout: string; stderr: string }) => e);
    assert.equal("code" in once ? once.code : 0, 0, `${once.stdout}${once.stderr}`);
    assert.ok(existsSync(join(state, "provisioner", "keys", "provisioner.pem")), "the provisioner made its signing key in its state directory");

    // The shipped registry.yaml, on a free port instead of 8089 (other tests may hold it).
    const regCfg = parseYaml(readFileSync(join(root, "etc", "muster", "registry.yaml"), "utf8")) as { http: { port: number } };
    regCfg.http.port = 0;
    const regFile = join(tmp.path, "registry.yaml");
    writeFileSync(regFile, toYaml(regCfg));
    const reg = spawnMuster(["registry", "serve", "--config", regFile, "--broker", nats.url], { env: { ...cleanEnv(join(state, "registry")), PATH }, bin });
    try {
      await reg.waitForLine(/ready/, 30_000);
    } finally {
      const stopped = await reg.stop();
      assert.deepEqual(stopped, { code: 0, signal: null }, `the registry stops cleanly on SIGTERM: ${reg.stderr()}`);
    }
  } finally {
    await nats.stop();
  }
});
