import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmodSync, chownSync, existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { repoRoot, tempDir } from "../support/collective.js";

// An upgrade from the package operators run today, 0.1.0 (commit a100ecc, built by its own
// packaging/build-deb.mjs: packaging/release-deb.mjs, cached in .muster/cache/releases), to this
// tree's, with real dpkg in a throwaway root laid out as Debian 12 and 13 are (/lib a link to
// usr/lib). 0.1.0 ran every daemon as one `muster` user; this package gives each its own. What a
// node and the other daemons left is written as 0.1.0 would have it, then the upgrade must keep
// every node's identity, keys, certificate and state where they were, and move what the
// provisioner and the registry made to their new users, without anyone reading more than before.

const run = promisify(execFile);
const tmp = tempDir("release-upgrade");
const root = join(tmp.path, "root");
const pkg = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as { version: string };
const NEXT = `${pkg.version.replace("-", "~")}+1`;
let oldDeb: string;
let newDeb: string;

const dpkg = (...args: string[]) => run("dpkg", [`--root=${root}`, "--force-not-root", "--force-script-chrootless", "--force-depends", "--log=/dev/null", ...args], { maxBuffer: 16 << 20 });
const idOf = (file: "passwd" | "group", name: string) => {
  const line = readFileSync(join(root, "etc", file), "utf8").split("\n").find((l) => l.startsWith(`${name}:`));
  assert.ok(line, `${name} in ${file}`);
  return Number(line.split(":")[2]);
};
const owner = (p: string) => {
  const st = lstatSync(join(root, p));
  return { uid: st.uid, gid: st.gid, mode: (st.mode & 0o7777).toString(8).padStart(4, "0") };
};

before(async () => {
  const { releaseDeb } = (await import(join(repoRoot, "packaging", "release-deb.mjs"))) as { releaseDeb: () => string };
  // the old one from its own commit (cached after the first time) while this tree's is built
  const built = run(process.execPath, [join(repoRoot, "packaging", "build-deb.mjs"), "--out", join(tmp.path, "out"), "--compress", "gzip", "--level", "1", "--version", NEXT], { cwd: repoRoot, maxBuffer: 16 << 20 });
  oldDeb = releaseDeb();
  newDeb = (await built).stdout.trim().split("\n").at(-1)!;
  // a merged-/usr root, as every Debian 12 and 13 system is: /lib is usr/lib
  for (const d of ["usr/lib", "usr/bin", "usr/sbin", "var/lib/dpkg/info", "var/lib/dpkg/updates", "etc"]) mkdirSync(join(root, d), { recursive: true });
  for (const l of ["lib", "bin", "sbin"]) symlinkSync(`usr/${l}`, join(root, l));
  writeFileSync(join(root, "var/lib/dpkg/status"), "");
  const users = { passwd: "root:x:0:0:root:/root:/bin/sh\n", group: "root:x:0:\n", shadow: "root:*:20000:0:99999:7:::\n", gshadow: "root:*::\n" };
  for (const [f, text] of Object.entries(users)) writeFileSync(join(root, "etc", f), text, { mode: f.endsWith("shadow") ? 0o640 : 0o644 });
});

after(() => tmp.remove());

