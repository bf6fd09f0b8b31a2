#!/usr/bin/env node
import { enableCompileCache } from "./cache.js";
import { VERSION } from "../version.js";

// The entry: only what must come before the compile cache is on (cache.ts) and
// `--version`. Every module imported here is compiled anew at each start, so the command itself
// (program.ts) and everything it loads come after.

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

enableCompileCache();
await import("./program.js");
