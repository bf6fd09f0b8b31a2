import { after, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { cleanEnv, runCli, tempDir } from "../support/collective.js";

// stdout is the command's output alone: scripts parse `--json`. A library's console.log (nats.js
// prints "reader closed" with the error when a connection's reader fails, as in a broker's power
// cut) goes to stderr. The library is stood in for by a module loaded before the CLI that prints
// as the process exits: after the command has run, whenever that is.

const tmp = tempDir("stdout");
after(() => tmp.remove());

test("what a library prints with console.log while a command runs goes to stderr, not into its output", async () => {
  const lib = join(tmp.path, "lib-says.mjs");
  writeFileSync(lib, 'process.once("exit", () => { console.log("a library says"); console.info("and more"); });\n');
  // a command that fails (it dials a port nothing listens on): the library speaks after its error
  const r = await runCli(["find", "--broker", "nats://127.0.0.1:1", "--dt", "1"], { env: { ...cleanEnv(join(tmp.path, "config")), NODE_OPTIONS: `--import=${lib}` } });
  assert.equal(r.stdout, "");
  assert.match(r.stderr, /cannot reach the NATS broker at nats:\/\/127\.0\.0\.1:1[^]*a library says\nand more\n/);
});