test("0.1.0 to this package with dpkg: the node keeps its identity, keys, certificate and state; the provisioner's and registry's move to their users; nobody reads more than before", async () => {
  await dpkg("-i", oldDeb);
  assert.equal((await run("dpkg-query", [`--admindir=${root}/var/lib/dpkg`, "-W", "-f=${Version}", "muster"])).stdout, "0.1.0");
  const muster = idOf("passwd", "muster");
  const musterGid = idOf("group", "muster");
  assert.equal(existsSync(join(root, "lib/systemd/system/muster-server.service")), true, "0.1.0's units, in /lib");

  // What a node, a provisioner and a registry leave under 0.1.0 (docs/deploy.md then): files
  // with their owners and modes, and what each holds.
  const files: [string, string, number, number, number][] = [
    // path, content, uid, gid, mode
    ["etc/muster/server.yaml", "identity: node42.example.net\nprivileged_helper: /run/muster/privileged.sock\n", 0, musterGid, 0o640],
    ["etc/muster/provisioner.yaml", "# the operator's\nsleeptime: 5\n", 0, 0, 0o644],
    ["etc/muster/registry.token", "the registry's bearer token\n", 0, musterGid, 0o640],
    ["etc/muster/tls/ca.pem", "-----BEGIN CERTIFICATE-----\nthe broker's CA\n-----END CERTIFICATE-----\n", 0, 0, 0o644],
    ["etc/muster/tls/bootstrap.pem", "-----BEGIN CERTIFICATE-----\nnode42's bootstrap certificate\n-----END CERTIFICATE-----\n", 0, 0, 0o644],
    ["etc/muster/tls/bootstrap.key", "node42's bootstrap key\n", 0, musterGid, 0o640],
    ["etc/muster/tls/provisioner.pem", "the provisioner's certificate\n", 0, musterGid, 0o640],
    ["etc/muster/tls/provisioner.key", "the provisioner's broker key\n", 0, musterGid, 0o640],
    ["etc/muster/tls/registry.key", "the registry's broker key\n", 0, musterGid, 0o640],
    ["var/lib/muster/server/nodes/node42.example.net.key", "node42's signing key\n", muster, musterGid, 0o600],
    ["var/lib/muster/server/puppet-tls/key.pem", "node42's Puppet key, as the helper handed it over\n", muster, musterGid, 0o600],
    ["var/lib/muster/server/keys/muster.pem", "the server user's own key\n", muster, musterGid, 0o600],
    ["var/lib/muster/provision/deploy.lock", '{"owner":"provisioner@a","expires":9999999999999,"acquired":1,"identity":"node42.example.net"}\n', muster, musterGid, 0o600],
    ["var/lib/muster/provision/disabled", '{"since":1,"reason":"provisioned"}\n', muster, musterGid, 0o600],
    ["var/lib/muster/provisioner/keys/provisioner.pem", "the provisioner's signing key\n", muster, musterGid, 0o600],
    ["var/lib/muster/registry/client.yaml", "the registry's client config\n", muster, musterGid, 0o600],
    ["var/lib/puppet/ssl/certs/node42.example.net.pem", "node42's Puppet certificate\n", 0, 0, 0o644],
    ["var/lib/puppet/ssl/private_keys/node42.example.net.pem", "node42's Puppet key\n", 0, 0, 0o600],
    ["etc/facter/facts.d/muster_lifecycle_stage.yaml", 'lifecycle_stage: "production"\n', 0, 0, 0o644],
  ];
  for (const [f, text, uid, gid, mode] of files) {
    mkdirSync(join(root, f, ".."), { recursive: true });
    writeFileSync(join(root, f), text);
    chownSync(join(root, f), uid, gid);
    chmodSync(join(root, f), mode);
  }
  // the daemons' state directories as systemd made them for User=muster
  for (const d of ["server", "provision", "provisioner", "registry"]) (chownSync(join(root, "var/lib/muster", d), muster, musterGid), chmodSync(join(root, "var/lib/muster", d), 0o700));
  for (const d of ["server/nodes", "server/puppet-tls", "server/keys", "provisioner/keys"]) (chownSync(join(root, "var/lib/muster", d), muster, musterGid), chmodSync(join(root, "var/lib/muster", d), 0o700));
  const before = Object.fromEntries(files.map(([f]) => [f, owner(f)]));

  await dpkg("--force-confold", "-i", newDeb);
  assert.equal((await run("dpkg-query", [`--admindir=${root}/var/lib/dpkg`, "-W", "-f=${Version}", "muster"])).stdout, NEXT);

  // Every byte kept.
  for (const [f, text] of files) assert.equal(readFileSync(join(root, f), "utf8"), text, `${f} kept`);
  // The node daemon is still `muster`, with the same uid: its identity, keys, certificate and state stay its own.
  assert.equal(idOf("passwd", "muster"), muster, "the muster user keeps its uid");
  for (const f of ["etc/muster/server.yaml", "etc/muster/tls/bootstrap.key", "etc/muster/tls/bootstrap.pem", "etc/muster/tls/ca.pem", "var/lib/puppet/ssl/certs/node42.example.net.pem", "var/lib/puppet/ssl/private_keys/node42.example.net.pem", "etc/facter/facts.d/muster_lifecycle_stage.yaml"]) {
    assert.deepEqual(owner(f), before[f], `${f}: owner and mode kept`);
  }
  for (const f of files.map(([f]) => f).filter((f) => /^var\/lib\/muster\/(server|provision)\//.test(f))) assert.deepEqual(owner(f), before[f], `${f}: the node daemon's still`);
  // What the provisioner and the registry made moves to the users they run as now.
  const prov = { uid: idOf("passwd", "muster-provisioner"), gid: idOf("group", "muster-provisioner") };
  const reg = { uid: idOf("passwd", "muster-registry"), gid: idOf("group", "muster-registry") };
  assert.notEqual(prov.uid, muster);
  assert.notEqual(reg.uid, muster);
  for (const p of ["var/lib/muster/provisioner", "var/lib/muster/provisioner/keys", "var/lib/muster/provisioner/keys/provisioner.pem"]) assert.deepEqual({ uid: owner(p).uid, gid: owner(p).gid }, prov, p);
  assert.equal(owner("var/lib/muster/provisioner/keys/provisioner.pem").mode, "0600");
  for (const p of ["var/lib/muster/registry", "var/lib/muster/registry/client.yaml"]) assert.deepEqual({ uid: owner(p).uid, gid: owner(p).gid }, reg, p);
  // Their credentials in /etc/muster go to their groups, modes kept (0640: root and that daemon).
  for (const [f, gid] of [["etc/muster/tls/provisioner.key", prov.gid], ["etc/muster/tls/provisioner.pem", prov.gid], ["etc/muster/tls/registry.key", reg.gid], ["etc/muster/registry.token", reg.gid]] as const) {
    assert.deepEqual(owner(f), { uid: 0, gid, mode: "0640" }, f);
  }
  // Conffiles: each readable by its daemon's group only.
  assert.deepEqual(owner("etc/muster/provisioner.yaml"), { uid: 0, gid: prov.gid, mode: "0640" });
  assert.deepEqual(owner("etc/muster/registry.yaml"), { uid: 0, gid: reg.gid, mode: "0640" });
  assert.deepEqual(owner("etc/muster/web.yaml"), { uid: 0, gid: idOf("group", "muster-web"), mode: "0640" });
  // /etc/muster: all the daemons may enter (muster-config), nobody else, as only muster's group could before.
  const config = idOf("group", "muster-config");
  for (const d of ["etc/muster", "etc/muster/tls"]) assert.deepEqual(owner(d), { uid: 0, gid: config, mode: "0750" }, d);
  const members = readFileSync(join(root, "etc/group"), "utf8").split("\n").find((l) => l.startsWith("muster-config:"))!.split(":")[3]!.split(",").sort();
  assert.deepEqual(members, ["muster", "muster-provisioner", "muster-registry", "muster-web"]);
  // No file became readable by others that was not.
  for (const [f] of files) if (!(Number.parseInt(before[f]!.mode, 8) & 0o004)) assert.equal(Number.parseInt(owner(f).mode, 8) & 0o004, 0, `${f} is not world-readable`);
  // The units moved from /lib to /usr/lib within the package: on a merged-/usr system one file, and dpkg kept it.
  for (const u of ["muster-server.service", "muster-privileged.socket", "muster-privileged.service", "muster-provisioner.service", "muster-registry.service", "muster-web.service"]) {
    assert.ok(statSync(join(root, "usr/lib/systemd/system", u)).isFile(), `${u} survived the move to /usr/lib`);
  }
  assert.match(readFileSync(join(root, "usr/lib/systemd/system/muster-provisioner.service"), "utf8"), /^User=muster-provisioner$/m);
  assert.deepEqual(readdirSync(join(root, "var/lib/muster")).sort(), ["provision", "provisioner", "registry", "server"]);

  // Reinstalling (or a second configure) changes nothing further.
  const again = Object.fromEntries(files.map(([f]) => [f, owner(f)]));
  await dpkg("--force-confold", "-i", newDeb);
  assert.deepEqual(Object.fromEntries(files.map(([f]) => [f, owner(f)])), again, "idempotent");
});
