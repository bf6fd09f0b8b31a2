import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, type ChildProcess } from "node:child_process";
import { chmodSync, chownSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { DAEMON_UID, GROUP, refusedWith, startRig, type Answer, type Rig } from "./rig.js";

// The privileged helper attacked by a compromised muster daemon: the built `muster privileged
// serve` runs as root on a real socket, reading a root-owned server config that allows what
// docs/deploy.md section 4 allows (package, service) plus files under one directory; every request
// below comes from a process running as the uid the helper serves (setpriv), speaking the
// helper's own protocol, as code execution in muster-server would. Each case is an attack that
// worked before the resource rule (issue 27's review) or one an attacker would try next; each
// must be refused with a message naming what, and leave no trace: no command run, no file
// outside the allowed directory, no master changed, the helper still serving.

const run = promisify(execFile);
let rig: Rig;
const res = (type: string, name: string, properties: [string, string][]) => ({ op: "puppet.resource", args: { type, name, properties } });

before(async () => {
  rig = await startRig("hostile", { extraArgs: ["--read-timeout", "2"] });
});

after(async () => {
  // had the rule failed, the attacker's package would be installed on this machine: never leave it
  await run("dpkg", ["--purge", "muster-hostile"]).catch(() => undefined);
  const stopped = await rig?.stop();
  assert.deepEqual(stopped, { code: 0, signal: null }, "the helper outlived every attack and stops cleanly");
});

/** A file the attacker's payloads would create if anything ran them (as root). */
const marker = () => rig.path("attacker", "pwned");
const nothingRan = () => assert.equal(existsSync(marker()), false, "a payload ran");

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
  writeFileSync(file, JSON.stringify(requests), { mode: 0o644 });
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
  assert.equal(existsSync(marker), false, "nothing ran");
});

test("a compromised daemon cannot send Puppet to another master: no --server, and none once the node holds its certificate", async () => {
  refusedWith(await rig.ask({ op: "puppet.run", args: { agent: "puppet", server: "evil.example.net:8140" } }), /other than the configured one.*allow_server_override/);
  refusedWith(await rig.ask({ op: "puppet.run", args: { agent: "provision", server: "evil.example.net" } }), /other than the configured one/);
  refusedWith(await rig.ask({ op: "puppet.run", args: { agent: "puppet", environment: "production --server=evil" } }), /environment/);
  // While provisioning (no certificate yet) the provisioner's choice is written, by root.
  const ok = await rig.ask({ op: "puppet.set_server", args: { host: "127.0.0.11", port: 8140 } });
  assert.equal(ok.ok, true, JSON.stringify(ok));
  const conf = join(rig.path("puppet/etc"), "puppet.conf");
  assert.match(readFileSync(conf, "utf8"), /^server = 127\.0\.0\.11$/m);
  assert.equal(statSync(conf).uid, 0, "root wrote puppet.conf");
  // and made the state the unprivileged daemon reads readable (Puppet applies these modes itself)
  assert.match(readFileSync(conf, "utf8"), /^classfile = \$statedir\/classes\.txt \{ mode = 0644 \}$/m);
  assert.match(readFileSync(conf, "utf8"), /^statedir = \$vardir\/state \{ mode = 0755 \}$/m);
  // Once the node holds its certificate, its master is the one it trusts.
  mkdirSync(rig.path("puppet/ssl/certs"), { recursive: true });
  mkdirSync(rig.path("puppet/ssl/private_keys"), { recursive: true });
  writeFileSync(rig.path("puppet/ssl/certs", `${rig.certname}.pem`), "cert\n");
  writeFileSync(rig.path("puppet/ssl/private_keys", `${rig.certname}.pem`), "key\n", { mode: 0o600 });
  refusedWith(await rig.ask({ op: "puppet.set_server", args: { host: "127.0.0.66", port: 8140 } }), /holds its Puppet certificate .* its master is 127\.0\.0\.11:8140; pointing it at 127\.0\.0\.66:8140/);
  assert.match(readFileSync(conf, "utf8"), /^server = 127\.0\.0\.11$/m, "puppet.conf unchanged");
  const again = await rig.ask({ op: "puppet.set_server", args: { host: "127.0.0.11", port: 8140 } });
  assert.equal(again.ok, true, `the same master again is fine (a retried step): ${JSON.stringify(again)}`);
  // The node's Puppet key goes to the daemon only where the node connects with it.
  refusedWith(await rig.ask({ op: "puppet.tls_credential", args: {} }), /tls\.use_puppet_cert is not set/);
  rmSync(rig.path("puppet/ssl/certs"), { recursive: true });
  rmSync(rig.path("puppet/ssl/private_keys"), { recursive: true });
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
  writeFileSync(program, `#!/bin/sh\ntouch ${marker()}\n`, { mode: 0o755 });
  // a real package whose postinst would leave the marker: what the review installed this way
  const pkg = rig.path("attacker", "pkg");
  mkdirSync(join(pkg, "DEBIAN"), { recursive: true });
  writeFileSync(join(pkg, "DEBIAN", "control"), "Package: muster-hostile\nVersion: 1\nArchitecture: all\nMaintainer: attacker <a@example.net>\nDescription: would run its postinst as root\n");
  writeFileSync(join(pkg, "DEBIAN", "postinst"), `#!/bin/sh\ntouch ${marker()}\n`, { mode: 0o755 });
  const deb = rig.path("attacker", "evil.deb");
  await run("dpkg-deb", ["--root-owner-group", "-Zgzip", "--build", pkg, deb]);
  chownSync(deb, DAEMON_UID, GROUP);
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
  const installed = await run("dpkg-query", ["-W", "muster-hostile"]).then(
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
  assert.deepEqual(readdirSync(rig.path("files")), [], "nothing was made");
  nothingRan();
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
      mkdirSync(d, { recursive: true });
      prepare(d);
      rig.writeConfig({ ...rig.baseConfig, plugins: { ...plugins, resource: { ...plugins.resource, file_paths: [d] } } });
      const a = await rig.ask(res("file", join(d, "x"), [["ensure", "file"], ["content", "x"]]));
      refusedWith(a, why);
      assert.match(a.error!, /each plugins\.resource\.file_paths directory, and everything in it, must be root's alone/);
      assert.equal(existsSync(join(d, "x")), false);
    }
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
  mkdirSync(shared);
  chownSync(shared, DAEMON_UID, GROUP); // a directory the attacker came to own
  const swapper = rig.attacker(SWAPPER, [join(shared, "d"), rig.path("outside")]);
  const done = output(swapper);
  await saidOnStderr(swapper, /swapping/);
  const answers = await many(Array.from({ length: 24 }, (_, i) => res("file", join(shared, "d", `x${i}`), [["content", "owned"], ["ensure", "file"]])));
  swapper.stdin!.end();
  const { swaps } = JSON.parse(await done) as { swaps: number; refused: number };
  assert.ok(swaps > 0, "the attacker really swapped");
  for (const a of answers) refusedWith(a, /shared belongs to uid 65534, not root/);
  assert.deepEqual(readdirSync(rig.path("outside")), [], "nothing was written outside");
  rmSync(shared, { recursive: true, force: true });
});

test("the symlink-swap race in a loop against root's directory: the attacker's swaps all fail, the writes land inside, one Puppet at a time, nothing outside", async () => {
  const d = rig.path("files", "d");
  mkdirSync(d);
  // root's own puppet, with a record of when each one ran: one Puppet process at a time
  const log = rig.path("puppet-runs.log");
  const wrapper = rig.path("puppet-wrapper");
  writeFileSync(wrapper, `#!/bin/sh\necho "start $$" >> ${log}\npuppet "$@"\nrc=$?\necho "end $$" >> ${log}\nexit $rc\n`, { mode: 0o755 });
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
      assert.equal(readFileSync(join(d, `x${i + 1}`), "utf8"), `written ${i + 1}`);
      assert.equal(statSync(join(d, `x${i + 1}`)).uid, 0);
    }
    assert.ok(lstatSync(d).isDirectory() && !lstatSync(d).isSymbolicLink());
    assert.deepEqual(readdirSync(rig.path("outside")), [], "nothing was written outside");
    // the three came at once; Puppet ran them one after another
    const events = readFileSync(log, "utf8").trim().split("\n").map((l) => l.split(" ")[0]);
    assert.deepEqual(events, ["start", "end", "start", "end", "start", "end"], readFileSync(log, "utf8"));
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
  mkdirSync(sticky);
  chmodSync(sticky, 0o1777);
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
    assert.deepEqual(readdirSync(rig.path("outside")), [], "nothing was written outside");
  } finally {
    rig.writeConfig(rig.baseConfig);
    rmSync(sticky, { recursive: true, force: true });
  }
});

