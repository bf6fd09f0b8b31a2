import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { subcommandsOf } from "../../src/cli/help-texts.js";
import { cleanEnv, cliPath, tempDir } from "../support/collective.js";

// `--version` and every `--help`, at every depth, cost a start-up and nothing more (issues 10 and
// 39, bench:cli). A help is replayed from the texts the build stored (src/cli/help-replay.cts),
// loading no package at all; with the replay off, commander renders it from muster's own option
// definitions, never loading the NATS client, zod, pino, yaml, fastify... which load only when a
// command runs. The two read alike, word for word, and as pinned in help.snapshot.txt: making
// commands load lazily, or replaying them, must not lose a word of it.
// After an intended change of help text: MUSTER_UPDATE_HELP=1 node scripts/run-tests.mjs cli/help

const here = dirname(fileURLToPath(import.meta.url));
const snapshotFile = resolve(here, "..", "..", "..", "test", "cli", "help.snapshot.txt"); // dist/test/cli -> test/cli
const preload = join(here, "..", "support", "loaded-packages.js");
const ALLOWED = new Set(["commander"]);
const tmp = tempDir("help");
const env = cleanEnv(join(tmp.path, "config"), { MUSTER_BROKER: "nats://127.0.0.1:9" });

function run(args: string[], replay = true): Promise<{ code: number | null; stdout: string; packages: string[] }> {
  return new Promise((ok, fail) => {
    const childEnv = replay ? env : { ...env, MUSTER_HELP_REPLAY: "off" };
    const child = spawn(process.execPath, ["--import", preload, cliPath, ...args], { env: childEnv, cwd: tmpdir(), stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const t = setTimeout(() => child.kill("SIGKILL"), 120_000);
    child.once("error", fail);
    child.once("close", (code) => {
      clearTimeout(t);
      const line = /^loaded-packages: ?(.*)$/m.exec(stderr);
      if (!line) return fail(new Error(`muster ${args.join(" ")}: no package list on stderr: ${stderr.slice(-500)}`));
      ok({ code, stdout, packages: line[1]!.split(" ").filter(Boolean) });
    });
  });
}

test("--version and every --help load no library but commander, a replayed help none, and both read as pinned", { timeout: 600_000 }, async (t) => {
  t.after(() => tmp.remove());
  const version = await run(["--version"]);
  assert.equal(version.code, 0);
  assert.match(version.stdout, /^\d+\.\d+\.\d+/);
  assert.deepEqual(version.packages.filter((p) => !ALLOWED.has(p)), [], "--version");

  // Level by level, each level's commands side by side: fifty start-ups on a busy machine.
  const texts: string[] = [];
  let level: string[][] = [[]];
  while (level.length) {
    const runs = await Promise.all(level.map(async (path) => ({ replayed: await run([...path, "--help"]), rendered: await run([...path, "--help"], false) })));
    const next: string[][] = [];
    runs.forEach(({ replayed, rendered }, i) => {
      const path = level[i]!;
      const what = `muster ${[...path, "--help"].join(" ")}`;
      assert.equal(rendered.code, 0, `${what}, rendered`);
      assert.deepEqual(rendered.packages, ["commander"], `${what} with the replay off loads commander and no other package`);
      assert.equal(replayed.code, 0, `${what}, replayed`);
      assert.deepEqual(replayed.packages, [], `${what} is replayed: no package loads`);
      assert.equal(replayed.stdout, rendered.stdout, `${what}: the replay reads as commander renders it`);
      texts.push(`$ ${what}\n${replayed.stdout}`);
      for (const sub of subcommandsOf(replayed.stdout)) next.push([...path, sub]);
    });
    level = next;
  }
  const all = texts.join("\n");
  assert.ok(texts.length > 30, `walked ${texts.length} help texts`);
  if (process.env.MUSTER_UPDATE_HELP === "1" || !existsSync(snapshotFile)) writeFileSync(snapshotFile, all);
  assert.equal(all, readFileSync(snapshotFile, "utf8"), "help differs from test/cli/help.snapshot.txt (after an intended change: MUSTER_UPDATE_HELP=1)");
});

test("`help <command>`, `-h`, main.js and a terminal 200 columns wide print the stored text", { timeout: 120_000 }, async () => {
  const stored = await run(["provision", "--help"]);
  const esmEntry = join(dirname(cliPath), "main.js"); // the ES module entry, which `node dist/src/cli/main.js` runs
  const viaEsm = await new Promise<{ stdout: string; packages: string }>((ok, fail) => {
    const child = spawn(process.execPath, ["--import", preload, esmEntry, "provision", "--help"], { env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.once("error", fail);
    child.once("close", () => ok({ stdout, packages: /^loaded-packages: ?(.*)$/m.exec(stderr)?.[1] ?? "(no list)" }));
  });
  assert.equal(viaEsm.packages, "", "main.js replays the help too");
  assert.equal(viaEsm.stdout, stored.stdout);
  for (const args of [["help", "provision"], ["provision", "-h"]]) {
    const [replayed, rendered] = await Promise.all([run(args), run(args, false)]);
    assert.deepEqual(replayed.packages, [], `muster ${args.join(" ")} is replayed`);
    assert.equal(replayed.stdout, stored.stdout, `muster ${args.join(" ")}, replayed`);
    assert.equal(rendered.stdout, stored.stdout, `muster ${args.join(" ")}, rendered by commander`);
  }
  // commander would lay help out to the terminal's width: on a pty of 200 columns it keeps to 80,
  // for the top level as for a command.
  const top = await run(["--help"]);
  for (const [args, expected] of [[["provision", "--help"], stored.stdout], [["--help"], top.stdout]] as const) {
    const shell = `stty cols 200 rows 50; MUSTER_HELP_REPLAY=off ${JSON.stringify(process.execPath)} ${JSON.stringify(cliPath)} ${args.join(" ")}`;
    const onTerminal = await new Promise<string>((ok, fail) => {
      const child = spawn("script", ["-qec", shell, "/dev/null"], { env, stdio: ["ignore", "pipe", "inherit"] });
      let out = "";
      child.stdout.on("data", (d: Buffer) => (out += d.toString()));
      child.once("error", fail);
      child.once("close", (code) => (code === 0 ? ok(out.replace(/\r\n/g, "\n")) : fail(new Error(`script exited ${code}: ${out}`))));
    });
    assert.ok(expected.split("\n").some((l) => l.length > 60), `muster ${args.join(" ")}: the help has long lines that a wider layout would change`);
    assert.equal(onTerminal, expected, `muster ${args.join(" ")}, rendered on a 200-column terminal, as stored`);
  }
});

test("a stored help or the version to a reader that has gone exits 0 and says nothing (`muster --help | head -1`)", { timeout: 120_000 }, async () => {
  for (const args of [["--help"], ["--version"], ["provision", "--help"]]) {
    const r = await new Promise<{ code: number | null; stderr: string }>((ok, fail) => {
      const child = spawn(process.execPath, [cliPath, ...args], { env, stdio: ["ignore", "pipe", "pipe"] });
      child.stdout.destroy(); // the reader leaves before the child has started: its write gets EPIPE
      let stderr = "";
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
      child.once("error", fail);
      child.once("close", (code) => ok({ code, stderr }));
    });
    assert.equal(r.code, 0, `muster ${args.join(" ")}: ${r.stderr}`);
    assert.equal(r.stderr, "", `muster ${args.join(" ")} says nothing`);
  }
});
