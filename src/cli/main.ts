#!/usr/bin/env node
import { VERSION } from "../version.js";

// The entry: `--version`, then the compile cache (cache.ts), then the command itself (program.ts).
// Every module loaded before the cache is on is compiled anew at each start, so only these come
// first, and `--version` loads nothing but version.ts.

// `muster find | head` closes our stdout early: that is not an error.
process.stdout.on("error", (e: NodeJS.ErrnoException) => {
  if (e.code === "EPIPE") process.exit(0);
  throw e;
});

// `muster --version` alone answers before anything else loads (scripts and health checks call it).
if (process.argv.length === 3 && (process.argv[2] === "-v" || process.argv[2] === "--version")) {
  process.stdout.write(`${VERSION}\n`);
  process.exit(0);
}

(await import("./cache.js")).enableCompileCache();
await import("./program.js");
