import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { cleanEnv, cliPath, runCli, startBroker, startMusterServer, tempDir, type Broker, type CliResult, type TestServer } from "../support/collective.js";

// `muster nrpe`, `muster resource` and `muster ssh` end to end: the real CLI against real
// `muster server` processes (with the real nrpe and resource agents) on a real nats-server.
// ssh is a script that records its argv: nothing ever contacts an SSH server.

const tmp = tempDir("fleet-ops");
const env = cleanEnv(join(tmp.path, "config"));
const files = join(tmp.path, "files");
const sshLog = join(tmp.path, "ssh-argv.txt");
const fakeSsh = join(tmp.path, "fake-ssh");

let broker: Broker;
const servers: TestServer[] = [];

function script(path: string, body: string): string {
  writeFileSync(path, `#!/bin/sh\n${body}\n`);
  chmodSync(path, 0o755);
  return path;
}

/** An nrpe.d for one node whose check_load ends in `state` (0-3). */
function nrpeDir(node: string, state: number, text: string): string {
  const d = join(tmp.path, node, "nrpe.d");
  mkdirSync(d, { recursive: true });
  const check = script(join(tmp.path, node, "check_load"), `echo "${text}|load1=0.${state}"\nexit ${state}`);
  const echo = script(join(tmp.path, node, "check_echo"), `echo "OK - args: $*"`);
  writeFileSync(join(d, "checks.cfg"), `command[check_load]=${check}\ncommand[check_echo]=${echo} $ARG1$ $ARG2$\n`);
  return d;
}

function puppetDirs(node: string): { confdir: string; vardir: string } {
  const confdir = join(tmp.path, node, "puppet", "conf");
  const vardir = join(tmp.path, node, "puppet", "var");
  mkdirSync(confdir, { recursive: true });
  mkdirSync(vardir, { recursive: true });
  return { confdir, vardir };
}

before(async () => {
  mkdirSync(files, { recursive: true });
  script(fakeSsh, `: > ${sshLog}\nfor a in "$@"; do printf '%s\\n' "$a" >> ${sshLog}; done\nexit 7`);
  broker = await startBroker();
  const node = (identity: string, facts: Record<string, unknown>, plugins: Record<string, unknown>) =>
    startMusterServer({ identity, broker: broker.url, facts, config: { agents: { builtin: ["nrpe", "resource"] }, plugins } }, { dir: tmp.path, env });
  servers.push(
    ...(await Promise.all([
      node("web1.test", { role: "web", address: "127.0.0.21" }, { nrpe: { conf_dir: nrpeDir("web1", 0, "OK - load fine") }, resource: { allowed_types: ["file"], file_paths: [files], ...puppetDirs("web1") } }),
      node("db1.test", { role: "db", address: "-oProxyCommand=touch pwned" }, { nrpe: { conf_dir: nrpeDir("db1", 1, "WARNING - load 1.5") }, resource: { ...puppetDirs("db1") } }),
      node("db2.test", { role: "db" }, { nrpe: { conf_dir: nrpeDir("db2", 2, "CRITICAL - load 9") }, resource: { allowed_types: "file", file_paths: files, ...puppetDirs("db2") } }),
    ])),
  );
});

after(async () => {
  await Promise.all(servers.map((s) => s.stop()));
  await broker?.dispose();
  tmp.remove();
});

const muster = (args: string[], timeoutMs = 60_000): Promise<CliResult> => runCli([args[0]!, "--broker", broker.url, "--dt", "1", ...args.slice(1)], { env, timeoutMs });

const SUMMARY = /^(\S+): OK: (\d+) WARNING: (\d+) CRITICAL: (\d+) UNKNOWN: (\d+)\|total=(\d+) ok=(\d+) warn=(\d+) crit=(\d+) unknown=(\d+) checktime=\d+\.\d{6}$/;

function summary(r: CliResult): number[] {
  const first = r.stdout.split("\n")[0]!;
  const m = SUMMARY.exec(first);
  assert.ok(m, `not a Nagios summary line: ${JSON.stringify(first)}\nstderr: ${r.stderr}`);
  return m.slice(2).map(Number);
}

