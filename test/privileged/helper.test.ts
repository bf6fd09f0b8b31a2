import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmodSync, chownSync, copyFileSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { stringify as toYaml } from "yaml";
import { cleanEnv, cliPath, runCli, spawnMuster, startBroker } from "../support/collective.js";
import { testPki } from "../support/index.js";
import { DAEMON_UID, GROUP, OTHER_UID, refusedWith, startRig, type Answer, type Rig } from "./rig.js";

// The privileged helper doing its job: the real `muster privileged serve` as root on a real socket
// (test/privileged/rig.ts), each peer's uid read by the kernel through SO_PEERCRED, a real
// `muster server` running as another user acting through it, socket activation and idle exit.
// What it refuses a compromised daemon is test/privileged/hostile.test.ts.

const run = promisify(execFile);
let rig: Rig;
let dir: (...p: string[]) => string;
let sock: string;
let certname: string;
const ask = (request: unknown, uid?: number, groups?: number[]) => rig.ask(request, uid, groups);

before(async () => {
  rig = await startRig("privileged");
  ({ sock, certname } = rig);
  dir = rig.path;
});

after(async () => {
  const stopped = await rig?.stop();
  assert.deepEqual(stopped, { code: 0, signal: null }, `the helper stops cleanly on SIGTERM: ${rig?.helper.stderr()}`);
});

