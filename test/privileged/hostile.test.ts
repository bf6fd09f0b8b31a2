import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, type ChildProcess } from "node:child_process";
import { chmodSync, chownSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { cliPath, spawnMuster } from "../support/collective.js";
import { DAEMON_UID, GROUP, refusedWith, startTreeRig, type Answer, type TreeRig } from "./rig.js";
import { TREE_NODE } from "./tree.js";

// The privileged helper attacked by a compromised muster daemon: the built `muster privileged
// serve` runs as real root in a Debian system of its own (rig.ts, tree.ts: the lab's machine
// image under an overlay, in its own mount, PID and network namespaces, chrooted), with Debian's
// Puppet at Debian's paths, a dpkg database and a local apt repository, reading a root-owned
// /etc/muster/server.yaml that allows what docs/deploy.md section 4 allows (package, service) plus
// files under /srv/files; every request below comes from a process running as the uid the helper
// serves (setpriv), speaking the helper's own protocol, as code execution in muster-server would.
// Each case is an attack that worked before (issue 27's review, issue 35's) or one an attacker
// would try next; each must be refused with a message naming what, and leave no trace: no command
// run, no file outside the allowed directory, no package moved, no master changed, the helper
// still serving. Every refusal of a file has a write beside it, in the same tree, that lands: the
// tree is one where writes can happen, so a refusal is the rule's doing.

const run = promisify(execFile);
let rig: TreeRig;
const res = (type: string, name: string, properties: [string, string][]) => ({ op: "puppet.resource", args: { type, name, properties } });

/** The tree's apt repository: each package at 1.0 and 2.0. */
const PACKAGES = ["qheld", "qdown", "qup", "qgone"].flatMap((name) => ["1.0", "2.0"].map((version) => ({ name, version })));

before(async () => {
  rig = await startTreeRig("hostile", { extraArgs: ["--read-timeout", "2"], packages: PACKAGES });
  // as an operator left them: qheld held at 2.0, qdown at 2.0, qup at 1.0, qgone not installed
  await rig.root(["apt-get", "install", "-y", "-q", "qheld=2.0", "qdown=2.0", "qup=1.0"]);
  await rig.root(["apt-mark", "hold", "qheld"]);
});

after(async () => {
  const stopped = await rig?.stop();
  assert.deepEqual(stopped, { code: 0, signal: null }, "the helper outlived every attack and stops cleanly");
});

/** A file the attacker's payloads would create if anything ran them (as root). */
const marker = () => rig.path("attacker", "pwned");
const nothingRan = () => assert.equal(existsSync(rig.host("attacker", "pwned")), false, "a payload ran");
/** Nothing landed in /victim, where every attack below points. */
const victimUntouched = () => assert.deepEqual(readdirSync(rig.tree.host("/victim")), [], "nothing was written through a link to /victim");

/** The control beside a refusal: in the same tree, under the same config, a plain write lands (so the refusal was the rule's). */
async function aWriteLands(dir = rig.path("files")): Promise<void> {
  const name = join(dir, `control-${Date.now()}`);
  const a = await rig.ask(res("file", name, [["content", "a write that is allowed"], ["ensure", "file"]]));
  assert.equal(a.ok, true, `the control write was refused: ${JSON.stringify(a)}`);
  assert.equal(readFileSync(rig.tree.host(name), "utf8"), "a write that is allowed");
  assert.equal(statSync(rig.tree.host(name)).uid, 0);
  rmSync(rig.tree.host(name));
}

/** Sends each request on its own connection, all at once, from one attacker process. */
async function many(requests: unknown[]): Promise<Answer[]> {
  const script = `import { connect } from "node:net";
const [sock, file] = process.argv.slice(2);
const requests = JSON.parse((await import("node:fs")).readFileSync(file, "utf8"));
const answers = await Promise.all(requests.map((r) => new Promise((res) => {
  const s = connect(sock);
  let out = "";
  s.on("connect", () => s.write((typeof r === "string" ? r : JSON.stringify(r)) + "\\n"));
  s.on("data", (d) => (out += d));
  s.on("error", (e) => res({ connectError: e.code }));
  s.on("close", () => { try { res(JSON.parse(out)); } catch { res({ garbled: out }); } });
})));
process.stdout.write(JSON.stringify(answers));
`;
  const file = rig.path("attacker", `requests-${Date.now()}.json`);
  writeFileSync(rig.tree.host(file), JSON.stringify(requests), { mode: 0o644 });
  const child = rig.attacker(script, [rig.sock, file]);
  return JSON.parse(await output(child)) as Answer[];
}

/** A child's whole stdout once it exits (it must exit 0). */
function output(child: ChildProcess): Promise<string> {
  let out = "";
  let err = "";
  child.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
  return new Promise((resolve, reject) => child.once("close", (code) => (code === 0 ? resolve(out) : reject(new Error(`attacker exited ${code}: ${err}`)))));
}

/** Resolves when the child has written a line matching `re` on stderr. */
function saidOnStderr(child: ChildProcess, re: RegExp, timeoutMs = 20_000): Promise<void> {
  return new Promise((resolve, reject) => {
    let err = "";
    const t = setTimeout(() => reject(new Error(`no ${re} from the attacker: ${err}`)), timeoutMs);
    child.stderr!.on("data", (d: Buffer) => {
      err += d.toString();
      if (re.test(err)) (clearTimeout(t), resolve());
    });
  });
}

test("a compromised daemon cannot run a command: anything off the list is refused and nothing runs", async () => {
  const marker = rig.path("attacker", "pwned");
  for (const req of [
    { op: "exec", args: { cmd: `touch ${marker}` } },
    { op: "shell", args: { command: `touch ${marker}` } },
    { op: "puppet.run", args: { agent: "puppet", puppet_bin: "/usr/bin/touch", confdir: marker } },
    { op: "puppet.daemonize", args: { agent: "puppet", extraArgs: ["--exec", `touch ${marker}`] } },
    `touch ${marker}`,
  ]) {
    refusedWith(await rig.ask(req), /not on the helper's list|Unrecognized key|not a JSON request/);
  }
  nothingRan();
});

test("a compromised daemon cannot send Puppet to another master: no --server, and none once the node holds its certificate", async () => {
  refusedWith(await rig.ask({ op: "puppet.run", args: { agent: "puppet", server: "evil.example.net:8140" } }), /other than the configured one.*allow_server_override/);
  refusedWith(await rig.ask({ op: "puppet.run", args: { agent: "provision", server: "evil.example.net" } }), /other than the configured one/);
  refusedWith(await rig.ask({ op: "puppet.run", args: { agent: "puppet", environment: "production --server=evil" } }), /environment/);
  // While provisioning (no certificate yet) the provisioner's choice is written, by root.
  const ok = await rig.ask({ op: "puppet.set_server", args: { host: "127.0.0.11", port: 8140 } });
  assert.equal(ok.ok, true, JSON.stringify(ok));
  const conf = rig.tree.host("/etc/puppet/puppet.conf");
  assert.match(readFileSync(conf, "utf8"), /^server = 127\.0\.0\.11$/m);
  assert.equal(statSync(conf).uid, 0, "root wrote puppet.conf");
  // and made the state the unprivileged daemon reads readable (Puppet applies these modes itself)
  assert.match(readFileSync(conf, "utf8"), /^classfile = \$statedir\/classes\.txt \{ mode = 0644 \}$/m);
  assert.match(readFileSync(conf, "utf8"), /^statedir = \$vardir\/state \{ mode = 0755 \}$/m);
  // Once the node holds its certificate, its master is the one it trusts.
  const ssl = rig.tree.host("/var/lib/puppet/ssl");
  mkdirSync(join(ssl, "certs"), { recursive: true });
  mkdirSync(join(ssl, "private_keys"), { recursive: true });
  writeFileSync(join(ssl, "certs", `${rig.certname}.pem`), "cert\n");
  writeFileSync(join(ssl, "private_keys", `${rig.certname}.pem`), "key\n", { mode: 0o600 });
  refusedWith(await rig.ask({ op: "puppet.set_server", args: { host: "127.0.0.66", port: 8140 } }), /holds its Puppet certificate .* its master is 127\.0\.0\.11:8140; pointing it at 127\.0\.0\.66:8140/);
  assert.match(readFileSync(conf, "utf8"), /^server = 127\.0\.0\.11$/m, "puppet.conf unchanged");
  const again = await rig.ask({ op: "puppet.set_server", args: { host: "127.0.0.11", port: 8140 } });
  assert.equal(again.ok, true, `the same master again is fine (a retried step): ${JSON.stringify(again)}`);
  // The node's Puppet key goes to the daemon only where the node connects with it.
  refusedWith(await rig.ask({ op: "puppet.tls_credential", args: {} }), /tls\.use_puppet_cert is not set/);
  rmSync(join(ssl, "certs"), { recursive: true });
  rmSync(join(ssl, "private_keys"), { recursive: true });
});

test("service: provider=base with start= (the review's root shell) and every other property that names a command are refused; nothing runs", async () => {
  const payload = `/bin/sh -c 'touch ${marker()}'`;
  refusedWith(await rig.ask(res("service", "muster-hostile", [["provider", "base"], ["status", "/bin/false"], ["start", payload]])), /service muster-hostile: property provider is not allowed; service takes only ensure, enable/);
  for (const p of ["start", "stop", "status", "restart", "binary", "path", "control", "hasstatus", "hasrestart", "pattern", "flags", "manifest", "provider"]) {
    refusedWith(await rig.ask(res("service", "muster-hostile", [["ensure", "running"], [p, payload]])), new RegExp(`property ${p} is not allowed`));
  }
  refusedWith(await rig.ask(res("service", "muster-hostile", [["ensure", payload]])), /ensure=.* is not allowed; ensure must be one of running, stopped, true, false/);
  refusedWith(await rig.ask(res("service", "/etc/systemd/system/x.service", [["ensure", "running"]])), /named by its unit name/);
  nothingRan();
});

test("package: provider=gem with command=, install_options, provider=dpkg with source= an attacker's .deb, and a .deb as the title are refused; nothing installs", async () => {
  const program = rig.path("attacker", "evil.sh");
  writeFileSync(rig.tree.host(program), `#!/bin/sh\ntouch ${marker()}\n`, { mode: 0o755 });
  // a real package whose postinst would leave the marker: what the review installed this way
  const pkg = join(tmpdir(), `muster-evil-${process.pid}`);
  mkdirSync(join(pkg, "DEBIAN"), { recursive: true });
  writeFileSync(join(pkg, "DEBIAN", "control"), "Package: muster-hostile\nVersion: 1\nArchitecture: all\nMaintainer: attacker <a@example.net>\nDescription: would run its postinst as root\n");
  writeFileSync(join(pkg, "DEBIAN", "postinst"), `#!/bin/sh\ntouch ${marker()}\n`, { mode: 0o755 });
  const deb = rig.path("attacker", "evil.deb");
  const built = join(tmpdir(), `muster-evil-${process.pid}.deb`);
  await run("dpkg-deb", ["--root-owner-group", "-Zgzip", "--build", pkg, built]); // dpkg-deb does not write through /proc/<pid>/root
  writeFileSync(rig.tree.host(deb), readFileSync(built));
  rmSync(built);
  rmSync(pkg, { recursive: true });
  chownSync(rig.tree.host(deb), DAEMON_UID, GROUP);
  refusedWith(await rig.ask(res("package", "rake", [["command", program], ["provider", "gem"]])), /property command is not allowed; package takes only ensure/);
  refusedWith(await rig.ask(res("package", "rake", [["ensure", "present"], ["provider", "gem"]])), /property provider is not allowed/);
  refusedWith(await rig.ask(res("package", "rake", [["ensure", "present"], ["install_options", `--gemfile=${rig.path("attacker", "Gemfile")}`]])), /property install_options is not allowed/);
  refusedWith(await rig.ask(res("package", "muster-hostile", [["ensure", "present"], ["provider", "dpkg"], ["source", deb]])), /property provider is not allowed/);
  refusedWith(await rig.ask(res("package", "muster-hostile", [["ensure", "present"], ["source", deb]])), /property source is not allowed/);
  for (const name of [deb, "./attacker/evil.deb", "evil.deb", "muster-hostile=1", "muster-hostile/stable"]) {
    refusedWith(await rig.ask(res("package", name, [["ensure", "present"]])), /named by its Debian package name/);
  }
  refusedWith(await rig.ask(res("package", "htop", [["ensure", "--reinstall"]])), /ensure=.* is not allowed; ensure must be one of present, installed, absent, purged, latest or a version/);
  nothingRan();
  const installed = await rig.root(["dpkg-query", "-W", "muster-hostile"]).then(
    () => true,
    () => false,
  );
  assert.equal(installed, false, "the attacker's package is not installed");
});

test("file: ensure=<a path> (a link out), mode=4755, a 0777 directory, owner and every property that reaches elsewhere are refused; nothing is made", async () => {
  const f = (n: string) => rig.path("files", n);
  refusedWith(await rig.ask(res("file", f("link"), [["ensure", "/etc/shadow"]])), /ensure="\/etc\/shadow" is not allowed; ensure must be one of file, directory, absent/);
  refusedWith(await rig.ask(res("file", f("link"), [["ensure", "link"], ["target", "/etc"]])), /ensure="link" is not allowed/);
  refusedWith(await rig.ask(res("file", f("suid"), [["content", "#!/bin/sh\nid\n".replace(/\n/g, " ")], ["ensure", "file"], ["mode", "4755"]])), /mode="4755" is not allowed; mode must be a mode without setuid, setgid or sticky bit/);
  refusedWith(await rig.ask(res("file", f("sgid"), [["ensure", "file"], ["mode", "2755"]])), /without setuid, setgid or sticky/);
  refusedWith(await rig.ask(res("file", f("open"), [["ensure", "directory"], ["mode", "0777"]])), /mode="0777" is not allowed; mode must be a mode that others cannot write/);
  refusedWith(await rig.ask(res("file", f("sym"), [["ensure", "file"], ["mode", "u+s"]])), /an octal mode/);
  refusedWith(await rig.ask(res("file", f("mine"), [["ensure", "directory"], ["owner", String(DAEMON_UID)]])), /owner="65534" is not allowed; owner must be one of plugins\.resource\.file_owners \(none\)/);
  for (const p of ["source", "target", "path", "recurse", "force", "links", "backup", "validate_cmd", "replace", "checksum", "purge"]) {
    refusedWith(await rig.ask(res("file", f("x"), [["ensure", "file"], [p, p === "validate_cmd" ? `touch ${marker()} %` : "/etc/shadow"]])), new RegExp(`property ${p} is not allowed`));
  }
  refusedWith(await rig.ask(res("file", "/etc/shadow", [])), /outside the directories this node allows/);
  refusedWith(await rig.ask(res("file", `${rig.path("files")}/../outside/x`, [["ensure", "file"]])), /not a plain absolute path/);
  assert.deepEqual(readdirSync(rig.host("files")), [], "nothing was made");
  nothingRan();
  // and in the same directory, a plain file with a safe mode is written, by root
  const ok = await rig.ask(res("file", f("plain"), [["content", "a plain file"], ["ensure", "file"], ["mode", "0640"]]));
  assert.equal(ok.ok, true, JSON.stringify(ok));
  assert.equal(readFileSync(rig.host("files", "plain"), "utf8"), "a plain file");
  assert.equal(statSync(rig.host("files", "plain")).uid, 0);
  rmSync(rig.host("files", "plain"));
});

test("file without file_paths is refused for any path; a file_paths directory another user can write, or that is not root's, is refused naming it", async () => {
  try {
    const plugins = rig.baseConfig.plugins as Record<string, Record<string, unknown>>;
    const { file_paths: _f, ...unfenced } = plugins.resource!;
    rig.writeConfig({ ...rig.baseConfig, plugins: { ...plugins, resource: unfenced } });
    refusedWith(await rig.ask(res("file", rig.path("files", "a"), [["ensure", "file"]])), /file_paths is not set, so no file may be managed/);
    refusedWith(await rig.ask(res("file", "/etc/cron.d/pwned", [["ensure", "file"]])), /file_paths is not set/);

    for (const [dir, prepare, why] of [
      ["open", (d: string) => chmodSync(d, 0o777), /open is writable by others \(mode 0777\)/],
      ["groupy", (d: string) => (chownSync(d, 0, GROUP), chmodSync(d, 0o775)), /groupy is writable by its group \(mode 0775\)/],
      ["theirs", (d: string) => chownSync(d, DAEMON_UID, GROUP), /theirs belongs to uid 65534, not root/],
    ] as const) {
      const d = rig.path(dir);
      mkdirSync(rig.tree.host(d), { recursive: true });
      prepare(rig.tree.host(d));
      rig.writeConfig({ ...rig.baseConfig, plugins: { ...plugins, resource: { ...plugins.resource, file_paths: [d] } } });
      const a = await rig.ask(res("file", join(d, "x"), [["ensure", "file"], ["content", "x"]]));
      refusedWith(a, why);
      assert.match(a.error!, /each plugins\.resource\.file_paths directory, and everything in it, must be root's alone/);
      assert.equal(existsSync(rig.tree.host(join(d, "x"))), false);
    }
    // a directory of root's beside them, 0755: the same write lands
    const mine = rig.path("mine");
    mkdirSync(rig.tree.host(mine), { mode: 0o755 });
    rig.writeConfig({ ...rig.baseConfig, plugins: { ...plugins, resource: { ...plugins.resource, file_paths: [mine] } } });
    await aWriteLands(mine);
  } finally {
    rig.writeConfig(rig.baseConfig);
  }
});

const SWAPPER = `import { mkdirSync, renameSync, rmSync, symlinkSync } from "node:fs";
// Swaps DIR between a real directory and a symbolic link to TARGET, as fast as it can, until stdin closes.
const [dir, target] = process.argv.slice(2);
let swaps = 0, refused = 0, told = false;
try { mkdirSync(dir); } catch {}
process.stdin.on("end", () => { process.stdout.write(JSON.stringify({ swaps, refused })); process.exit(0); });
process.stdin.resume();
for (;;) {
  try {
    renameSync(dir, dir + ".real");
    symlinkSync(target, dir);
    rmSync(dir);
    renameSync(dir + ".real", dir);
    swaps++;
  } catch (e) {
    refused++;
  }
  if (!told) { told = true; process.stderr.write("swapping\\n"); }
  await new Promise((r) => setImmediate(r));
}
`;

test("the symlink-swap race in a loop: in a directory the attacker can write, every write below it is refused while it swaps, and none lands outside", async () => {
  const shared = rig.path("files", "shared");
  mkdirSync(rig.tree.host(shared));
  chownSync(rig.tree.host(shared), DAEMON_UID, GROUP); // a directory the attacker came to own
  const swapper = rig.attacker(SWAPPER, [join(shared, "d"), rig.path("outside")]);
  const done = output(swapper);
  await saidOnStderr(swapper, /swapping/);
  const answers = await many(Array.from({ length: 24 }, (_, i) => res("file", join(shared, "d", `x${i}`), [["content", "owned"], ["ensure", "file"]])));
  swapper.stdin!.end();
  const { swaps } = JSON.parse(await done) as { swaps: number; refused: number };
  assert.ok(swaps > 0, "the attacker really swapped");
  for (const a of answers) refusedWith(a, /shared belongs to uid 65534, not root/);
  assert.deepEqual(readdirSync(rig.host("outside")), [], "nothing was written outside");
  rmSync(rig.tree.host(shared), { recursive: true, force: true });
  await aWriteLands();
});

test("the symlink-swap race in a loop against root's directory: the attacker's swaps all fail, the writes land inside, one Puppet at a time, nothing outside", async () => {
  const d = rig.path("files", "d");
  mkdirSync(rig.tree.host(d));
  // root's own puppet, with a record of when each one ran and what for: one Puppet process at a time
  const log = rig.path("puppet-runs.log");
  const wrapper = rig.path("puppet-wrapper");
  writeFileSync(rig.tree.host(wrapper), `#!/bin/sh\necho "start $$ $1" >> ${log}\npuppet "$@"\nrc=$?\necho "end $$ $1" >> ${log}\nexit $rc\n`, { mode: 0o755 });
  const plugins = rig.baseConfig.plugins as Record<string, Record<string, unknown>>;
  rig.writeConfig({ ...rig.baseConfig, plugins: { ...plugins, resource: { ...plugins.resource, puppet_bin: wrapper } } });
  try {
    const swapper = rig.attacker(SWAPPER, [d, rig.path("outside")]);
    const done = output(swapper);
    await saidOnStderr(swapper, /swapping/);
    const answers = await many([1, 2, 3].map((i) => res("file", join(d, `x${i}`), [["content", `written ${i}`], ["ensure", "file"]])));
    swapper.stdin!.end();
    const tally = JSON.parse(await done) as { swaps: number; refused: number };
    assert.equal(tally.swaps, 0, "the attacker cannot rename root's directory");
    assert.ok(tally.refused > 0);
    for (const [i, a] of answers.entries()) {
      assert.equal(a.ok, true, JSON.stringify(a));
      assert.equal(readFileSync(rig.tree.host(join(d, `x${i + 1}`)), "utf8"), `written ${i + 1}`);
      assert.equal(statSync(rig.tree.host(join(d, `x${i + 1}`))).uid, 0);
    }
    assert.ok(lstatSync(rig.tree.host(d)).isDirectory() && !lstatSync(rig.tree.host(d)).isSymbolicLink());
    assert.deepEqual(readdirSync(rig.host("outside")), [], "nothing was written outside");
    // the three came at once; Puppet ran them one after another (with, in the same turn, whatever
    // `puppet config print` the helper needed to learn where Puppet loads code from)
    const text = readFileSync(rig.tree.host(log), "utf8");
    const events = text.trim().split("\n").map((l) => l.split(" "));
    assert.ok(events.every((e, i) => e[0] === (i % 2 ? "end" : "start") && (i % 2 === 0 || events[i - 1]![1] === e[1])), text);
    assert.equal(events.filter((e) => e[0] === "start" && e[2] === "resource").length, 3, text);
  } finally {
    rig.writeConfig(rig.baseConfig);
  }
});

const LINKER = `import { rmSync, symlinkSync } from "node:fs";
// Makes DIR a symbolic link to TARGET and takes it away again, as fast as it can, until stdin closes.
const [dir, target] = process.argv.slice(2);
let made = 0, told = false;
process.stdin.on("end", () => { process.stdout.write(JSON.stringify({ made })); process.exit(0); });
process.stdin.resume();
for (;;) {
  try { symlinkSync(target, dir); made++; } catch {}
  if (!told) { told = true; process.stderr.write("linking\\n"); }
  await new Promise((r) => setImmediate(r));
  try { rmSync(dir); } catch {}
  await new Promise((r) => setImmediate(r));
}
`;

test("a file_paths directory that does not exist, in a sticky world-writable directory: the attacker takes its name as a link out, in a loop; every write is refused and none lands outside", async () => {
  // as /tmp or /dev/shm: root's, 1777; the operator named a directory there that is not made yet
  const sticky = rig.path("sticky");
  mkdirSync(rig.tree.host(sticky));
  chmodSync(rig.tree.host(sticky), 0o1777);
  const missing = join(sticky, "files");
  const plugins = rig.baseConfig.plugins as Record<string, Record<string, unknown>>;
  rig.writeConfig({ ...rig.baseConfig, plugins: { ...plugins, resource: { ...plugins.resource, file_paths: [missing] } } });
  try {
    const linker = rig.attacker(LINKER, [missing, rig.path("outside")]);
    const done = output(linker);
    await saidOnStderr(linker, /linking/);
    const answers = await many(Array.from({ length: 12 }, (_, i) => res("file", join(missing, `x${i}`), [["content", "owned"], ["ensure", "file"]])));
    linker.stdin!.end();
    const { made } = JSON.parse(await done) as { made: number };
    assert.ok(made > 0, "the attacker really made the link");
    for (const a of answers) refusedWith(a, /sticky is writable by others \(mode 1777\)/);
    assert.deepEqual(readdirSync(rig.host("outside")), [], "nothing was written outside");
    rig.writeConfig(rig.baseConfig);
    await aWriteLands();
  } finally {
    rig.writeConfig(rig.baseConfig);
    rmSync(rig.tree.host(sticky), { recursive: true, force: true });
  }
});

test("set_server after certification: without a port, or with another port or master, is refused and puppet.conf keeps serverport and server_list", async () => {
  const conf = rig.tree.host("/etc/puppet/puppet.conf");
  const before = readFileSync(conf, "utf8");
  writeFileSync(conf, "[main]\nserver = 127.0.0.11\nserverport = 8141\n\n[agent]\nserver_list = 127.0.0.11:8141,127.0.0.12:8141\n");
  const ssl = rig.tree.host("/var/lib/puppet/ssl");
  mkdirSync(join(ssl, "certs"), { recursive: true });
  mkdirSync(join(ssl, "private_keys"), { recursive: true });
  writeFileSync(join(ssl, "certs", `${rig.certname}.pem`), "cert\n");
  writeFileSync(join(ssl, "private_keys", `${rig.certname}.pem`), "key\n", { mode: 0o600 });
  try {
    refusedWith(await rig.ask({ op: "puppet.set_server", args: { host: "127.0.0.11" } }), /its master is 127\.0\.0\.11:8141; pointing it at 127\.0\.0\.11:8140 would take root/);
    refusedWith(await rig.ask({ op: "puppet.set_server", args: { host: "127.0.0.11", port: 8140 } }), /pointing it at 127\.0\.0\.11:8140/);
    refusedWith(await rig.ask({ op: "puppet.set_server", args: { host: "127.0.0.66", port: 8141 } }), /pointing it at 127\.0\.0\.66:8141/);
    const same = await rig.ask({ op: "puppet.set_server", args: { host: "127.0.0.11", port: 8141 } });
    assert.equal(same.ok, true, `the configured master again is a retried step: ${JSON.stringify(same)}`);
    const text = readFileSync(conf, "utf8");
    assert.match(text, /^server = 127\.0\.0\.11$/m);
    assert.match(text, /^serverport = 8141$/m);
    assert.match(text, /^server_list = 127\.0\.0\.11:8141,127\.0\.0\.12:8141$/m);
  } finally {
    writeFileSync(conf, before);
    rmSync(join(ssl, "certs"), { recursive: true, force: true });
    rmSync(join(ssl, "private_keys"), { recursive: true, force: true });
  }
});

test("100 connections at once: each gets an answer (done, or busy past the limit), and the helper goes on serving", async () => {
  const answers = await many(Array.from({ length: 100 }, () => ({ op: "puppet.enable", args: { agent: "puppet" } })));
  const tally: Record<string, number> = {};
  for (const a of answers) tally[a.ok ? "ok" : (a.code ?? JSON.stringify(a))] = (tally[a.ok ? "ok" : (a.code ?? JSON.stringify(a))] ?? 0) + 1;
  assert.deepEqual(Object.keys(tally).sort(), Object.keys(tally).length === 1 ? ["ok"] : ["MUSTER_PRIVILEGED_BUSY", "ok"], JSON.stringify(tally));
  assert.ok(tally.ok! >= 1 && tally.ok! + (tally.MUSTER_PRIVILEGED_BUSY ?? 0) === 100, JSON.stringify(tally));
  assert.deepEqual(await rig.ask({ op: "puppet.enable", args: { agent: "puppet" } }), { ok: true, result: { changed: false } });
  // The cap itself: 16 connections that say nothing hold every slot; the next 100 are told busy at
  // once (no process spent on them), the 16 are cut off at the read timeout, and service resumes.
  const held = rig.attacker(
    `import { connect } from "node:net";
const sock = process.argv[2];
const open = (send) => new Promise((res) => {
  const s = connect(sock);
  let out = "";
  s.on("connect", () => { if (send) s.write(JSON.stringify({ op: "puppet.enable", args: { agent: "puppet" } }) + "\\n"); });
  s.on("data", (d) => (out += d));
  s.on("error", (e) => res({ connectError: e.code }));
  s.on("close", () => { try { res(JSON.parse(out)); } catch { res({ garbled: out }); } });
});
// connected first, so accepted first: the listen queue is in order
const silent = Array.from({ length: 16 }, () => open(false));
const flood = await Promise.all(Array.from({ length: 100 }, () => open(true)));
const cut = await Promise.all(silent);
process.stdout.write(JSON.stringify({ flood: flood.map((a) => a.code ?? (a.ok ? "ok" : JSON.stringify(a))), cut: cut.map((a) => a.error ?? JSON.stringify(a)) }));
`,
    [rig.sock],
  );
  const { flood, cut } = JSON.parse(await output(held)) as { flood: string[]; cut: string[] };
  assert.deepEqual([...new Set(flood)], ["MUSTER_PRIVILEGED_BUSY"], JSON.stringify(flood));
  assert.equal(cut.length, 16);
  for (const why of cut) assert.match(why, /no complete request line within 2 s/);
  assert.deepEqual(await rig.ask({ op: "puppet.enable", args: { agent: "puppet" } }), { ok: true, result: { changed: false } });
});

test("a 10 MB request is refused at 64 KiB; a request that never ends is cut off at the read timeout and the connection closed", async () => {
  const huge = rig.attacker(
    `import { connect } from "node:net";
const s = connect(process.argv[2]);
let out = "";
s.on("connect", () => s.write(Buffer.alloc(10 * 1024 * 1024, 0x41)));
s.on("data", (d) => { out += d; if (out.includes("\\n")) { process.stdout.write(out); process.exit(0); } });
s.on("error", (e) => { process.stdout.write(JSON.stringify({ connectError: e.code })); process.exit(0); });
`,
    [rig.sock],
  );
  refusedWith(JSON.parse(await output(huge)) as Answer, /request over 65536 bytes/);

  const endless = rig.attacker(
    `import { connect } from "node:net";
const s = connect(process.argv[2]);
let out = "";
s.on("connect", () => { s.write('{"op":"puppet.enable","args":{"agent":"puppet"'); setInterval(() => s.write(" "), 100); });
s.on("data", (d) => (out += d));
s.on("error", () => undefined);
s.on("close", () => { process.stdout.write(JSON.stringify({ reply: out })); process.exit(0); });
`,
    [rig.sock],
  );
  // it keeps sending, yet the helper answers once its 2 s are up and hangs up on it
  const { reply } = JSON.parse(await output(endless)) as { reply: string };
  refusedWith(JSON.parse(reply) as Answer, /no complete request line within 2 s/);
});

test("newlines, NULs, unicode look-alikes and option-like prefixes in titles and values: refused, or only ever text", async () => {
  const lines: [unknown, RegExp][] = [
    [res("file", `${rig.path("files")}/a\nb`, [["ensure", "file"]]), /name: a resource title/],
    [res("file", `${rig.path("files")}/a\u0000b`, [["ensure", "file"]]), /name: a resource title/],
    [res("file", rig.path("files", "a"), [["content", "a\nb"]]), /one-line value/],
    [res("file", rig.path("files", "a"), [["content", "a\u0000b"]]), /one-line value/],
    [res("f\u0456le", rig.path("files", "a"), [["ensure", "file"]]), /type: a resource type/], // Cyrillic і
    [res("file", rig.path("files", "a"), [["\u0435nsure", "file"]]), /property name/], // Cyrillic е
    [res("service", "nginx", [["ensure", "runn\u0456ng"]]), /ensure=.* is not allowed/],
    [res("service", "nginx\u200b", [["ensure", "running"]]), /named by its unit name/],
    [res("package", "htop\uff1d1.0", [["ensure", "present"]]), /named by its Debian package name/],
    [res("file", "--debug", [["ensure", "file"]]), /name: a resource title/],
    [res("file", "-x", []), /name: a resource title/],
    [res("service", "nginx", [["--start", "x"]]), /property name/],
    [{ op: "puppet.disable", args: { agent: "puppet", message: "\u001b]0;owned\u0007" } }, /message: one line/],
    [{ op: "puppet.set_server", args: { host: "127.0.0.1\u2024" } }, /host: a host name/],
    [{ op: "puppet.set_server", args: { host: "--server=evil.example.net" } }, /host: a host name/],
    [{ op: "puppet.run", args: { agent: "puppet", tags: ["--server=evil"] } }, /a Puppet tag/],
    [{ op: "puppet.run", args: { agent: "puppet", environment: "production --confdir /tmp" } }, /environment/],
  ];
  for (const [req, re] of lines) refusedWith(await rig.ask(req), re);
  // a look-alike slash is part of a file name, and an option-like value is content: both only text
  const name = rig.path("files", "..\u2215..\u2215outside\u2215x");
  const a = await rig.ask(res("file", name, [["content", "--debug --confdir=/tmp/evil"], ["ensure", "file"]]));
  assert.equal(a.ok, true, JSON.stringify(a));
  assert.equal(readFileSync(rig.tree.host(name), "utf8"), "--debug --confdir=/tmp/evil");
  assert.deepEqual(readdirSync(rig.host("outside")), []);
  rmSync(rig.tree.host(name));
});

test("the envelope as an attacker bends it: duplicate keys, prototype keys, a BOM, read-only operations with paths; root's config is not the daemon's to change", async () => {
  for (const [line, re] of [
    ['{"op":"puppet.enable","op":"exec","args":{}}', /"exec" is not on the helper's list/],
    ['{"op":"puppet.enable","args":{"agent":"puppet","__proto__":{"agent":"root"}}}', /Unrecognized key/],
    ['{"op":"puppet.enable","args":{"agent":"puppet","constructor":{}}}', /Unrecognized key/],
    ['{"op":"__proto__","args":{}}', /not on the helper's list/],
    ['\ufeff{"op":"puppet.enable","args":{"agent":"puppet"}}', /not a JSON request/],
    ['{"op":"puppet.read_state","args":{"agent":"puppet","file":"../../../etc/shadow"}}', /file/],
    ['{"op":"puppet.facts","args":{"command":"/bin/sh"}}', /Unrecognized key/],
    ['{"op":"puppet.tls_credential","args":{}}', /tls\.use_puppet_cert is not set/],
  ] as const) {
    refusedWith(await rig.ask(line), re);
  }
  const write = await rig.tree.run(["sh", "-c", "echo 'plugins: {resource: {allowed_types: [exec]}}' >> /etc/muster/server.yaml"], { uid: DAEMON_UID, gid: GROUP, groups: [GROUP] }).then(
    () => "written",
    (e: Error) => e.message,
  );
  assert.match(write, /Permission denied/);
});

test("every request is in the helper's log with its arguments, a file's content by size and digest only", async () => {
  const secret = "s3cret-token-for-the-log-test";
  refusedWith(await rig.ask(res("file", rig.path("files", "logged"), [["content", secret], ["ensure", "file"], ["mode", "4755"]])), /mode/);
  // the answer can reach the asker before the helper's log line reaches its stderr pipe: wait for the line
  await logged(/^(?=.*"op":"puppet\.resource")(?=.*logged)(?=.*"msg":"refused")/, 30_000).catch(() => undefined); // not there: the assertion below says so
  const log = rig.helper.stderr();
  const line = log.split("\n").find((l) => l.includes('"op":"puppet.resource"') && l.includes("logged") && l.includes('"msg":"refused"'));
  assert.ok(line, `no log line for the request: ${log.slice(-2000)}`);
  assert.match(line, /"properties":\[\["content","<29 bytes, sha256 [0-9a-f]{16}>"\],\["ensure","file"\],\["mode","4755"\]\]/);
  assert.match(line, /"peer":\d+/);
  assert.equal(log.includes(secret), false, "the content itself is never logged");
});

// ---- Issue 35: the escapes a second review found with the helper as real root in such a tree ----

/** Resolves once the helper has logged a line matching `re` (its log is JSON lines on stderr). */
function logged(re: RegExp, timeoutMs = 60_000): Promise<void> {
  return new Promise((resolve, reject) => {
    const check = () => {
      if (!rig.helper.stderr().split("\n").some((l) => re.test(l))) return false;
      clearTimeout(t);
      rig.helper.child.stderr!.off("data", check);
      resolve();
      return true;
    };
    const t = setTimeout(() => {
      rig.helper.child.stderr!.off("data", check);
      reject(new Error(`the helper did not log ${re}: ${rig.helper.stderr().slice(-2000)}`));
    }, timeoutMs);
    rig.helper.child.stderr!.on("data", check);
    check();
  });
}

const TURN_FIFO = "/run/muster-turn.fifo";
/**
 * Root's Puppet with one difference: a `puppet resource` whose title holds `hold-the-turn` waits
 * for a line on a FIFO before it starts, so a test can hold the helper's one Puppet turn (as a long
 * run would) while other requests queue behind it.
 */
async function withTurnHolder<T>(extra: Record<string, unknown>, fn: (hold: () => Promise<{ answer: Promise<Answer>; release(): Promise<void> }>) => Promise<T>): Promise<T> {
  const wrapper = rig.path("puppet-turn");
  writeFileSync(rig.tree.host(wrapper), `#!/bin/sh\ncase "$*" in *hold-the-turn*) read _line < ${TURN_FIFO} ;; esac\nexec puppet "$@"\n`, { mode: 0o755 });
  await rig.root(["sh", "-c", `rm -f ${TURN_FIFO} && mkfifo -m 600 ${TURN_FIFO}`]);
  const plugins = rig.baseConfig.plugins as Record<string, Record<string, unknown>>;
  rig.writeConfig({ ...rig.baseConfig, plugins: { ...plugins, resource: { ...plugins.resource, puppet_bin: wrapper, ...extra } } });
  const hold = async () => {
    const { open } = await import("node:fs/promises");
    // opening the FIFO for writing returns once the held Puppet opens it to read: it holds the turn
    const opened = open(rig.tree.host(TURN_FIFO), "w");
    const answer = rig.ask(res("file", rig.path("files", `hold-the-turn-${Date.now()}`), [["content", "held"], ["ensure", "file"]]));
    const fh = await Promise.race([opened, answer.then((a) => Promise.reject(new Error(`the turn holder was answered before it held the turn: ${JSON.stringify(a)}`)))]);
    return {
      answer,
      async release() {
        await fh.write("go\n");
        await fh.close();
      },
    };
  };
  try {
    return await fn(hold);
  } finally {
    rig.writeConfig(rig.baseConfig);
  }
}

/** The attacker's one move: replace DIR with a symbolic link to TARGET; prints whether it could. */
const SWAP_ONCE = `import { renameSync, symlinkSync } from "node:fs";
const [dir, target] = process.argv.slice(2);
try { renameSync(dir, dir + ".real"); symlinkSync(target, dir); process.stdout.write("swapped"); }
catch (e) { process.stdout.write(e.code); }
`;

test("issue 35, the walk in the queue: a directory made group-writable for the daemon while a write waits is refused (mode), and the waiting write lands inside", async () => {
  // The review's three requests: one holds the turn; the second makes g1 0770 for the daemon's
  // group; the third waits to write g1/sub/pwn. When the second was answered, the daemon swapped
  // g1/sub for a link to /victim, and Puppet wrote /victim/pwn as root.
  for (const d of ["g1", "g1/sub"]) mkdirSync(rig.host("files", d), { mode: 0o755 });
  await withTurnHolder({ file_groups: ["nogroup"] }, async (hold) => {
    const turn = await hold();
    // in this order: the helper handles one request's checks at a time, so a request's line in its
    // log means every request before it has been checked and is waiting, or refused
    const open = rig.ask(res("file", rig.path("files", "g1"), [["ensure", "directory"], ["mode", "0770"], ["group", "nogroup"]]));
    await logged(/"name":"\/srv\/files\/g1".*"msg":"request"/);
    const pwn = rig.ask(res("file", rig.path("files", "g1", "sub", "pwn"), [["content", "owned"], ["ensure", "file"]]));
    await logged(/g1\/sub\/pwn.*"msg":"request"/);
    await turn.release();
    refusedWith(await open, /file \/srv\/files\/g1: mode="0770" is not allowed on a directory/);
    const swap = await output(rig.attacker(SWAP_ONCE, [rig.path("files", "g1", "sub"), "/victim"]));
    assert.equal(swap, "EACCES", "the daemon cannot touch what is in g1");
    const written = await pwn;
    assert.equal(written.ok, true, JSON.stringify(written));
    assert.equal((await turn.answer).ok, true);
  });
  assert.equal(readFileSync(rig.host("files", "g1", "sub", "pwn"), "utf8"), "owned", "the write landed where it was asked");
  assert.equal((lstatSync(rig.host("files", "g1")).mode & 0o777).toString(8), "755");
  victimUntouched();
});

test("issue 35, the walk in the queue: a tree that became writable by the daemon after a write arrived is refused in its turn; one left alone in the same queue lands", async () => {
  for (const d of ["g2", "g2/sub", "g3", "g3/sub"]) mkdirSync(rig.host("files", d), { mode: 0o755 });
  await withTurnHolder({}, async (hold) => {
    const turn = await hold();
    const pwn = rig.ask(res("file", rig.path("files", "g2", "sub", "pwn"), [["content", "owned"], ["ensure", "file"]]));
    await logged(/g2\/sub\/pwn.*"msg":"request"/);
    const control = rig.ask(res("file", rig.path("files", "g3", "sub", "ok"), [["content", "fine"], ["ensure", "file"]]));
    // the control's line: the helper has finished the write's checks on arrival (one request at a time)
    await logged(/g3\/sub\/ok.*"msg":"request"/);
    // Both passed the walk on arrival and wait. Now g2 becomes the daemon group's to write (as an
    // earlier request of the old helper made it, or root by mistake), and the daemon swaps g2/sub.
    chownSync(rig.host("files", "g2"), 0, GROUP);
    chmodSync(rig.host("files", "g2"), 0o770);
    assert.equal(await output(rig.attacker(SWAP_ONCE, [rig.path("files", "g2", "sub"), "/victim"])), "swapped");
    await turn.release();
    refusedWith(await pwn, /file \/srv\/files\/g2\/sub\/pwn: \/srv\/files\/g2 is writable by its group \(mode 0770\)/);
    const ok = await control;
    assert.equal(ok.ok, true, JSON.stringify(ok));
  });
  assert.equal(readFileSync(rig.host("files", "g3", "sub", "ok"), "utf8"), "fine");
  victimUntouched();
});

test("issue 35, packages: no pin down, none for a package not installed, no change at all to a held one, no removal of an Essential or Protected one; a pin up lands", async () => {
  const version = async (name: string) => (await rig.root(["dpkg-query", "-W", "-f=${Version} ${db:Status-Want}", name])).trim();
  // held at 2.0 by the operator: Puppet's apt provider would unhold it and install 1.0 --force-yes
  for (const ensure of ["1.0", "2.0", "latest", "absent", "purged"]) refusedWith(await rig.ask(res("package", "qheld", [["ensure", ensure]])), /package qheld: ensure=.* is not allowed; qheld is held/);
  assert.equal(await version("qheld"), "2.0 hold");
  refusedWith(await rig.ask(res("package", "qdown", [["ensure", "1.0"]])), /package qdown: ensure="1\.0" is not allowed; qdown 2\.0 is installed, and a version pin never goes down/);
  assert.equal(await version("qdown"), "2.0 install");
  // removing it first and pinning the old one is the same downgrade in two steps
  refusedWith(await rig.ask(res("package", "qgone", [["ensure", "1.0"]])), /package qgone: ensure="1\.0" is not allowed; qgone is not installed, and a version pin only moves an installed package up/);
  refusedWith(await rig.ask(res("package", "dpkg", [["ensure", "absent"]])), /package dpkg: ensure="absent" is not allowed; dpkg is Essential/);
  refusedWith(await rig.ask(res("package", "libgcc-s1", [["ensure", "purged"]])), /package libgcc-s1: ensure="purged" is not allowed; libgcc-s1 is Protected/);
  assert.match(await version("dpkg"), / install$/);
  assert.match(await version("libgcc-s1"), / install$/);
  // Puppet and apt really act in this tree: a pin up is done
  const up = await rig.ask(res("package", "qup", [["ensure", "2.0"]]));
  assert.equal(up.ok, true, JSON.stringify(up));
  assert.deepEqual((up.result as { errors: string[] }).errors, [], JSON.stringify(up.result));
  assert.equal(await version("qup"), "2.0 install");
  nothingRan();
});

test("issue 35, code root runs: file_paths on Facter's facts.d, on Puppet's factpath as puppet.conf sets it, or holding /etc are refused; the same fact written to /srv/files lands, and Puppet's facts run nothing of the daemon's", async () => {
  const conf = rig.tree.host("/etc/puppet/puppet.conf");
  const before = readFileSync(conf, "utf8");
  mkdirSync(rig.host("rootfacts"), { mode: 0o755 });
  // Puppet's own setting, not muster's: the helper asks Puppet where its factpath is
  writeFileSync(conf, `${before}\n[main]\nfactpath = ${rig.path("rootfacts")}\n`);
  const plugins = rig.baseConfig.plugins as Record<string, Record<string, unknown>>;
  rig.writeConfig({ ...rig.baseConfig, facts: { facter: true }, plugins: { ...plugins, resource: { ...plugins.resource, file_paths: ["/etc/facter/facts.d", rig.path("rootfacts"), "/etc", rig.path("files")] } } });
  try {
    // an executable external fact, and a 0644 Ruby fact: either runs as root when Puppet gathers facts
    const external = [["content", "id > /victim/from-facts-d"], ["ensure", "file"], ["mode", "0755"]] as [string, string][];
    const ruby = [["content", 'Facter.add(:pwned) { setcode { File.write("/victim/from-factpath", Process.uid.to_s) } }'], ["ensure", "file"], ["mode", "0644"]] as [string, string][];
    refusedWith(await rig.ask(res("file", "/etc/facter/facts.d/pwn", external)), /file \/etc\/facter\/facts\.d\/pwn: .*\/etc\/facter\/facts\.d is under \/etc\/facter, where root runs or loads code from \(Facter's external facts/);
    refusedWith(await rig.ask(res("file", rig.path("rootfacts", "pwn.rb"), ruby)), /plugins\.resource\.file_paths directory \/srv\/rootfacts is \/srv\/rootfacts, where root runs or loads code from \(Puppet's factpath\)/);
    refusedWith(await rig.ask(res("file", "/etc/cron.d/pwn", [["content", "* * * * * root id > /victim/cron"], ["ensure", "file"]])), /directory \/etc holds \/etc\//);
    // the same two files where root loads nothing: written
    for (const [n, props] of [["pwn", external], ["pwn.rb", ruby]] as const) {
      const a = await rig.ask(res("file", rig.path("files", n), props));
      assert.equal(a.ok, true, JSON.stringify(a));
      assert.equal(statSync(rig.host("files", n)).uid, 0);
    }
    const facts = await rig.ask({ op: "puppet.facts", args: {} });
    assert.equal(facts.ok, true, JSON.stringify(facts).slice(0, 2000));
    assert.equal(existsSync(rig.tree.host("/etc/facter/facts.d/pwn")), false);
    assert.equal(existsSync(rig.host("rootfacts", "pwn.rb")), false);
    victimUntouched();
  } finally {
    writeFileSync(conf, before);
    rig.writeConfig(rig.baseConfig);
    for (const n of ["pwn", "pwn.rb"]) rmSync(rig.host("files", n), { force: true });
  }
});

test("issue 35, set_server: a node whose puppet.conf names another certname, certified under it, keeps its master; uncertified, the provisioner's choice is written", async () => {
  const conf = rig.tree.host("/etc/puppet/puppet.conf");
  const before = readFileSync(conf, "utf8");
  const ssl = rig.tree.host("/var/lib/puppet/ssl");
  writeFileSync(conf, "[main]\ncertname = q2node.example.test\nserver = 127.0.0.11\n");
  try {
    // muster's certname is the identity; Puppet's own, in puppet.conf, is another: not certified yet
    const ok = await rig.ask({ op: "puppet.set_server", args: { host: "127.0.0.12", port: 8140 } });
    assert.equal(ok.ok, true, JSON.stringify(ok));
    assert.match(readFileSync(conf, "utf8"), /^server = 127\.0\.0\.12$/m);
    mkdirSync(join(ssl, "certs"), { recursive: true });
    mkdirSync(join(ssl, "private_keys"), { recursive: true });
    writeFileSync(join(ssl, "certs", "q2node.example.test.pem"), "cert\n");
    writeFileSync(join(ssl, "private_keys", "q2node.example.test.pem"), "key\n", { mode: 0o600 });
    refusedWith(
      await rig.ask({ op: "puppet.set_server", args: { host: "10.66.66.66", port: 8140 } }),
      /holds its Puppet certificate \(\/var\/lib\/puppet\/ssl\/certs\/q2node\.example\.test\.pem\) and its master is 127\.0\.0\.12:8140; pointing it at 10\.66\.66\.66:8140/,
    );
    assert.match(readFileSync(conf, "utf8"), /^server = 127\.0\.0\.12$/m, "puppet.conf unchanged");
  } finally {
    writeFileSync(conf, before);
    rmSync(join(ssl, "certs"), { recursive: true, force: true });
    rmSync(join(ssl, "private_keys"), { recursive: true, force: true });
  }
});

test("issue 35, content Puppet would fetch from its filebucket ({sha256}<sum>, any {word} prefix) is refused, so a root-only file's old contents stay there; braces that are not a sum are text", async () => {
  // root's file, whose contents Puppet backed up once (as it does when it replaces a file)
  const secret = "root-only contents of a file Puppet replaced once";
  writeFileSync(rig.tree.host("/root/secret"), secret, { mode: 0o600 });
  await rig.root(["puppet", "filebucket", "backup", "--local", "/root/secret"]);
  const { createHash } = await import("node:crypto");
  const sum = (algo: string) => createHash(algo).update(secret).digest("hex");
  for (const content of [`{sha256}${sum("sha256")}`, `{md5}${sum("md5")}`, `{sha1}${sum("sha1")}`, `{sha256lite}${sum("sha256")}`, `{mtime}2024-01-01`, `{x}y`]) {
    refusedWith(await rig.ask(res("file", rig.path("files", "copied"), [["content", content], ["ensure", "file"]])), /file \/srv\/files\/copied: content \(as given\) is not allowed; content must be text that does not start with \{word\}/);
  }
  assert.equal(existsSync(rig.host("files", "copied")), false);
  for (const content of ["{not a sum", "{} empty", "{\"json\": true}"]) {
    const a = await rig.ask(res("file", rig.path("files", "braces"), [["content", content], ["ensure", "file"]]));
    assert.equal(a.ok, true, JSON.stringify(a));
    assert.equal(readFileSync(rig.host("files", "braces"), "utf8"), content);
  }
  rmSync(rig.host("files", "braces"));
});

test("issue 35, `privileged serve --socket` in a directory the daemon can write: its chown and chmod come late (strace holds them a second), the daemon puts a link to root's file in the socket's place, and root's file keeps its owner and mode", async () => {
  const dir = rig.path("sockets");
  mkdirSync(rig.tree.host(dir), { mode: 0o755 });
  chownSync(rig.tree.host(dir), DAEMON_UID, GROUP);
  writeFileSync(rig.tree.host("/root/shadow-like"), "root's alone\n", { mode: 0o600 });
  const sock = join(dir, "privileged.sock");
  // the daemon waits for the socket and replaces it with a link to root's file
  const linker = rig.attacker(
    `import { renameSync, symlinkSync } from "node:fs";
const [sock, target] = process.argv.slice(2);
process.stderr.write("waiting\\n");
for (let i = 0; i < 5e7; i++) {
  try { renameSync(sock, sock + ".moved"); symlinkSync(target, sock); process.stdout.write("swapped"); process.exit(0); } catch {}
}
process.stdout.write("never");
`,
    [sock, "/root/shadow-like"],
  );
  const swapped = output(linker);
  await saidOnStderr(linker, /waiting/);
  const [bin, args] = rig.tree.command([TREE_NODE, cliPath, "privileged", "serve", "--config", "/etc/muster/server.yaml", "--socket", sock, "--client-user", String(DAEMON_UID)]);
  const delay = "chown,fchown,fchownat,lchown,chmod,fchmod,fchmodat";
  const helper = spawnMuster(["-f", "-qq", "-o", "/dev/null", "-e", `trace=${delay}`, "-e", `inject=${delay}:delay_enter=1000000`, bin, ...args], { env: rig.tree.env(), bin: "strace" });
  try {
    assert.equal(await swapped, "swapped", "the daemon put its link in the socket's place");
    await Promise.race([helper.waitForLine(/muster privileged helper ready/, 60_000).catch(() => undefined), helper.exited]);
  } finally {
    const inner = rig.tree.innerPid(helper.child);
    if (inner) process.kill(inner, "SIGTERM");
    await helper.stop();
  }
  const st = statSync(rig.tree.host("/root/shadow-like"));
  assert.deepEqual({ uid: st.uid, gid: st.gid, mode: (st.mode & 0o7777).toString(8) }, { uid: 0, gid: 0, mode: "600" }, `root's file was changed through the link: ${helper.stderr().slice(-1000)}`);
});
