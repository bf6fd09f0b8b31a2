import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { cleanEnv, cliPath, tempDir } from "../support/collective.js";

// `--version` and every `--help`, at every depth, cost a start-up and nothing more (issue 10,
// bench:cli): they load commander and muster's own option definitions, never the NATS client,
// zod, pino, yaml, fastify... which load only when a command runs. And the help reads exactly as
// pinned in help.snapshot.txt: making commands load lazily must not lose a word of it.
// After an intended change of help text: MUSTER_UPDATE_HELP=1 node scripts/run-tests.mjs cli/help

const here = dirname(fileURLToPath(import.meta.url));
const snapshotFile = resolve(here, "..", "..", "..", "test", "cli", "help.snapshot.txt"); // dist/test/cli -> test/cli
const preload = join(here, "..", "support", "loaded-packages.js");
const ALLOWED = new Set(["commander"]);
const tmp = tempDir("help");
const env = cleanEnv(join(tmp.path, "config"), { MUSTER_BROKER: "nats://127.0.0.1:9" });

function run(args: string[]): Promise<{ code: number | null; stdout: string; packages: string[] }> {
  return new Promise((ok, fail) => {
    const child = spawn(process.execPath, ["--import", preload, cliPath, ...args], { env, cwd: tmpdir(), stdio: ["ignore", "pipe", "pipe"] });
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

/** Subcommand names from a help text's `Commands:` section (commander's own `help` left out). */
const subcommands = (help: string) => [...(help.split(/^Commands:$/m)[1] ?? "").split("\n\n")[0]!.matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]!).filter((n) => n !== "help");

test("--version and every --help load no library but commander, and the help reads as pinned", { timeout: 600_000 }, async (t) => {
  t.after(() => tmp.remove());
  const version = await run(["--version"]);
  assert.equal(version.code, 0);
  assert.match(version.stdout, /^\d+\.\d+\.\d+/);
  assert.deepEqual(version.packages.filter((p) => !ALLOWED.has(p)), [], "--version");

  // Level by level, each level's commands side by side: fifty start-ups on a busy machine.
  const texts: string[] = [];
  let level: string[][] = [[]];
  while (level.length) {
    const runs = await Promise.all(level.map((path) => run([...path, "--help"])));
    const next: string[][] = [];
    runs.forEach((r, i) => {
      const path = level[i]!;
      assert.equal(r.code, 0, `muster ${path.join(" ")} --help`);
      assert.deepEqual(r.packages.filter((p) => !ALLOWED.has(p)), [], `muster ${path.join(" ")} --help loads only commander`);
      texts.push(`$ muster ${[...path, "--help"].join(" ")}\n${r.stdout}`);
      for (const sub of subcommands(r.stdout)) next.push([...path, sub]);
    });
    level = next;
  }
  const all = texts.join("\n");
  assert.ok(texts.length > 30, `walked ${texts.length} help texts`);
  if (process.env.MUSTER_UPDATE_HELP === "1" || !existsSync(snapshotFile)) writeFileSync(snapshotFile, all);
  assert.equal(all, readFileSync(snapshotFile, "utf8"), "help differs from test/cli/help.snapshot.txt (after an intended change: MUSTER_UPDATE_HELP=1)");
});
