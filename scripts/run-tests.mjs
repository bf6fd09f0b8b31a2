#!/usr/bin/env node
// Runs every compiled test file (dist/test/**/*.test.js) with node's test runner.
// Pass paths or substrings to run a subset: `npm test -- filter provision`.
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { spawnSync } from "node:child_process";

function walk(dir) {
  let out = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out = out.concat(walk(p));
    else if (name.endsWith(".test.js")) out.push(p);
  }
  return out;
}

const wanted = process.argv.slice(2);
let files = walk("dist/test").sort();
if (wanted.length) files = files.filter((f) => wanted.some((w) => f.includes(w)));
if (files.length === 0) {
  console.error("no test files matched; did you run `npm run build`?");
  process.exit(1);
}
const res = spawnSync(process.execPath, ["--test", "--test-concurrency=2", "--test-reporter=spec", ...files], { stdio: "inherit" });
process.exit(res.status ?? 1);
