import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ErrorCodes, MusterError } from "../src/errors.js";
import { repoRoot } from "./support/collective.js";

// docs/errors.md is the operator's list of MUSTER_* codes: it must name exactly the codes
// src/errors.ts defines, each in its own table row.

const doc = readFileSync(join(repoRoot, "docs", "errors.md"), "utf8");
const rows = new Map(
  doc
    .split("\n")
    .map((line) => /^\|\s*`(MUSTER_[A-Z_]+)`\s*\|(.*)$/.exec(line))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => [m[1]!, m[2]!]),
);

test("docs/errors.md has a row for every MUSTER_* code", () => {
  const missing = Object.keys(ErrorCodes).filter((c) => !rows.has(c));
  assert.deepEqual(missing, [], `add these codes to docs/errors.md: ${missing.join(", ")}`);
});

test("docs/errors.md lists no code that src/errors.ts does not define", () => {
  const stale = [...rows.keys()].filter((c) => !(c in ErrorCodes));
  assert.deepEqual(stale, [], `remove or rename in docs/errors.md: ${stale.join(", ")}`);
});

test("each row gives the code's meaning as src/errors.ts states it", () => {
  for (const [code, meaning] of Object.entries(ErrorCodes)) assert.ok(rows.get(code)?.includes(meaning), `docs/errors.md row for ${code} should say "${meaning}"`);
});

test("every MusterError code is one of the catalogue's", () => {
  const e = new MusterError("MUSTER_USAGE", "x");
  assert.equal(e.code, "MUSTER_USAGE");
  assert.equal(e.name, "MusterError");
  assert.ok(Object.keys(ErrorCodes).every((c) => /^MUSTER_[A-Z_]+$/.test(c)));
});
