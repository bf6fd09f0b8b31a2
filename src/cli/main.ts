#!/usr/bin/env node
import { VERSION } from "../version.js";
import { storedHelp } from "./help-replay.cjs";

// The entry: `--version`, then the compile cache (cache.ts), then the command itself (program.ts).
// `muster` as installed starts at main.cts, which answers `--version` and a stored help before
// any ES module loads, and imports this module for everything else; this one answers them too,
// for `node dist/src/cli/main.js` (the tests, the lab).
// Every module loaded before the cache is on is compiled anew at each start, so only these come
// first, and `--version` loads nothing but version.ts (and the few lines of help-replay.cts).

// `muster find | head` closes our stdout early: that is not an error.
process.stdout.on("error", (e: NodeJS.ErrnoException) => {
  if (e.code === "EPIPE") process.exit(0);
  throw e;
});

// stdout carries the command's output alone (`--json` is parsed by scripts): what a library prints
// with console.log goes to stderr. nats.js does, when a connection's reader fails ("reader closed"
// during a broker's power cut), and a `muster health --json` read that way once was two documents.
console.log = console.info = console.debug = console.error;

// `muster --version` alone answers before anything else loads (scripts and health checks call it).
if (process.argv.length === 3 && (process.argv[2] === "-v" || process.argv[2] === "--version")) {
  process.stdout.write(`${VERSION}\n`);
  process.exit(0);
}

// A help that the build stored is printed as stored (help-replay.cts): no commander, no command.
const help = storedHelp(process.argv.slice(2), process.env);
if (help !== undefined) {
  process.stdout.write(help);
  process.exit(0);
}

(await import("./cache.js")).enableCompileCache();
await import("./program.js");
