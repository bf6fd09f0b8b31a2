import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

// The client's callers (the CLI, the fleet schedulers, the lab, the provisioner) go through the
// client API, never the raw NATS connection (DESIGN.md: "nobody reaches into internals"). The
// daemons' own transport layers keep theirs. This test reads src/ and fails on a `.nc` use, or an
// import of the NATS client, outside the places allowed below.

const root = fileURLToPath(new URL("../../../src/", import.meta.url));

/** Where `.nc` may appear, and why. */
const NC_ALLOWED: [RegExp, string][] = [
  [/^client\//, "the client itself"],
  [/^server\//, "the node daemon's transport (host, phases)"],
  [/^emulator\/emulator\.ts$/, "the emulator's transport (one NodeHost for many nodes)"],
  [/^registry\/(receiver|daemon)\.ts$/, "the registry's receiver"],
  [/^security\/audit\.ts$/, "the audit publisher"],
];

/** Caller folders that must not import the NATS client at all. */
const CALLERS = /^(cli|fleet|lab)\//;
const NATS_IMPORT_ALLOWED: [RegExp, string][] = [
  [/^cli\/commands\/doctor\.ts$/, "diagnoses the broker connection itself, before any client exists"],
  [/^lab\/nats\.ts$/, "starts nats-server"],
];

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? files(p) : p.endsWith(".ts") ? [p] : [];
  });
}

/** The code of a file with comments blanked out (a comment may mention client.nc). */
function code(path: string): string[] {
  return readFileSync(path, "utf8")
    .replace(/\/\*[\s\S]*?\*\//g, (c) => c.replace(/[^\n]/g, " "))
    .split("\n")
    .map((l) => l.replace(/(^|[^:"'`])\/\/.*$/, "$1"));
}

const sources = files(root).map((p) => ({ rel: relative(root, p).split("\\").join("/"), lines: code(p) }));

test("the tree is where this test expects it", () => {
  assert.ok(sources.some((s) => s.rel === "client/client.ts"), `no src/client/client.ts under ${root}`);
});

test("the client's callers never touch the raw connection (.nc)", () => {
  const found: string[] = [];
  for (const s of sources) {
    if (NC_ALLOWED.some(([re]) => re.test(s.rel))) continue;
    s.lines.forEach((l, i) => {
      if (/\.nc\b/.test(l)) found.push(`src/${s.rel}:${i + 1}: ${l.trim()}`);
    });
  }
  assert.deepEqual(found, [], `use the client API (onEvent, onLifecycle, kv, kvIfExists, source) instead:\n${found.join("\n")}`);
});

test("the CLI, the fleet schedulers and the lab do not import the NATS client", () => {
  const found: string[] = [];
  for (const s of sources) {
    if (!CALLERS.test(s.rel) || NATS_IMPORT_ALLOWED.some(([re]) => re.test(s.rel))) continue;
    s.lines.forEach((l, i) => {
      if (/from\s+["']@nats-io\/(transport-node|nats-core)["']/.test(l)) found.push(`src/${s.rel}:${i + 1}: ${l.trim()}`);
    });
  }
  assert.deepEqual(found, [], found.join("\n"));
});

test("every allow-list entry still matches a file (stale entries go)", () => {
  for (const [re, why] of [...NC_ALLOWED, ...NATS_IMPORT_ALLOWED]) assert.ok(sources.some((s) => re.test(s.rel)), `${re} (${why}) matches no file`);
});
