import { test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { helpPath, storedHelp } from "../../src/cli/help-replay.cjs";
import { subcommandsOf } from "../../src/cli/help-texts.js";
import { tempDir } from "../support/collective.js";

// What main.cts and main.ts replay, and what they leave to commander (src/cli/help-replay.cts).
// test/cli/help.test.ts proves that the stored texts read as commander renders them.

test("helpPath takes `[path] --help`, `[path] -h` and `help <command>`, and nothing else", () => {
  assert.equal(helpPath(["--help"]), "");
  assert.equal(helpPath(["-h"]), "");
  assert.equal(helpPath(["provision", "retry", "--help"]), "provision retry");
  assert.equal(helpPath(["broker", "-h"]), "broker");
  assert.equal(helpPath(["help", "find"]), "find");
  for (const other of [[], ["find"], ["help"], ["help", "provision", "retry"], ["find", "--json", "--help"], ["find", "--help", "x"], ["--help", "--version"], ["FIND", "--help"], ["../x", "--help"], ["find", "-W", "--help"]]) {
    assert.equal(helpPath(other), undefined, JSON.stringify(other));
  }
});

test("storedHelp replays a stored text, and leaves a missing, damaged or foreign file and an unknown path to commander", (t) => {
  const dir = tempDir("help-replay");
  t.after(() => dir.remove());
  const file = join(dir.path, "help.json");
  const env = {};
  assert.equal(storedHelp(["--help"], env, file), undefined, "no file");
  writeFileSync(file, JSON.stringify({ "": "Usage: muster\n", find: "Usage: muster find\n", odd: 3, empty: "", constructor: 1 }));
  assert.equal(storedHelp(["--help"], env, file), "Usage: muster\n");
  assert.equal(storedHelp(["help", "find"], env, file), "Usage: muster find\n");
  assert.equal(storedHelp(["find", "--help"], { MUSTER_HELP_REPLAY: "off" }, file), undefined, "turned off");
  for (const path of ["ping", "odd", "empty", "toString", "__proto__"]) assert.equal(storedHelp([path, "--help"], env, file), undefined, path);
  for (const damaged of ["{", "null", "[\"a\"]", "\"text\""]) {
    writeFileSync(file, damaged);
    assert.equal(storedHelp(["--help"], env, file), undefined, damaged);
  }
});

test("subcommandsOf reads the Commands section and leaves commander's help out", () => {
  const text = "Usage: muster broker [options] [command]\n\nOptions:\n  -h, --help  display help\n\nCommands:\n  users [options]  Manage users\n  tls-check        Check\n  help [command]   display help for command\n\nExamples:\n  muster broker users\n";
  assert.deepEqual(subcommandsOf(text), ["users", "tls-check"]);
  assert.deepEqual(subcommandsOf("Usage: muster find [options]\n"), []);
});