describe("muster nrpe", () => {
  test("one node OK: the summary line and exit 0", async () => {
    const r = await muster(["nrpe", "check_load", "-I", "web1.test"]);
    assert.deepEqual(summary(r), [1, 0, 0, 0, 1, 1, 0, 0, 0]);
    assert.match(r.stdout, /^check_load: OK: 1 WARNING: 0 CRITICAL: 0 UNKNOWN: 0\|total=1 ok=1 warn=0 crit=0 unknown=0 checktime=/);
    assert.equal(r.stdout.trim().split("\n").length, 1, r.stdout);
    assert.equal(r.code, 0);
  });

  test("OK and WARNING: exit 1, the warning host listed with its output", async () => {
    const r = await muster(["nrpe", "check_load", "-I", "web1.test", "-I", "db1.test"]);
    assert.deepEqual(summary(r), [1, 1, 0, 0, 2, 1, 1, 0, 0]);
    // no key directory on this broker: every host is unproven, and marked so
    assert.match(r.stdout, /\nWARNING:\n   db1\.test \(unverified\): WARNING - load 1\.5\n?$/);
    assert.equal(r.code, 1);
  });

  test("the whole fleet: CRITICAL wins, hosts listed critical first", async () => {
    // discovery's default --dt (the quiet window ends it once all three answered): the file's 1 s
    // is for the tests that wait it out, and a loaded machine can take longer than that to answer
    const r = await muster(["nrpe", "check_load", "--dt", "2"]);
    assert.deepEqual(summary(r), [1, 1, 1, 0, 3, 1, 1, 1, 0]);
    assert.match(r.stdout, /\nCRITICAL:\n   db2\.test \(unverified\): CRITICAL - load 9\nWARNING:\n   db1\.test \(unverified\): WARNING - load 1\.5/);
    assert.equal(r.code, 2);
  });

  test("a listed node that does not answer counts as UNKNOWN: exit 3", async () => {
    const nodes = join(tmp.path, "nodes.txt");
    writeFileSync(nodes, "web1.test\nghost.test\n");
    // a timeout only ghost runs out: web1's check answers within it whatever the load
    const r = await muster(["nrpe", "check_load", "--nodes", nodes, "--timeout", "10"]);
    assert.deepEqual(summary(r), [1, 0, 0, 1, 2, 1, 0, 0, 1]);
    assert.match(r.stdout, /\nUNKNOWN:\n   ghost\.test: no response/);
    assert.equal(r.code, 3);
  });

  test("nothing discovered is UNKNOWN: exit 3", async () => {
    const r = await muster(["nrpe", "check_load", "-F", "role=none"]);
    assert.match(r.stdout, /^check_load: UNKNOWN: did not discover any nodes\|total=0 /);
    assert.equal(r.code, 3);
  });

  test("an unknown command is UNKNOWN on every node", async () => {
    const r = await muster(["nrpe", "check_nope", "-I", "web1.test"]);
    assert.deepEqual(summary(r).slice(0, 4), [0, 0, 0, 1]);
    assert.match(r.stdout, /web1\.test \(unverified\): UNKNOWN: no such command: check_nope/);
    assert.equal(r.code, 3);
  });

  test("arguments reach $ARGn$; shell metacharacters are refused before anything is sent", async () => {
    const ok = await muster(["nrpe", "check_echo", "-I", "web1.test", "--json", "--", "-w", "5"]);
    assert.equal(ok.code, 0, ok.stdout + ok.stderr);
    const j = JSON.parse(ok.stdout) as { hosts: { identity: string; output: string }[]; exitcode: number };
    assert.deepEqual(j.hosts.map((h) => [h.identity, h.output]), [["web1.test", "OK - args: -w 5"]]);
    const bad = await muster(["nrpe", "check_echo", "-I", "web1.test", "a;touch x"]);
    assert.match(bad.stdout, /^check_echo: UNKNOWN: input 'args' must match/);
    assert.equal(bad.code, 3);
  });

  test("a bad filter is UNKNOWN too, never WARNING", async () => {
    const r = await muster(["nrpe", "check_load", "-S", "role=web and ("]);
    assert.match(r.stdout, /^check_load: UNKNOWN: /);
    assert.equal(r.code, 3);
  });
});

describe("muster resource", () => {
  test("applies a file on the matching node with the real Puppet, prints its state and a summary", async () => {
    const path = join(files, "motd");
    const r = await muster(["resource", "file", path, "ensure=file", "content=managed by muster", "-I", "web1.test"]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.equal(readFileSync(path, "utf8"), "managed by muster");
    assert.match(r.stdout, /web1\.test: changed/);
    assert.match(r.stdout, /ensure => file/);
    assert.match(r.stdout, /Summary: 1 changed, 0 unchanged, 0 failed/);
    const again = await muster(["resource", "file", path, "ensure=file", "content=managed by muster", "-I", "web1.test"]);
    assert.match(again.stdout, /Summary: 0 changed, 1 unchanged, 0 failed/);
    assert.equal(again.code, 0);
  });

  test("without properties it shows the state", async () => {
    const path = join(files, "shown");
    writeFileSync(path, "x");
    const text = await muster(["resource", "file", path, "-I", "web1.test"]);
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /ensure => file/);
    assert.match(text.stdout, /^Summary: 1 shown, 0 failed$/m, "the summary docs/fleet.md gives for show mode");
    const r = await muster(["resource", "file", path, "-I", "web1.test", "--json"]);
    assert.equal(r.code, 0, r.stderr);
    const j = JSON.parse(r.stdout) as { action: string; replies: { data: { state: { ensure: string } } }[] };
    assert.equal(j.action, "show");
    assert.equal(j.replies[0]!.data.state.ensure, "file");
  });

  test("a node that does not allow the type refuses: some failed, exit 2", async () => {
    const path = join(files, "role-db");
    const r = await muster(["resource", "file", path, "ensure=file", "-F", "role=db"]);
    assert.equal(r.code, 2, r.stdout + r.stderr);
    assert.match(r.stdout, /db1\.test: resource type 'file' is not allowed on this node/);
    assert.match(r.stdout, /db2\.test: changed/);
    assert.match(r.stdout, /Summary: 1 changed, 0 unchanged, 1 failed/);
  });

  test("bad properties: a clear message, exit 64 (usage), nothing sent; a bad type is invalid input, exit 1", async () => {
    for (const args of [["en-sure=file"], ["ensure"], ["content="]]) {
      const r = await muster(["resource", "file", join(files, "never"), ...args, "-I", "web1.test"]);
      assert.equal(r.code, 64, `${args.join(" ")}: ${r.stderr}`);
      assert.match(r.stderr, /usage: muster resource TYPE NAME/);
      assert.match(r.stderr, /muster: .*(property|key=value)/);
    }
    const r = await muster(["resource", "File", "/tmp/x", "ensure=file"]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /input 'type' must match/);
    assert.equal(existsSync(join(files, "never")), false);
  });
});

