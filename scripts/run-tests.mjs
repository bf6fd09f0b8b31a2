#!/usr/bin/env node
// Runs every compiled test file (dist/test/**/*.test.js) with node's test runner.
// Pass paths or substrings to run a subset: `npm test -- filter provision`.
//
// The suite runs with TLS on: one test PKI (CA, nats-server certificate, client certificate) is made
// for the run in a temp dir, named to every test process in MUSTER_TEST_PKI and handed to muster in
// MUSTER_TLS_CA / MUSTER_TLS_CERT / MUSTER_TLS_KEY (test/support/tls.ts), and removed afterwards.
import { mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawn } from "node:child_process";

function walk(dir) {
  let out = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out = out.concat(walk(p));
    else if (name.endsWith(".test.js")) out.push(p);
  }
  return out;
}

// The longest files start first, so two at a time the suite ends with short ones rather than
// with the site's end-to-end test starting late and running alone (docs/bench.md, The suite).
const LONGEST_FIRST = ["test/lab/site-faults", "test/lab/machines", "test/provisioner/e2e", "test/packaging/release-upgrade", "test/web/browser", "test/packaging/deb"];
const rank = (f) => {
  const i = LONGEST_FIRST.findIndex((l) => f.includes(l));
  return i === -1 ? LONGEST_FIRST.length : i;
};

const wanted = process.argv.slice(2);
let files = walk("dist/test").sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
if (wanted.length) files = files.filter((f) => wanted.some((w) => f.includes(w)));
if (files.length === 0) {
  console.error("no test files matched; did you run `npm run build`?");
  process.exit(1);
}

const { createTestPki, testTlsEnv } = await import(new URL("../dist/test/support/tls.js", import.meta.url).href);
const pkiDir = mkdtempSync(join(tmpdir(), "muster-test-pki-run-"));
const removePki = () => rmSync(pkiDir, { recursive: true, force: true });
let status = 1;
try {
  const pki = createTestPki(pkiDir);
  const env = { ...process.env, MUSTER_TEST_PKI: pki.dir, ...testTlsEnv(pki) };
  const child = spawn(process.execPath, ["--test", "--test-concurrency=2", "--test-reporter=spec", ...files], { stdio: "inherit", env });
  // Ctrl-C reaches the test runner itself (same process group); a SIGTERM is passed on. Either way we
  // wait for it to clean up, then remove the PKI.
  process.on("SIGINT", () => undefined);
  process.on("SIGTERM", () => child.kill("SIGTERM"));
  status = await new Promise((resolve) => child.once("close", (code) => resolve(code ?? 1)));
} finally {
  removePki();
}
process.exit(status);
