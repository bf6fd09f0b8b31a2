import { test } from "node:test";
import assert from "node:assert/strict";
import { extractCommands, matchOutput, splitComment } from "../support/doc-commands.js";

// The doc-command conventions (docs/README.md) as the extractor reads them.

const md = (...lines: string[]) => lines.join("\n");

test("sh blocks: a command per line, descriptions and exit codes from the trailing comment", () => {
  const { commands, problems } = extractCommands(
    "x.md",
    md("text", "```sh", "muster ping", "# a comment line", "", "muster find -S 'a # b'   # what it does", "muster find -F x=   # exit 1: bad filter", "muster rpc a b \\", "  c=1", "```"),
  );
  assert.deepEqual(problems, []);
  assert.deepEqual(
    commands.map((c) => [c.line, c.text, c.comment, c.exit]),
    [
      [3, "muster ping", undefined, undefined],
      [6, "muster find -S 'a # b'", "what it does", undefined],
      [7, "muster find -F x=", "exit 1: bad filter", 1],
      [8, "muster rpc a b c=1", undefined, undefined],
    ],
  );
});

test("console blocks: `$ ` commands with the output after them; illustrative marker; indented blocks", () => {
  const { commands, problems } = extractCommands(
    "x.md",
    md("<!-- illustrative -->", "", "```console", "$ muster find   # exit code 2", "a", "b", "$ muster ping", "```", "- item:", "  ```console", "  $ muster x", "    indented out", "  ```"),
  );
  assert.deepEqual(problems, []);
  assert.deepEqual(
    commands.map((c) => [c.text, c.exit, c.output, c.illustrative]),
    [
      ["muster find", 2, ["a", "b"], true],
      ["muster ping", undefined, undefined, true],
      ["muster x", undefined, ["  indented out"], false],
    ],
  );
});

test("untagged blocks with commands, prompts in sh blocks and stray console output are problems; text blocks are not read", () => {
  const { commands, problems } = extractCommands("x.md", md("```", "muster ping", "```", "```sh", "$ muster ping", "```", "```console", "out", "```", "```text", "muster puppet runall N [filters]", "```"));
  assert.equal(problems.length, 3, problems.join("\n"));
  assert.match(problems[0]!, /^x\.md:2: an untagged block/);
  assert.match(problems[1]!, /^x\.md:5: `\$ ` prompt in a sh block/);
  assert.match(problems[2]!, /^x\.md:8: output before any/);
  assert.deepEqual(commands.map((c) => c.text), ["muster ping"]);
});

test("splitComment ignores # inside quotes and words", () => {
  assert.deepEqual(splitComment(`muster rpc x y='#1' z="a #b" w=c#d  # desc`), { text: `muster rpc x y='#1' z="a #b" w=c#d`, comment: "desc" });
  assert.deepEqual(splitComment("muster ping"), { text: "muster ping", comment: undefined });
});

test("matchOutput: exact lines, ... within a line and as lines, and useful differences", () => {
  assert.equal(matchOutput(["a", "b"], "a\nb\n\n"), undefined);
  assert.equal(matchOutput(["t=...ms", "...", "end"], "t=12.5ms\nx\ny\nend\n"), undefined);
  assert.equal(matchOutput(["a", "...", "b"], "a\nb"), undefined);
  assert.match(matchOutput(["a", "c"], "a\nb")!, /shown line "c" does not match actual line "b"/);
  assert.match(matchOutput(["a"], "a\nmore")!, /printed more than shown:\nmore/);
  assert.match(matchOutput(["a", "b"], "a")!, /\(end of output\)/);
  assert.notEqual(matchOutput(["a.c"], "abc"), undefined, "a dot is a dot, not a regex");
});
