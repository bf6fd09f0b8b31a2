#!/usr/bin/env node
// Part of `npm run build`: renders every `muster ... --help` through commander and stores the texts
// in dist/src/cli/help.json, which `muster` replays instead of loading commander for a help
// (src/cli/help-replay.cts). Written to a temporary name and renamed: a build stopped half-way
// leaves the old file or none, and without one every help goes to commander.
import { renameSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const dist = new URL("../dist/src/", import.meta.url);
const { renderHelpTexts } = await import(new URL("cli/help-texts.js", dist).href);
const { HELP_TEXTS_FILE } = await import(new URL("cli/help-replay.cjs", dist).href);

const out = HELP_TEXTS_FILE;
const texts = await renderHelpTexts(fileURLToPath(new URL("cli/main.js", dist)));
writeFileSync(`${out}.tmp`, `${JSON.stringify(texts)}\n`);
renameSync(`${out}.tmp`, out);
