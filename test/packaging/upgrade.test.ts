import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmodSync, copyFileSync, cpSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { repoRoot, tempDir } from "../support/collective.js";

// The apt repository `npm run package` writes, used as a node uses it: versions N and N+1 built by
// packaging/build-deb.mjs (--version), published with packaging/apt-repo.mjs (signed by a key made
// once), N installed by apt-get into a throwaway root (dpkg chrootless, as deb.test.ts), the
// operator's config and the node's identity, keys, certificate and provisioning state written,
// then `apt-get upgrade` to N+1 and `apt-get install muster=N` back. A repository signed by
// another key is refused. The maintainer scripts' restart on upgrade runs in a mount namespace of
// its own, with systemd's commands recorded: one restart of each unit per upgrade, none on install.

const run = promisify(execFile);
const tmp = tempDir("upgrade");
const pkg = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as { version: string };
const N = pkg.version.replace("-", "~");
const N1 = `${N}+1`;
const build = join(repoRoot, "packaging", "build-deb.mjs");
const repo = join(tmp.path, "repo");
const gnupg = join(tmp.path, "gnupg");
const root = join(tmp.path, "root");
const debs: Record<string, string> = {};

async function buildDeb(version: string): Promise<string> {
  const r = await run(process.execPath, [build, "--out", join(tmp.path, `out-${version}`), "--compress", "gzip", "--level", "1", "--version", version], { cwd: repoRoot, maxBuffer: 16 << 20 });
  return r.stdout.trim().split("\n").at(-1)!;
}

async function publish(deb: string, home = gnupg, dir = repo): Promise<void> {
  await run(process.execPath, [join(repoRoot, "packaging", "apt-repo.mjs"), "--repo", dir, "--gnupg-home", home, deb], { cwd: repoRoot });
}

