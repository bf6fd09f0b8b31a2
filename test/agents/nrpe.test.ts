import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { argumentsProblem, commandArgv, createNrpeAgent, loadNrpeConfig, NASTY_METACHARS, nrpeDDL, parseNrpeConfig, parsePluginOutput, splitArgs, splitCommandLine, substituteArgs } from "../../src/agents/nrpe/index.js";
import { validateInput } from "../../src/ddl/index.js";
import { RpcError } from "../../src/errors.js";
import { Status } from "../../src/protocol/status.js";
import { makeContext, type TestContext } from "../support/context.js";

// The nrpe agent: nrpe.d parsing, $ARGn$ substitution, argument refusal, and real plugin scripts
// (shell scripts written here, run by the agent without a shell) for each Nagios state.

const dir = mkdtempSync(join(tmpdir(), "muster-nrpe-"));
const confDir = join(dir, "nrpe.d");
const plugins = join(dir, "plugins");
const argvLog = join(dir, "argv.log");

function plugin(name: string, body: string): string {
  const p = join(plugins, name);
  writeFileSync(p, `#!/bin/sh\n${body}\n`);
  chmodSync(p, 0o755);
  return p;
}

before(() => {
  mkdirSync(confDir, { recursive: true });
  mkdirSync(plugins, { recursive: true });
  const ok = plugin("check_ok", `echo "OK - all fine|load1=0.5;1;2 load5=0.4;1;2"`);
  const warn = plugin("check_warn", `echo "WARNING - load is 1.5|load1=1.5;1;2"\nexit 1`);
  const crit = plugin("check_crit", `echo "CRITICAL - disk full"\necho "/var 100%"\necho "/tmp 99%|var=100% tmp=99%"\necho "home=10%"\nexit 2`);
  const unknown = plugin("check_unknown", `echo "UNKNOWN - cannot tell"\nexit 3`);
  const odd = plugin("check_odd", `echo "weird exit"\nexit 7`);
  const slow = plugin("check_slow", `sleep 30\necho "OK - late"`);
  const silent = plugin("check_silent", `exit 0`);
  // Records its argv one per line, so tests see exactly what the agent passed.
  const args = plugin("check_args", `: > ${argvLog}\nfor a in "$@"; do printf '%s\\n' "$a" >> ${argvLog}; done\necho "OK - $# args"`);
  writeFileSync(
    join(confDir, "base.cfg"),
    [
      "# checks for every node",
      "",
      `command[check_ok]=${ok}`,
      `command[check_warn] = ${warn}`,
      `command[check_crit]=${crit}`,
      `command[check_unknown]=${unknown}`,
      `command[check_odd]=${odd}`,
      `command[check_slow]=${slow}`,
      `command[check_silent]=${silent}`,
      `command[check_missing]=${join(plugins, "does_not_exist")}`,
      `command[check_args]=${args} -w $ARG1$ -c "$ARG2$" '$literal' x\\ y $ARG3$`,
      `command[check_pipe]=${ok} | grep OK`,
      "allowed_hosts=127.0.0.1",
    ].join("\n"),
  );
  writeFileSync(join(confDir, "broken.cfg"), "command[bad name]=/bin/true\nthis line is wrong\ncommand[check_empty]=\n");
  writeFileSync(join(confDir, "ignored.txt"), "command[check_txt]=/bin/true\n");
});
after(() => rmSync(dir, { recursive: true, force: true }));

interface Outcome {
  status: number;
  message: string;
  data: Record<string, unknown>;
}

async function run(data: Record<string, unknown>, config: Record<string, unknown> = { conf_dir: confDir }, ctx?: TestContext): Promise<Outcome> {
  const agent = createNrpeAgent();
  try {
    const input = validateInput(nrpeDDL, "runcommand", data);
    const out = await agent.actions.runcommand(input as never, ctx ?? makeContext({ agent: "nrpe", action: "runcommand", config }));
    return { status: Status.OK, message: "OK", data: out };
  } catch (e) {
    if (e instanceof RpcError) return { status: e.status, message: e.message, data: e.data };
    throw e;
  }
}

describe("nrpe.d parsing", () => {
  test("command definitions, other settings, comments and blank lines; *.cfg only", () => {
    const cfg = loadNrpeConfig(confDir);
    assert.deepEqual([...cfg.commands.keys()].sort(), ["check_args", "check_crit", "check_missing", "check_odd", "check_ok", "check_pipe", "check_silent", "check_slow", "check_unknown", "check_warn"]);
    assert.equal(cfg.commands.get("check_warn")!.line, join(plugins, "check_warn"));
    assert.match(cfg.commands.get("check_ok")!.source, /base\.cfg:3$/);
  });

  test("bad lines are reported with file and line, and do not hide the good ones", () => {
    const cfg = loadNrpeConfig(confDir);
    assert.equal(cfg.problems.length, 3, cfg.problems.join("\n"));
    assert.match(cfg.problems[0]!, /broken\.cfg:1: command name "bad name" must match/);
    assert.match(cfg.problems[1]!, /broken\.cfg:2: expected command\[name\]=command line or setting=value/);
    assert.match(cfg.problems[2]!, /broken\.cfg:3: command\[check_empty\] has an empty command line/);
  });

  test("malformed brackets, duplicates (the later wins), a missing directory", () => {
    const cfg = parseNrpeConfig("command[a=/bin/true\ncommand[x]=/bin/a\ncommand[x]=/bin/b\n", "t.cfg");
    assert.match(cfg.problems[0]!, /t\.cfg:1: malformed command definition/);
    assert.match(cfg.problems[1]!, /t\.cfg:3: command\[x\] is defined again \(first at t\.cfg:2\)/);
    assert.equal(cfg.commands.get("x")!.line, "/bin/b");
    const none = loadNrpeConfig(join(dir, "nope"));
    assert.equal(none.commands.size, 0);
    assert.match(none.problems[0]!, /cannot read the NRPE configuration directory/);
  });
});

