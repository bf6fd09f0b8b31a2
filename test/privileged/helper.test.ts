import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmodSync, chownSync, copyFileSync, existsSync, mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { stringify as toYaml } from "yaml";
import { cleanEnv, cliPath, runCli, spawnMuster, startBroker, tempDir, type MusterProcess } from "../support/collective.js";
import { testPki } from "../support/index.js";

// A compromised node daemon, played by a process running as another user (setpriv), talks to the
// real privileged helper (`muster privileged serve`, as root, on a real socket; each peer's uid
// read by the kernel through SO_PEERCRED): it is refused everything outside the list, every file
// outside plugins.resource's directories, every Puppet master but the configured one, and every
// other user; what is on the list it does, as root.

const run = promisify(execFile);
const tmp = tempDir("privileged");
const DAEMON_UID = 65534; // nobody: the uid the helper serves here (the muster user on a machine)
const OTHER_UID = 65533; // a uid the helper does not serve
const GROUP = 65534; // nogroup: the socket's group, as muster's is in the package
const dir = (...p: string[]) => join(tmp.path, ...p);

let helper: MusterProcess;
const sock = dir("privileged.sock");
const certname = "helper1.privileged.test";

before(async () => {
  chmodSync(tmp.path, 0o755); // the stand-in daemon must reach the socket and its script
  for (const d of ["puppet/etc", "puppet/var", "puppet/ssl", "files", "outside", "facts.d"]) mkdirSync(dir(d), { recursive: true });
  const puppet = { confdir: dir("puppet/etc"), vardir: dir("puppet/var"), ssldir: dir("puppet/ssl"), certname };
  const config = {
    identity: certname,
    agents: { builtin: ["provision", "puppet", "resource"] },
    plugins: {
      provision: { ...puppet, stage_fact_file: dir("facts.d", "muster_lifecycle_stage.yaml"), lock_file: dir("deploy.lock"), disable_file: dir("disabled") },
      puppet,
      resource: { allowed_types: ["file"], file_paths: [dir("files")], confdir: puppet.confdir, vardir: puppet.vardir },
    },
    facts: { facter: false },
    log: { level: "warn" },
  };
  writeFileSync(dir("server.yaml"), toYaml(config), { mode: 0o640 });
  // The stand-in daemon: connects, sends one line, prints the reply (or the connection error).
  writeFileSync(
    dir("daemon.mjs"),
    `import { connect } from "node:net";
const s = connect(process.argv[2]);
let out = "";
s.on("connect", () => s.write(process.argv[3] + "\\n"));
s.on("data", (d) => (out += d));
s.on("error", (e) => { process.stdout.write(JSON.stringify({ connectError: e.code })); process.exit(0); });
s.on("close", () => process.stdout.write(out));
`,
    { mode: 0o644 },
  );
  helper = spawnMuster(["privileged", "serve", "--config", dir("server.yaml"), "--socket", sock, "--client-user", String(DAEMON_UID)], { env: cleanEnv(dir("helper-home")) });
  await helper.waitForLine(/muster privileged helper ready \(serving uid 65534\)/, 30_000);
});

after(async () => {
  const stopped = await helper?.stop();
  tmp.remove();
  assert.deepEqual(stopped, { code: 0, signal: null }, `the helper stops cleanly on SIGTERM: ${helper?.stderr()}`);
});

interface Answer {
  ok?: boolean;
  refused?: boolean;
  code?: string;
  error?: string;
  result?: unknown;
  connectError?: string;
}

/** One request line from a process running as `uid` (groups: the socket's, unless `groups` says otherwise). */
async function ask(request: unknown, uid = DAEMON_UID, groups: number[] = [GROUP]): Promise<Answer> {
  const line = typeof request === "string" ? request : JSON.stringify(request);
  const ids = [`--reuid=${uid}`, `--regid=${uid === DAEMON_UID ? GROUP : uid}`, groups.length ? `--groups=${groups.join(",")}` : "--clear-groups"];
  const r = await run("setpriv", [...ids, process.execPath, dir("daemon.mjs"), sock, line], { cwd: "/" });
  return JSON.parse(r.stdout) as Answer;
}