/** apt-get on the throwaway root: its own state, sources and keyring; dpkg chrootless into it. */
function apt(...args: string[]) {
  const o = [
    `Dir=${root}`,
    `Dir::State::status=${root}/var/lib/dpkg/status`,
    "Dir::Etc::Trusted=/dev/null",
    `Dir::Etc::TrustedParts=${root}/etc/apt/trusted.gpg.d`,
    "APT::Sandbox::User=root",
    "Debug::NoLocking=1",
    "Acquire::Languages=none",
    "DPkg::Options::=--force-not-root",
    "DPkg::Options::=--force-script-chrootless",
    "DPkg::Options::=--log=/dev/null",
    `DPkg::Options::=--root=${root}`,
    `DPkg::Options::=--admindir=${root}/var/lib/dpkg`,
    "DPkg::Options::=--force-confdef",
    "DPkg::Options::=--force-confold",
  ].flatMap((x) => ["-o", x]);
  return run("apt-get", [...o, "-y", ...args], { env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" }, maxBuffer: 16 << 20 });
}

const installedVersion = async () => (await run("dpkg-query", [`--admindir=${root}/var/lib/dpkg`, "-W", "-f=${Version}", "muster"])).stdout;
const musterVersion = async () => (await run(join(root, "usr", "bin", "muster"), ["--version"])).stdout.trim();

before(async () => {
  // Both versions at once: two builds share the machine's two cores.
  [debs[N], debs[N1]] = await Promise.all([buildDeb(N), buildDeb(N1)]);
  // A root apt and dpkg can work in: the package's dependencies stand in as installed (their files
  // are the machine's; the chrootless scripts run the machine's systemd-sysusers and -tmpfiles).
  for (const d of ["var/lib/dpkg/info", "var/lib/dpkg/updates", "etc/apt/sources.list.d", "etc/apt/keyrings", "etc/apt/trusted.gpg.d", "etc/apt/apt.conf.d", "etc/apt/preferences.d", "var/cache/apt/archives/partial", "var/lib/apt/lists/partial", "var/log/apt"]) mkdirSync(join(root, d), { recursive: true });
  let status = "";
  for (const p of ["libc6", "libstdc++6", "libgcc-s1", "systemd", "init-system-helpers", "openssl"]) {
    const { stdout } = await run("dpkg-query", ["-W", "-f=${Version} ${Architecture}\t${Provides}", p]);
    const [versionArch, provides] = stdout.split("\t");
    const [version, arch] = versionArch!.split(" ");
    // what it provides too: systemd is the machine's systemd-sysusers
    status += `Package: ${p}\nStatus: install ok installed\nPriority: optional\nVersion: ${version}\nArchitecture: ${arch}\n${provides ? `Provides: ${provides}\n` : ""}Maintainer: the machine <root@localhost>\nDescription: the machine's own ${p}\n\n`;
    writeFileSync(join(root, "var/lib/dpkg/info", `${p}.list`), "");
  }
  writeFileSync(join(root, "var/lib/dpkg/status"), status);
  const users = { passwd: "root:x:0:0:root:/root:/bin/sh\n", group: "root:x:0:\n", shadow: "root:*:20000:0:99999:7:::\n", gshadow: "root:*::\n" };
  for (const [f, text] of Object.entries(users)) writeFileSync(join(root, "etc", f), text, { mode: f.endsWith("shadow") ? 0o640 : 0o644 });
});

after(async () => {
  await run("gpgconf", ["--homedir", gnupg, "--kill", "all"]).catch(() => undefined);
  await run("gpgconf", ["--homedir", join(tmp.path, "stranger-gnupg"), "--kill", "all"]).catch(() => undefined);
  tmp.remove();
});

test("the repository: signed Release (InRelease, Release.gpg) over the Packages index, the keyring a node needs, the key made once", async () => {
  await publish(debs[N]!);
  for (const f of ["dists/stable/InRelease", "dists/stable/Release", "dists/stable/Release.gpg", "dists/stable/main/binary-amd64/Packages.gz", "muster-archive-keyring.gpg", "muster-archive-keyring.asc", "muster.list"]) {
    assert.ok(existsSync(join(repo, f.replace("amd64", (await run("dpkg", ["--print-architecture"])).stdout.trim()))), f);
  }
  // gpgv checks the signature with nothing but the keyring a node gets
  await run("gpgv", ["--keyring", join(repo, "muster-archive-keyring.gpg"), join(repo, "dists/stable/Release.gpg"), join(repo, "dists/stable/Release")]);
  await run("gpgv", ["--keyring", join(repo, "muster-archive-keyring.gpg"), join(repo, "dists/stable/InRelease")]);
  const packages = readFileSync(join(repo, "dists/stable/main", readFileSync(join(repo, "dists/stable/Release"), "utf8").match(/main\/(binary-[a-z0-9]+)\/Packages\n/)![1]!, "Packages"), "utf8");
  assert.match(packages, /^Package: muster$/m);
  assert.ok(packages.split("\n").includes(`Version: ${N}`), packages);
  const fpr = readFileSync(join(repo, "muster-archive-keyring.gpg"));
  await publish(debs[N]!);
  assert.deepEqual(readFileSync(join(repo, "muster-archive-keyring.gpg")), fpr, "the second run signs with the same key");
  assert.match(readFileSync(join(repo, "muster.list"), "utf8"), /^deb \[signed-by=\/etc\/apt\/keyrings\/muster-archive-keyring\.gpg\] \S+ stable main$/m);
});

test("apt-get installs N from the repository with one sources line and one keyring; a repository signed by another key is refused", async () => {
  copyFileSync(join(repo, "muster-archive-keyring.gpg"), join(root, "etc/apt/keyrings/muster-archive-keyring.gpg"));
  const line = `deb [signed-by=${root}/etc/apt/keyrings/muster-archive-keyring.gpg] file:${repo} stable main\n`;
  writeFileSync(join(root, "etc/apt/sources.list"), line);
  await apt("update");
  await apt("install", "muster");
  assert.equal(await installedVersion(), N);
  assert.equal(await musterVersion(), pkg.version);

  // The same package, signed by a key the node was not given.
  const stranger = join(tmp.path, "stranger-repo");
  await publish(debs[N]!, join(tmp.path, "stranger-gnupg"), stranger);
  writeFileSync(join(root, "etc/apt/sources.list"), line.replace(repo, stranger));
  const refused = await apt("update").then(
    (r) => r,
    (e: { stdout: string; stderr: string }) => e,
  );
  assert.match(`${refused.stdout}${refused.stderr}`, /NO_PUBKEY|not signed|signatures couldn't be verified|is not signed/);
  writeFileSync(join(root, "etc/apt/sources.list"), line);
  await apt("update");
});

test("apt-get upgrade to N+1 keeps the operator's configs and the node's identity, keys, certificate and provisioning state; installing N again rolls back", async () => {
  assert.equal(await installedVersion(), N, "the previous test installed N");
  const files: Record<string, string> = {
    "etc/muster/server.yaml": "# the operator's\ncollectives: [muster]\nprivileged_helper: /run/muster/privileged.sock\nidentity: node42.example.net\n",
    "etc/muster/tls/ca.pem": "the broker's CA\n",
    "etc/muster/tls/bootstrap.pem": "node42's bootstrap certificate\n",
    "etc/muster/tls/bootstrap.key": "node42's bootstrap key\n",
    "var/lib/muster/server/nodes/node42.example.net.key": "node42's signing key\n",
    "var/lib/muster/server/puppet-tls/key.pem": "node42's Puppet key, as the helper handed it over\n",
    "var/lib/muster/provision/deploy.lock": '{"owner":"provisioner@a","expires":9999999999999,"acquired":1,"identity":"node42.example.net"}\n',
    "var/lib/puppet/ssl/certs/node42.example.net.pem": "node42's Puppet certificate\n",
    "var/lib/puppet/ssl/private_keys/node42.example.net.pem": "node42's Puppet key\n",
    "etc/facter/facts.d/muster_lifecycle_stage.yaml": 'lifecycle_stage: "production"\n',
  };
  for (const [f, text] of Object.entries(files)) {
    mkdirSync(join(root, f, ".."), { recursive: true });
    writeFileSync(join(root, f), text);
  }
  chmodSync(join(root, "etc/muster/tls/bootstrap.key"), 0o640);
  const gid = (await run("stat", ["-c", "%g", join(root, "etc/muster")])).stdout.trim();

  await publish(debs[N1]!);
  await apt("update");
  const up = await apt("upgrade");
  assert.match(up.stdout, /1 upgraded, 0 newly installed, 0 to remove/);
  assert.equal(await installedVersion(), N1);
  assert.equal(await musterVersion(), N1.replace("~", "-"), "the new launcher and app run");
  for (const [f, text] of Object.entries(files)) assert.equal(readFileSync(join(root, f), "utf8"), text, `${f} kept`);
  assert.equal((await run("stat", ["-c", "%a", join(root, "etc/muster/tls/bootstrap.key")])).stdout.trim(), "640", "the key's mode kept");
  assert.equal((await run("stat", ["-c", "%g", join(root, "etc/muster")])).stdout.trim(), gid, "the muster group is the same one");
  assert.equal(readFileSync(join(root, "etc/passwd"), "utf8").split("\n").filter((l) => l.startsWith("muster:")).length, 1, "no second muster user");

  // Rollback: the older version is still in the pool.
  await apt("install", "--allow-downgrades", `muster=${N}`);
  assert.equal(await installedVersion(), N);
  assert.equal(await musterVersion(), pkg.version);
  for (const [f, text] of Object.entries(files)) assert.equal(readFileSync(join(root, f), "utf8"), text, `${f} kept by the rollback`);
});

test("maintainer scripts on a running machine: an upgrade restarts each unit once (try-restart, not blocking), prerm stops nothing; a fresh install restarts nothing", async () => {
  const ctl = join(tmp.path, "control-n1");
  await run("dpkg-deb", ["--control", debs[N1]!, ctl]);
  // systemd's commands, recorded instead of run; /run/systemd/system exists only in this namespace.
  const stubs = join(tmp.path, "stubs");
  mkdirSync(stubs);
  const log = join(tmp.path, "systemd-calls");
  for (const c of ["systemctl", "deb-systemd-invoke", "deb-systemd-helper", "systemd-sysusers", "systemd-tmpfiles"]) {
    writeFileSync(join(stubs, c), `#!/bin/sh\necho "${c} $*" >> "${log}"\n`, { mode: 0o755 });
  }
  // policy-rc.d (invoke-rc.d's and deb-systemd-invoke's gate): this machine's may say 101, so a
  // stub says what POLICY says (0 unless set), as an image builder's or a chroot's would
  writeFileSync(join(stubs, "policy-rc.d"), `#!/bin/sh\necho "policy-rc.d $*" >> "${log}"\nexit "\${POLICY:-0}"\n`, { mode: 0o755 });
  // The scripts also set who reads what in /etc/muster and /var/lib/muster: here, in copies of
  // /etc (with the users sysusers would make) and an empty /var/lib, never this machine's.
  const etc = join(tmp.path, "etc-copy");
  cpSync("/etc", etc, { recursive: true, verbatimSymlinks: true });
  const groups = readFileSync(join(etc, "group"), "utf8").split("\n").filter((l) => l && !/^muster(-\w+)?:/.test(l));
  writeFileSync(join(etc, "group"), [...groups, "muster-config:x:990:muster,muster-provisioner,muster-registry,muster-web", "muster:x:991:", "muster-provisioner:x:992:", "muster-registry:x:993:", "muster-web:x:994:", ""].join("\n"));
  const varLib = join(tmp.path, "var-lib");
  mkdirSync(varLib);
  let policy: number | undefined;
  const asDpkg = async (script: string, ...args: string[]) => {
    writeFileSync(log, "");
    const env: NodeJS.ProcessEnv = { PATH: `${stubs}:/usr/bin:/bin:/usr/sbin:/sbin`, ...(policy !== undefined ? { POLICY: String(policy) } : {}) };
    await run("unshare", ["--mount", "--propagation", "private", "sh", "-c", 'mount -t tmpfs muster-test /run && mkdir -p /run/systemd/system && mount --bind "$1" /etc && mount --bind "$2" /var/lib && shift 2 && exec sh "$@"', "sh", etc, varLib, join(ctl, script), ...args], { env });
    return readFileSync(log, "utf8").trim().split("\n").filter(Boolean);
  };
  // An upgrade from N, as dpkg runs it: the old prerm (here N+1's, the same script), then postinst.
  assert.deepEqual(await asDpkg("prerm", "upgrade", N1), [], "prerm stops nothing on an upgrade");
  const upgrade = await asDpkg("postinst", "configure", N);
  const units = ["muster-privileged.service", "muster-server.service", "muster-provisioner.service", "muster-registry.service", "muster-web.service"];
  // each unit asked of policy-rc.d, then restarted without waiting (a Puppet run may be the upgrade)
  assert.deepEqual(upgrade, ["systemd-sysusers muster.conf", "systemd-tmpfiles --create muster.conf", "systemctl --system daemon-reload", ...units.flatMap((u) => [`policy-rc.d ${u} try-restart`, `systemctl --no-block try-restart ${u}`])]);
  // policy-rc.d saying 101 (not now: a chroot, an image build): asked, nothing restarted
  policy = 101;
  const forbidden = await asDpkg("postinst", "configure", N);
  policy = undefined;
  assert.deepEqual(forbidden.filter((l) => /restart/.test(l)), units.map((u) => `policy-rc.d ${u} try-restart`));
  assert.equal((await run("stat", ["-c", "%a %g", join(etc, "muster")])).stdout.trim(), "750 990", "/etc/muster: root and the daemons' group");
  const fresh = await asDpkg("postinst", "configure");
  assert.ok(!fresh.some((l) => /restart/.test(l)), `a fresh install restarts nothing: ${fresh.join("; ")}`);
  const remove = await asDpkg("prerm", "remove");
  assert.ok(remove.some((l) => /^deb-systemd-invoke stop .*muster-server\.service/.test(l)), remove.join("; "));
});