test("set_server after certification: without a port, or with another port or master, is refused and puppet.conf keeps serverport and server_list", async () => {
  const conf = rig.path("puppet/etc/puppet.conf");
  writeFileSync(conf, "[main]\nserver = 127.0.0.11\nserverport = 8141\n\n[agent]\nserver_list = 127.0.0.11:8141,127.0.0.12:8141\n");
  const ssl = rig.path("puppet/ssl");
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
  assert.equal(readFileSync(name, "utf8"), "--debug --confdir=/tmp/evil");
  assert.deepEqual(readdirSync(rig.path("outside")), []);
  rmSync(name);
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
  const write = await run("setpriv", [`--reuid=${DAEMON_UID}`, `--regid=${GROUP}`, `--groups=${GROUP}`, "sh", "-c", `echo 'plugins: {resource: {allowed_types: [exec]}}' >> ${rig.path("server.yaml")}`]).then(
    () => "written",
    (e: { stderr: string }) => e.stderr,
  );
  assert.match(write, /Permission denied/);
});

test("every request is in the helper's log with its arguments, a file's content by size and digest only", async () => {
  const secret = "s3cret-token-for-the-log-test";
  refusedWith(await rig.ask(res("file", rig.path("files", "logged"), [["content", secret], ["ensure", "file"], ["mode", "4755"]])), /mode/);
  const log = rig.helper.stderr();
  const line = log.split("\n").find((l) => l.includes('"op":"puppet.resource"') && l.includes("logged") && l.includes('"msg":"refused"'));
  assert.ok(line, `no log line for the request: ${log.slice(-2000)}`);
  assert.match(line, /"properties":\[\["content","<29 bytes, sha256 [0-9a-f]{16}>"\],\["ensure","file"\],\["mode","4755"\]\]/);
  assert.match(line, /"peer":\d+/);
  assert.equal(log.includes(secret), false, "the content itself is never logged");
});