test("the socket is root's and the daemon group's: 0660, as muster-privileged.socket makes it", () => {
  const st = statSync(sock);
  assert.ok(st.isSocket());
  assert.equal(st.mode & 0o777, 0o660);
  assert.equal(st.uid, 0);
  assert.equal(st.gid, GROUP);
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

test("a real muster server running as that unprivileged user: its resource and puppet agents act through the helper, its facts are Puppet's as root, and Puppet's state root keeps to itself reaches it", async () => {
  const broker = await startBroker();
  // Root's side, as on a node provisioned by hand (or by another tool): facts on, a fact only root
  // can read (an external fact pluginsync would put in the vardir, 0600), and Puppet's state
  // directory 0750 with its files 0640, as Puppet leaves them (issue 26: classes.txt EACCES,
  // last_run_summary.yaml root:root 0640).
  rig.writeConfig({ ...rig.baseConfig, facts: { facter: true } });
  const vardir = dir("puppet/var");
  mkdirSync(join(vardir, "facts.d"), { recursive: true, mode: 0o700 });
  writeFileSync(join(vardir, "facts.d", "root_only.yaml"), "root_only_fact: seen-by-root\n", { mode: 0o600 });
  for (const d of ["state", "public"]) mkdirSync(join(vardir, d), { recursive: true, mode: 0o750 });
  writeFileSync(join(vardir, "state", "classes.txt"), "role::by_hand\nbase\n", { mode: 0o640 });
  writeFileSync(join(vardir, "state", "agent_disabled.lock"), JSON.stringify({ disabled_message: "maintenance, by hand" }), { mode: 0o640 });
  writeFileSync(join(vardir, "public", "last_run_summary.yaml"), "---\nversion:\n  config: '1700000000'\n  puppet: 8.10.0\nresources:\n  total: 7\n  failed: 0\ntime:\n  total: 1.5\n  last_run: 1700000000\n", { mode: 0o640 });
  for (const d of ["state", "public"]) chmodSync(join(vardir, d), 0o750);

  // The server's own files, its user's: its config dir (keys), a copy of the test PKI it can read.
  const home = dir("server-home");
  const pki = testPki();
  mkdirSync(join(home, "tls"), { recursive: true });
  for (const f of [pki.ca, pki.clientCert, pki.clientKey]) copyFileSync(f, join(home, "tls", f.split("/").at(-1)!));
  const tls = { MUSTER_TLS_CA: join(home, "tls", pki.ca.split("/").at(-1)!), MUSTER_TLS_CERT: join(home, "tls", pki.clientCert.split("/").at(-1)!), MUSTER_TLS_KEY: join(home, "tls", pki.clientKey.split("/").at(-1)!) };
  const puppet = { confdir: dir("puppet/etc"), vardir, ssldir: dir("puppet/ssl"), certname };
  const config = toYaml({
    identity: certname,
    brokers: [broker.url],
    privileged_helper: sock,
    agents: { builtin: ["puppet", "resource"] },
    // the daemon's own config allows more than root's: the helper goes by root's
    plugins: { puppet, resource: { allowed_types: ["file"], file_paths: [dir("files"), dir("outside")] } },
    facts: { facter: true, refresh_interval: 300 },
    registration: { interval: 0 },
    log: { level: "warn" },
  });
  writeFileSync(join(home, "server.yaml"), config);
  for (const p of [home, join(home, "tls"), join(home, "server.yaml"), ...Object.values(tls)]) chownSync(p, DAEMON_UID, GROUP);
  // One signing key for the server and this test's client: the server trusts its local user's key.
  const env = { ...cleanEnv(home, { ...tls, MUSTER_CALLER: "tester" }), HOME: home };
  const server = spawnMuster(["--reuid=" + DAEMON_UID, "--regid=" + GROUP, "--groups=" + GROUP, process.execPath, cliPath, "server", "--config", join(home, "server.yaml")], { env, bin: "setpriv" });
  try {
    await server.waitForLine(/ready/, 60_000);
    assert.equal((await run("ps", ["-o", "uid=", "-p", String(server.child.pid)])).stdout.trim(), String(DAEMON_UID), "the server runs unprivileged");
    const client = cleanEnv(home, { MUSTER_CALLER: "tester" });
    const cli = (args: string[]) => runCli([...args, "--broker", broker.url], { env: client, timeoutMs: 60_000 });

    // Discovery matches the facts Puppet uses: root's (`puppet facts show` through the helper),
    // with Puppet's own and a fact only root can read, not the muster user's.
    // Puppet's classes too, root's alone here, read by root for the daemon.
    const found = await cli(["find", "-F", "identity.user=root", "-F", "identity.privileged=true", "-F", "root_only_fact=seen-by-root", "-F", "puppetversion=/^[0-9]+\\./", "-C", "role::by_hand"]);
    assert.equal(found.stdout.trim(), certname, `muster find: ${found.stdout}${found.stderr}${server.stderr()}`);
    assert.equal((await cli(["find", "-F", "identity.user=nobody"])).stdout.trim(), "", "not the muster user's facts");
    const status = JSON.parse((await cli(["rpc", "puppet", "status", "-I", certname, "--json"])).stdout) as { replies: { data: Record<string, unknown> }[] };
    assert.equal(status.replies[0]!.data.disable_message, "maintenance, by hand", JSON.stringify(status));
    assert.equal(status.replies[0]!.data.lastrun, 1700000000);
    const summary = JSON.parse((await cli(["rpc", "puppet", "last_run_summary", "-I", certname, "--json"])).stdout) as { replies: { statuscode: number; data: Record<string, unknown> }[] };
    assert.equal(summary.replies[0]!.data.total_resources, 7, JSON.stringify(summary));
    assert.equal(summary.replies[0]!.data.puppet_version, "8.10.0");
    await run("rm", ["-f", join(vardir, "state", "agent_disabled.lock")]);

    const file = dir("files", "from-the-server");
    const ok = await cli(["resource", "file", file, "ensure=file", "content=through the helper", "-I", certname]);
    assert.equal(ok.code, 0, `${ok.stdout}${ok.stderr}`);
    assert.equal(readFileSync(file, "utf8"), "through the helper");
    assert.equal(statSync(file).uid, 0, "written by the helper, as root");
    // The daemon's config would allow this directory; root's does not, and the caller hears the helper's refusal.
    const refused = await cli(["resource", "file", dir("outside", "from-the-server"), "ensure=file", "content=x", "-I", certname]);
    assert.notEqual(refused.code, 0, refused.stdout);
    assert.match(`${refused.stdout}${refused.stderr}`, /privileged helper refused puppet\.resource: file .*outside the directories this node allows/);
    assert.equal(existsSync(dir("outside", "from-the-server")), false);
    // Puppet's disable lock goes where root's config puts Puppet's state.
    const disabled = await cli(["rpc", "puppet", "disable", "message=from the fleet", "-I", certname, "--json"]);
    assert.equal(disabled.code, 0, `${disabled.stdout}${disabled.stderr}`);
    assert.deepEqual(JSON.parse(readFileSync(join(vardir, "state", "agent_disabled.lock"), "utf8")), { disabled_message: "from the fleet" }, "root's config decides where Puppet's state is");
    assert.match(disabled.stdout, /"disable_message": "from the fleet"/, "and the daemon read it back through the helper");
    await run("rm", ["-f", join(vardir, "state", "agent_disabled.lock")]);
  } finally {
    const stopped = await server.stop();
    await broker.dispose();
    rig.writeConfig(rig.baseConfig);
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
