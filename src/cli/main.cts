#!/usr/bin/env node
// `muster` as installed (package.json `bin`, /usr/bin/muster): `--version` and a help the build
// stored are answered here, in CommonJS, before Node starts its ES module loader, which alone
// costs a few milliseconds of a 25 ms start (issue 39: every `--help` within 1.25x of `node -e
// 0`). Everything else is main.ts, the program's ES module entry.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { storedHelp, writeOut } from "./help-replay.cjs";

// Each answer is written with write(2) and the process ends by itself: nothing else is pending.
const argv = process.argv.slice(2);
const help = storedHelp(argv, process.env);
if (argv.length === 1 && (argv[0] === "-v" || argv[0] === "--version")) {
  // the one version number, package.json's, as version.ts reads it (dist/src/cli -> the package)
  writeOut(`${(JSON.parse(readFileSync(join(__dirname, "..", "..", "..", "package.json"), "utf8")) as { version: string }).version}\n`);
} else if (help !== undefined) writeOut(help);
else void import("./main.js");