describe("$ARGn$ and splitting without a shell", () => {
  test("arguments split on '!' and replace $ARGn$; missing ones become empty", () => {
    assert.deepEqual(splitArgs("5!10!/var"), ["5", "10", "/var"]);
    assert.deepEqual(splitArgs(""), []);
    assert.deepEqual(splitArgs(undefined), []);
    assert.equal(substituteArgs("check -w $ARG1$ -c $ARG2$ -p $ARG3$", ["5", "10"]), "check -w 5 -c 10 -p ");
    assert.equal(substituteArgs("x $ARG10$ $ARG1$", ["a", "", "", "", "", "", "", "", "", "j"]), "x j a");
  });

  test("words as sh would split them: quotes, backslashes, unquoted arguments split on spaces", () => {
    assert.deepEqual(splitCommandLine(`/p -a 'one two' "three four" five\\ six "a\\"b" #comment`), ["/p", "-a", "one two", "three four", "five six", 'a"b']);
    assert.deepEqual(commandArgv(`/p $ARG1$ "$ARG1$"`, ["-w 1 -c 2"]), ["/p", "-w", "1", "-c", "2", "-w 1 -c 2"]);
    assert.deepEqual(commandArgv(`/p '$ARG1$'`, ["x"]), ["/p", "x"]);
  });

  test("definitions that need a shell are refused with a reason", () => {
    for (const line of ["/p | grep x", "/p > /tmp/f", "/p; rm -rf /", "/p && /q", "/p $HOME", "/p `id`", '/p "$(id)"', "/p 'open", 'VAR=1 /p', "(/p)", "   "]) {
      assert.throws(() => splitCommandLine(line), /needs a shell|unterminated|names no program|variable assignment/, line);
    }
  });

  test("every NRPE metacharacter in an argument is refused, as are too many arguments", () => {
    for (const c of NASTY_METACHARS) {
      assert.match(argumentsProblem(["fine", `a${c}b`]) ?? "", /argument 2 contains the shell metacharacter/, JSON.stringify(c));
    }
    assert.equal(argumentsProblem(["-w", "80%", "/var/log", "a b", "x=y", "~user", "*"]), undefined);
    assert.match(argumentsProblem(Array.from({ length: 17 }, () => "a")) ?? "", /too many arguments/);
  });

  test("plugin output: text, long output and perfdata across lines", () => {
    assert.deepEqual(parsePluginOutput("OK - fine|a=1 b=2\n"), { output: "OK - fine", perfdata: "a=1 b=2" });
    assert.deepEqual(parsePluginOutput("CRIT\n/var 100%\n/tmp 99%|var=100% tmp=99%\nhome=10%\n"), { output: "CRIT\n/var 100%\n/tmp 99%", perfdata: "var=100% tmp=99% home=10%" });
    assert.deepEqual(parsePluginOutput("no perfdata"), { output: "no perfdata", perfdata: "" });
  });
});