function refusedWith(a: Answer, re: RegExp): void {
  assert.equal(a.ok, false, JSON.stringify(a));
  assert.equal(a.refused, true, JSON.stringify(a));
  assert.equal(a.code, "MUSTER_PRIVILEGED_REFUSED");
  assert.match(a.error ?? "", re);
}

test("the socket is root's and the daemon group's: 0660, as muster-privileged.socket makes it", () => {
  const st = statSync(sock);
  assert.ok(st.isSocket());
  assert.equal(st.mode & 0o777, 0o660);
  assert.equal(st.uid, 0);
  assert.equal(st.gid, GROUP);
});

test("a compromised daemon cannot run a command: anything off the list is refused and nothing runs", async () => {
  const marker = dir("pwned");
  for (const req of [
    { op: "exec", args: { cmd: `touch ${marker}` } },
    { op: "shell", args: { command: `touch ${marker}` } },
    { op: "puppet.run", args: { agent: "puppet", puppet_bin: "/usr/bin/touch", confdir: marker } },
    { op: "puppet.daemonize", args: { agent: "puppet", extraArgs: ["--exec", `touch ${marker}`] } },
    `touch ${marker}`,
  ]) {
    refusedWith(await ask(req), /not on the helper's list|Unrecognized key|not a JSON request/);
  }
  assert.equal(existsSync(marker), false, "nothing ran");
});

test("a compromised daemon cannot write an arbitrary file: only plugins.resource's types and directories, the stage fact file where root's config says", async () => {
  refusedWith(await ask({ op: "provision.persist_stage", args: { file: dir("outside", "x.yaml") } }), /Unrecognized key/);
  const outside = dir("outside", "sudoers");
  refusedWith(await ask({ op: "puppet.resource", args: { type: "file", name: outside, properties: [["ensure", "file"], ["content", "ALL ALL=(ALL) NOPASSWD: ALL"]] } }), /outside the directories this node allows/);
  refusedWith(await ask({ op: "puppet.resource", args: { type: "file", name: `${dir("files")}/../outside/x`, properties: [["ensure", "file"]] } }), /not a plain absolute path/);
  symlinkSync(dir("outside"), dir("files", "link"));
  refusedWith(await ask({ op: "puppet.resource", args: { type: "file", name: dir("files", "link", "x"), properties: [["ensure", "file"]] } }), /files\/link is a symbolic link/);
  refusedWith(await ask({ op: "puppet.resource", args: { type: "file", name: dir("files", "y"), properties: [["source", "/etc/shadow"]] } }), /property source is not allowed/);
  refusedWith(await ask({ op: "puppet.resource", args: { type: "exec", name: "/bin/sh -c id", properties: [["command", "/bin/id"]] } }), /resource type 'exec' is not allowed/);
  refusedWith(await ask({ op: "puppet.resource", args: { type: "user", name: "root", properties: [["password", "x"]] } }), /resource type 'user' is not allowed/);
  assert.equal(existsSync(outside), false);
  assert.equal(existsSync(dir("outside", "x")), false);
});

test("a compromised daemon cannot send Puppet to another master: no --server, and none once the node holds its certificate", async () => {
  refusedWith(await ask({ op: "puppet.run", args: { agent: "puppet", server: "evil.example.net:8140" } }), /other than the configured one.*allow_server_override/);
  refusedWith(await ask({ op: "puppet.run", args: { agent: "provision", server: "evil.example.net" } }), /other than the configured one/);
  refusedWith(await ask({ op: "puppet.run", args: { agent: "puppet", environment: "production --server=evil" } }), /environment/);
  // While provisioning (no certificate yet) the provisioner's choice is written, by root.
  const ok = await ask({ op: "puppet.set_server", args: { host: "127.0.0.11", port: 8140 } });
  assert.equal(ok.ok, true, JSON.stringify(ok));
  const conf = join(dir("puppet/etc"), "puppet.conf");
  assert.match(readFileSync(conf, "utf8"), /^server = 127\.0\.0\.11$/m);
  assert.equal(statSync(conf).uid, 0, "root wrote puppet.conf");
  // and made the state the unprivileged daemon reads readable (Puppet applies these modes itself)
  assert.match(readFileSync(conf, "utf8"), /^classfile = \$statedir\/classes\.txt \{ mode = 0644 \}$/m);
  assert.match(readFileSync(conf, "utf8"), /^statedir = \$vardir\/state \{ mode = 0755 \}$/m);
  // Once the node holds its certificate, its master is the one it trusts.
  mkdirSync(dir("puppet/ssl/certs"), { recursive: true });
  mkdirSync(dir("puppet/ssl/private_keys"), { recursive: true });
  writeFileSync(dir("puppet/ssl/certs", `${certname}.pem`), "cert\n");
  writeFileSync(dir("puppet/ssl/private_keys", `${certname}.pem`), "key\n", { mode: 0o600 });
  refusedWith(await ask({ op: "puppet.set_server", args: { host: "127.0.0.66", port: 8140 } }), /holds its Puppet certificate .* its master is 127\.0\.0\.11:8140; pointing it at 127\.0\.0\.66:8140/);
  assert.match(readFileSync(conf, "utf8"), /^server = 127\.0\.0\.11$/m, "puppet.conf unchanged");
  const again = await ask({ op: "puppet.set_server", args: { host: "127.0.0.11", port: 8140 } });
  assert.equal(again.ok, true, `the same master again is fine (a retried step): ${JSON.stringify(again)}`);
  // The node's Puppet key goes to the daemon only where the node connects with it.
  refusedWith(await ask({ op: "puppet.tls_credential", args: {} }), /tls\.use_puppet_cert is not set/);
});

test("other users are refused: by the socket's mode, and by SO_PEERCRED when they get through it", async () => {
  const withGroup = await ask({ op: "puppet.enable", args: { agent: "puppet" } }, OTHER_UID, [GROUP]);
  refusedWith(withGroup, /uid 65533 may not use this helper \(it serves uid 65534\)/);
  const without = await ask({ op: "puppet.enable", args: { agent: "puppet" } }, OTHER_UID, []);
  assert.equal(without.connectError, "EACCES", JSON.stringify(without));
  // root is not the client either: the helper serves one uid
  refusedWith(await ask({ op: "puppet.enable", args: { agent: "puppet" } }, 0, []), /uid 0 may not use/);
});

test("what is on the list it does, as root: a file resource in an allowed directory, the stage fact, Puppet's disable lock", async () => {
  const file = dir("files", "hello");
  const r = await ask({ op: "puppet.resource", args: { type: "file", name: file, properties: [["content", "hi from the helper"], ["ensure", "file"]] } });
  assert.equal(r.ok, true, JSON.stringify(r));
  assert.equal(readFileSync(file, "utf8"), "hi from the helper");
  assert.equal(statSync(file).uid, 0, "written by root");
  assert.ok(((r.result as { changes: string[] }).changes ?? []).some((c) => /created|defined content/.test(c)), JSON.stringify(r.result));

  const stage = await ask({ op: "provision.persist_stage", args: {} });
  assert.deepEqual(stage, { ok: true, result: { changed: true } });
  assert.match(readFileSync(dir("facts.d", "muster_lifecycle_stage.yaml"), "utf8"), /^lifecycle_stage: "production"$/m);

  const off = await ask({ op: "puppet.disable", args: { agent: "puppet", message: "maintenance by the test" } });
  assert.deepEqual(off, { ok: true, result: { changed: true } });
  assert.deepEqual(JSON.parse(readFileSync(dir("puppet/var/state/agent_disabled.lock"), "utf8")), { disabled_message: "maintenance by the test" });
  assert.deepEqual(await ask({ op: "puppet.enable", args: { agent: "puppet" } }), { ok: true, result: { changed: true } });
  assert.equal(existsSync(dir("puppet/var/state/agent_disabled.lock")), false);
});

test("a real muster server running as that unprivileged user: its resource and puppet agents act through the helper, and what the helper refuses comes back as the agent's refusal", async () => {
  const broker = await startBroker();
  // The server's own files, its user's: its config dir (keys), a copy of the test PKI it can read.
  const home = dir("server-home");
  const pki = testPki();
  mkdirSync(join(home, "tls"), { recursive: true });
  for (const f of [pki.ca, pki.clientCert, pki.clientKey]) copyFileSync(f, join(home, "tls", f.split("/").at(-1)!));
  const tls = { MUSTER_TLS_CA: join(home, "tls", pki.ca.split("/").at(-1)!), MUSTER_TLS_CERT: join(home, "tls", pki.clientCert.split("/").at(-1)!), MUSTER_TLS_KEY: join(home, "tls", pki.clientKey.split("/").at(-1)!) };
  const config = toYaml({
    identity: certname,
    brokers: [broker.url],
    privileged_helper: sock,
    agents: { builtin: ["puppet", "resource"] },
    // the daemon's own config allows more than root's: the helper goes by root's
    plugins: { resource: { allowed_types: ["file"], file_paths: [dir("files"), dir("outside")] } },
    facts: { facter: false },
    registration: { interval: 0 },
    log: { level: "warn" },
  });
  writeFileSync(join(home, "server.yaml"), config);
  for (const p of [home, join(home, "tls"), join(home, "server.yaml"), ...Object.values(tls)]) chownSync(p, DAEMON_UID, GROUP);
  // One signing key for the server and this test's client: the server trusts its local user's key.
  const env = cleanEnv(home, { ...tls, MUSTER_CALLER: "tester" });
  const server = spawnMuster(["--reuid=" + DAEMON_UID, "--regid=" + GROUP, "--groups=" + GROUP, process.execPath, cliPath, "server", "--config", join(home, "server.yaml")], { env, bin: "setpriv" });
  try {
    await server.waitForLine(/ready/, 30_000);
    assert.equal((await run("ps", ["-o", "uid=", "-p", String(server.child.pid)])).stdout.trim(), String(DAEMON_UID), "the server runs unprivileged");
    const client = cleanEnv(home, { MUSTER_CALLER: "tester" });
    const file = dir("files", "from-the-server");
    const ok = await runCli(["resource", "file", file, "ensure=file", "content=through the helper", "-I", certname, "--broker", broker.url], { env: client, timeoutMs: 60_000 });
    assert.equal(ok.code, 0, `${ok.stdout}${ok.stderr}`);
    assert.equal(readFileSync(file, "utf8"), "through the helper");
    assert.equal(statSync(file).uid, 0, "written by the helper, as root");
    // The daemon's config would allow this directory; root's does not, and the caller hears the helper's refusal.
    const refused = await runCli(["resource", "file", dir("outside", "from-the-server"), "ensure=file", "content=x", "-I", certname, "--broker", broker.url], { env: client, timeoutMs: 60_000 });
    assert.notEqual(refused.code, 0, refused.stdout);
    assert.match(`${refused.stdout}${refused.stderr}`, /privileged helper refused puppet\.resource: file .*outside the directories this node allows/);
    assert.equal(existsSync(dir("outside", "from-the-server")), false);
    // Puppet's disable lock goes where root's config puts Puppet's state.
    const disabled = await runCli(["rpc", "puppet", "disable", "message=from the fleet", "-I", certname, "--broker", broker.url, "--json"], { env: client, timeoutMs: 60_000 });
    assert.equal(disabled.code, 0, `${disabled.stdout}${disabled.stderr}`);
    assert.deepEqual(JSON.parse(readFileSync(dir("puppet/var/state/agent_disabled.lock"), "utf8")), { disabled_message: "from the fleet" }, "root's config decides where Puppet's state is");
    await run("rm", ["-f", dir("puppet/var/state/agent_disabled.lock")]);
  } finally {
    const stopped = await server.stop();
    await broker.dispose();
    assert.equal(stopped.code, 0, server.stderr());
  }
});

test("socket activation: started by its first connection on the socket it is handed (LISTEN_FDS, fd 3), as muster-privileged.socket starts it", async () => {
  const activated = dir("activated.sock");
  // systemd-socket-activate listens as systemd would and starts the helper on the first connection.
  const helper2 = spawnMuster(["-l", activated, "-E", "MUSTER_CONFIG_DIR", process.execPath, cliPath, "privileged", "serve", "--config", dir("server.yaml"), "--client-user", "0"], {
    env: cleanEnv(dir("helper2-home")),
    bin: "systemd-socket-activate",
  });
  try {
    // systemd-socket-activate says on stderr when it listens
    await new Promise<void>((resolve, reject) => {
      const deadline = setTimeout(() => reject(new Error(`systemd-socket-activate did not listen: ${helper2.stderr()}`)), 10_000);
      const check = () => {
        if (!/Listening on/.test(helper2.stderr())) return;
        clearTimeout(deadline);
        helper2.child.stderr!.off("data", check);
        resolve();
      };
      helper2.child.stderr!.on("data", check);
      check();
    });
    assert.equal(helper2.stdout().includes("muster privileged helper ready"), false, "nothing started before a connection");
    // root is the client this time (the activated socket has no muster group to hand it to)
    const r = await run(process.execPath, [dir("daemon.mjs"), activated, JSON.stringify({ op: "puppet.enable", args: { agent: "puppet" } })]);
    assert.deepEqual(JSON.parse(r.stdout), { ok: true, result: { changed: false } });
    await helper2.waitForLine(/muster privileged helper ready \(serving uid 0\)/, 10_000);
    const refused = JSON.parse((await run(process.execPath, [dir("daemon.mjs"), activated, JSON.stringify({ op: "exec", args: {} })])).stdout) as Answer;
    refusedWith(refused, /not on the helper's list/);
  } finally {
    const stopped = await helper2.stop();
    assert.equal(stopped.code, 0, helper2.stderr());
  }
});

test("idle exit: it exits after --idle-exit seconds with no connection, never while one is open", async () => {
  const idleSock = dir("idle.sock");
  const h = spawnMuster(["privileged", "serve", "--config", dir("server.yaml"), "--socket", idleSock, "--client-user", "0", "--idle-exit", "1"], { env: cleanEnv(dir("helper3-home")) });
  try {
    await h.waitForLine(/muster privileged helper ready \(serving uid 0\)/, 30_000);
    // a slow client: connected, its request sent only after more than the idle time
    const { connect } = await import("node:net");
    const s = connect(idleSock);
    await new Promise<void>((res, rej) => (s.once("connect", () => res()), s.once("error", rej)));
    let answer = "";
    s.on("data", (d: Buffer) => (answer += d.toString()));
    const closed = new Promise<void>((res) => s.once("close", () => res()));
    const exitedEarly = await Promise.race([h.exited.then(() => true), new Promise<false>((res) => setTimeout(() => res(false), 1_800))]);
    assert.equal(exitedEarly, false, "a connection is open: the helper stays");
    s.end(`${JSON.stringify({ op: "puppet.enable", args: { agent: "puppet" } })}\n`);
    await closed;
    assert.equal((JSON.parse(answer) as Answer).ok, true, answer);
    // then, idle for a second: it exits by itself, cleanly
    const exit = await h.exited;
    assert.deepEqual(exit, { code: 0, signal: null }, h.stderr());
    assert.match(h.stdout() + h.stderr(), /no connection for 1 s: exiting/);
  } finally {
    await h.stop();
  }
});

test("--idle-exit takes seconds", async () => {
  const r = await runCli(["privileged", "serve", "--socket", dir("never.sock"), "--idle-exit", "soon"], { env: cleanEnv(dir("helper4-home")) });
  assert.equal(r.code, 64);
  assert.match(r.stderr, /--idle-exit takes a number of seconds \(0: never\), not "soon"/);
});
