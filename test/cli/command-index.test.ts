import { test } from "node:test";
import assert from "node:assert/strict";
import { Help } from "commander";
import { commands } from "../../src/cli/commands/index.js";

// `muster --help` lists every command from src/cli/commands/index.ts without loading the command
// modules (issue 10, start-up). The modules stay the definitions: each entry must say, word for
// word, what its module declares, as commander would list it, so the two cannot drift apart.

test("every command index entry says what its module declares", async () => {
  const help = new Help();
  const wrong: string[] = [];
  for (const [name, entry] of Object.entries(commands)) {
    const cmd = (await entry.load())();
    const declared = { name: cmd.name(), term: help.subcommandTerm(cmd), description: help.subcommandDescription(cmd) };
    const indexed = { name, term: `${name}${entry.usage ? ` ${entry.usage}` : ""}`, description: entry.description };
    try {
      assert.deepEqual(indexed, declared);
    } catch {
      wrong.push(`${name}: index ${JSON.stringify(indexed)}\n  module ${JSON.stringify(declared)}`);
    }
  }
  assert.deepEqual(wrong, [], "src/cli/commands/index.ts differs from the command modules");
});