describe("runcommand with real plugins", () => {
  test("OK is an OK reply with output and perfdata", async () => {
    const r = await run({ command: "check_ok" });
    assert.equal(r.status, Status.OK, r.message);
    assert.deepEqual(r.data, { command: "check_ok", exitcode: 0, output: "OK - all fine", perfdata: "load1=0.5;1;2 load5=0.4;1;2" });
  });

  test("WARNING, CRITICAL and UNKNOWN are failed replies named after the state, carrying the result", async () => {
    const w = await run({ command: "check_warn" });
    assert.equal(w.status, Status.Aborted);
    assert.equal(w.message, "WARNING");
    assert.deepEqual(w.data, { command: "check_warn", exitcode: 1, output: "WARNING - load is 1.5", perfdata: "load1=1.5;1;2" });
    const c = await run({ command: "check_crit" });
    assert.equal(c.message, "CRITICAL");
    assert.equal(c.data.exitcode, 2);
    assert.equal(c.data.output, "CRITICAL - disk full\n/var 100%\n/tmp 99%");
    assert.equal(c.data.perfdata, "var=100% tmp=99% home=10%");
    const u = await run({ command: "check_unknown" });
    assert.equal(u.message, "UNKNOWN");
    assert.equal(u.data.exitcode, 3);
  });

  test("an exit code outside 0-3, a missing program, no output and a timeout are UNKNOWN", async () => {
    const odd = await run({ command: "check_odd" });
    assert.equal(odd.data.exitcode, 3);
    assert.match(String(odd.data.output), /weird exit \(plugin exited with 7, reported as UNKNOWN\)/);
    const missing = await run({ command: "check_missing" });
    assert.equal(missing.data.exitcode, 3);
    assert.match(String(missing.data.output), /cannot run .*does_not_exist: no such file/);
    const silent = await run({ command: "check_silent" });
    assert.equal(silent.status, Status.OK);
    assert.equal(silent.data.output, "(No output returned from plugin)");
    const slow = await run({ command: "check_slow" }, { conf_dir: confDir, timeout: 0.3 });
    assert.equal(slow.data.exitcode, 3);
    assert.match(String(slow.data.output), /UNKNOWN: command timed out after 0\.3 seconds/);
  });

  test("a cancelled request stops the plugin and replies Aborted", async () => {
    const ctx = makeContext({ agent: "nrpe", action: "runcommand", config: { conf_dir: confDir } });
    const pending = run({ command: "check_slow" }, undefined, ctx);
    setImmediate(() => ctx.abort(new Error("server stopping")));
    const r = await pending;
    assert.equal(r.status, Status.Aborted);
    assert.match(r.message, /cancelled/);
  });

  test("arguments land in argv exactly, without a shell", async () => {
    // '$' is a metacharacter: an argument cannot smuggle in another $ARGn$
    assert.equal((await run({ command: "check_args", args: "80%!$ARG1$" })).status, Status.InvalidData);
    const ok = await run({ command: "check_args", args: "80%!90%!/var/log *" });
    assert.equal(ok.status, Status.OK, ok.message);
    assert.deepEqual(readFileSync(argvLog, "utf8").split("\n").slice(0, -1), ["-w", "80%", "-c", "90%", "$literal", "x y", "/var/log", "*"]);
  });

  test("shell metacharacters in arguments are refused by the DDL and by the agent itself", async () => {
    const canary = join(dir, "pwned");
    for (const args of [`x;touch ${canary}`, `x|touch ${canary}`, `\`touch ${canary}\``, `$(touch ${canary})`, `x\ntouch ${canary}`, `a'b`]) {
      const r = await run({ command: "check_args", args });
      assert.equal(r.status, Status.InvalidData, args);
    }
    // the handler checks again, for a request that skipped DDL validation
    const agent = createNrpeAgent();
    await assert.rejects(
      async () => agent.actions.runcommand({ command: "check_args", args: `x;touch ${canary}` }, makeContext({ config: { conf_dir: confDir } })),
      (e: unknown) => e instanceof RpcError && e.status === Status.InvalidData && /metacharacter ";"/.test(e.message) && (e.data as { exitcode?: number }).exitcode === 3,
    );
    assert.equal(existsSync(canary), false);
  });

  test("unknown command: UNKNOWN with the defined commands and the configuration's problems", async () => {
    const r = await run({ command: "check_nope" });
    assert.equal(r.status, Status.Aborted);
    assert.equal(r.data.exitcode, 3);
    assert.match(r.message, /no such command: check_nope in .*\(defined: check_args, check_crit/);
    assert.match(r.message, /broken\.cfg:1/);
  });

  test("a definition that needs a shell is UNKNOWN, naming its file and line", async () => {
    const r = await run({ command: "check_pipe" });
    assert.equal(r.data.exitcode, 3);
    assert.match(r.message, /command\[check_pipe\] at .*base\.cfg:\d+ cannot run: it uses "\|", which needs a shell/);
  });

  test("bad command names and arguments when the node refuses them", async () => {
    for (const command of ["../etc/passwd", "check load", "x;y", ""]) {
      const r = await run({ command });
      assert.ok(r.status === Status.InvalidData || r.status === Status.MissingData, command);
    }
    const r = await run({ command: "check_args", args: "1" }, { conf_dir: confDir, allow_arguments: false });
    assert.equal(r.status, Status.InvalidData);
    assert.match(r.message, /allow_arguments is false/);
    const bad = await run({ command: "check_ok" }, { conf_dir: confDir, timeout: "soon" });
    assert.equal(bad.status, Status.UnknownError);
  });

  test("plugins get a small environment, not the daemon's", async () => {
    process.env.MUSTER_SECRET_FOR_TEST = "s3cret";
    try {
      const p = plugin("check_env", `env > ${join(dir, "env.txt")}\necho OK`);
      writeFileSync(join(confDir, "env.cfg"), `command[check_env]=${p}\n`);
      const r = await run({ command: "check_env" });
      assert.equal(r.status, Status.OK, r.message);
      const env = readFileSync(join(dir, "env.txt"), "utf8");
      assert.doesNotMatch(env, /s3cret/);
      assert.match(env, /^PATH=/m);
    } finally {
      delete process.env.MUSTER_SECRET_FOR_TEST;
    }
  });
});