describe("muster ssh", () => {
  const ssh = (args: string[]) => muster(["ssh", "--ssh-command", fakeSsh, ...args]);
  const argv = () => readFileSync(sshLog, "utf8").split("\n").slice(0, -1);

  test("one match: runs ssh to its identity with the extra arguments, and exits with ssh's code", async () => {
    rmSync(sshLog, { force: true });
    const r = await ssh(["-I", "web1.test", "--", "-l", "root", "uptime"]);
    assert.equal(r.code, 7, r.stderr);
    assert.deepEqual(argv(), ["web1.test", "-l", "root", "uptime"]);
  });

  test("--fact takes the address from a fact", async () => {
    rmSync(sshLog, { force: true });
    const r = await ssh(["-I", "web1.test", "--fact", "address"]);
    assert.equal(r.code, 7, r.stderr);
    assert.deepEqual(argv(), ["127.0.0.21"]);
    assert.match(r.stderr, /Connecting to web1\.test at 127\.0\.0\.21/);
  });

  test("a fact value that ssh would read as an option is refused", async () => {
    rmSync(sshLog, { force: true });
    const r = await ssh(["-I", "db1.test", "--fact", "address"]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /refusing to ssh to "-oProxyCommand=touch pwned"/);
    assert.equal(existsSync(sshLog), false);
  });

  test("a node without the fact: a clear message, exit 1", async () => {
    const r = await ssh(["-I", "db2.test", "--fact", "address"]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /db2\.test has no fact address/);
  });

  test("no match: a clear message, exit 1, ssh not run", async () => {
    rmSync(sshLog, { force: true });
    const r = await ssh(["-F", "role=none"]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /no node matches the filters/);
    assert.equal(existsSync(sshLog), false);
  });

  test("several matches without a terminal: the list and exit 1", async () => {
    rmSync(sshLog, { force: true });
    const r = await ssh(["-F", "role=db"]);
    assert.equal(r.code, 1);
    assert.equal(r.stdout, "db1.test\ndb2.test\n");
    assert.match(r.stderr, /2 nodes match and there is no terminal to choose on; narrow the filters/);
    assert.equal(existsSync(sshLog), false);
  });

  test("several matches on a terminal: a numbered menu, the chosen node", async (t) => {
    if (!existsSync("/usr/bin/script")) return t.skip("util-linux script(1) is needed for a pseudo-terminal");
    rmSync(sshLog, { force: true });
    // No filter: all three nodes match. script(1) gives the CLI a pseudo-terminal.
    const cmd = [process.execPath, cliPath, "ssh", "--ssh-command", fakeSsh, "--broker", broker.url, "--dt", "1"];
    const quoted = cmd.map((a) => `'${a.replace(/'/g, "'\\''")}'`).join(" ");
    const child = spawn("script", ["-qec", quoted, "/dev/null"], { env, stdio: ["pipe", "pipe", "pipe"] });
    let out = "";
    let answered = false;
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
      if (!answered && /Connect to which node\? \[1-3, q to quit\]/.test(out)) {
        answered = true;
        child.stdin.end("2\n");
      }
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
    const code = await new Promise<number | null>((resolve) => child.once("close", (c) => resolve(c)));
    clearTimeout(timer);
    assert.match(out, /3 nodes match:\r?\n\s+1\) db1\.test\r?\n\s+2\) db2\.test\r?\n\s+3\) web1\.test/);
    assert.equal(code, 7, out);
    assert.deepEqual(argv(), ["db2.test"]);
  });
});
