#!/usr/bin/env node
// Runs every compiled test file (dist/test/**/*.test.js) with node's test runner.
// Pass paths or substrings to run a subset: `npm test -- filter provision`.
//
// The suite runs with TLS on: one test PKI (CA, nats-server certificate, client certificate) is made
// for the run in a temp dir, named to every test process in MUSTER_TEST_PKI and handed to muster in
// MUSTER_TLS_CA / MUSTER_TLS_CERT / MUSTER_TLS_KEY (test/support/tls.ts), and removed afterwards.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
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

// The longest files start first, so the suite ends with short ones rather than with the site's
// end-to-end test starting late and running alone. node's own runner sorts the files it is given,
// so this script keeps the slots itself: one `node --test` per file, its output printed whole when
// it ends, with how long it took (what docs/bench.md's suite times use).
// Longest wall time first (run 25's): the heavy files left out are those under a minute, which the
// light slot takes up at the end. puppetdb's test, not on this list then, started as the site ended
// and ran alone for 136 s.
const LONGEST_FIRST = ["test/lab/site-faults", "test/lab/machines.test", "test/agents/provision", "test/provisioner/e2e", "test/web/browser", "test/packaging/deb", "test/puppetdb/puppetdb.test", "test/privileged/hostile", "test/packaging/release-upgrade", "test/fleet/puppet-real", "test/puppet/csr-binding"];
const rank = (f) => {
  const i = LONGEST_FIRST.findIndex((l) => f.includes(l));
  return i === -1 ? LONGEST_FIRST.length : i;
};
// Two slots run any file, longest first. A third runs light files: those that start no
// puppetserver, machine or browser and build no package. The heavy ones spend much of their time
// waiting on JVMs and machines, which leaves a core's worth of room for the light ones; a third
// of the longest heavy files would starve the other two (measured: docs/bench.md#the-test-suite).
const SLOTS = 2;
const LIGHT_SLOTS = 1;
const HEAVY = /test\/(lab\/(site-faults|machines)\.test|agents\/provision|docs\/commands|fleet\/puppet-real|packaging\/|privileged\/hostile|provisioner\/e2e|puppet\/csr-binding|puppetdb\/puppetdb\.test|web\/(api|browser|gone|scale))/;
/**
 * Every skipped test's reason, from the spec reporter's lines (`﹣ name (1.2ms) # reason`; the TAP
 * form `# SKIP reason` too): the summary lists them by reason, so a skip CI should not take shows.
 */
const skipReasons = (text) =>
  [...text.matchAll(/^\s*﹣ .* \([\d.]+m?s\) # (?:SKIP\s*)?(.*)$/gm), ...text.matchAll(/^\s*(?:not )?ok \d+ .* # SKIP\s*(.*)$/gm)].map((m) => m[1].trim() || "(no reason given)");
/** The spec reporter's "failing tests" section (each failure with its error), at most 8 KB of it. */
const failures = (text) => {
  const at = text.indexOf("✖ failing tests:");
  const part = at === -1 ? text.slice(-4000) : text.slice(at);
  return part.length > 8000 ? `${part.slice(0, 8000)}\n… and ${part.length - 8000} more characters, in the file's output above` : part.trimEnd();
};

/** User plus system seconds of the children, from bash's `times` (its second line: `0m12.345s 0m1.234s`). */
const cpuSeconds = (text) => {
  const line = text.trim().split("\n")[1];
  const parts = line ? [...line.matchAll(/(\d+)m([\d.]+)s/g)] : [];
  return parts.length === 2 ? parts.reduce((sum, m) => sum + Number(m[1]) * 60 + Number(m[2]), 0) : undefined;
};
let cpuTotal = 0;
/**
 * Where each file's CPU is counted, when this user may make cgroups: cgroup v1's cpuacct
 * (cpuacct.usage, ns) or cgroup v2 (cpu.stat usage_usec); else undefined and `times` is used.
 */
const cpuGroups = (() => {
  const v1 = "/sys/fs/cgroup/cpuacct";
  const v2 = "/sys/fs/cgroup";
  const kind = existsSync(join(v1, "cpuacct.usage")) ? { root: v1, read: (d) => Number(readFileSync(join(d, "cpuacct.usage"), "utf8")) / 1e9 } : existsSync(join(v2, "cgroup.controllers")) ? { root: v2, read: (d) => Number(/usage_usec (\d+)/.exec(readFileSync(join(d, "cpu.stat"), "utf8"))?.[1]) / 1e6 } : undefined;
  if (!kind) return undefined;
  const base = join(kind.root, `muster-tests-${process.pid}`);
  try {
    mkdirSync(base);
  } catch {
    return undefined;
  }
  let n = 0;
  return {
    make() {
      const d = join(base, String(n++));
      mkdirSync(d);
      return d;
    },
    read(d) {
      try {
        return kind.read(d);
      } catch {
        return undefined;
      }
    },
    drop(d) {
      try {
        rmdirSync(d);
      } catch {
        // a process the file left behind keeps it: left for the run's end
      }
    },
    dropAll() {
      try {
        // a cgroup's directory lists its control files too: only the groups are removed
        for (const d of readdirSync(base, { withFileTypes: true })) if (d.isDirectory()) rmdirSync(join(base, d.name));
        rmdirSync(base);
      } catch {
        // ditto
      }
    },
  };
})();
// "$2": a cgroup directory to join first (see cpuGroups), so the machines and servers the file
// starts are counted too: `times` misses what was killed rather than waited for (a machine's
// power cut takes its container's processes with it)
const RUN_ONE = [
  'if [ -n "$2" ]; then echo $$ > "$2/cgroup.procs" || true; fi',
  'node --test --test-reporter=spec "$1" & pid=$!',
  "trap 'kill -TERM $pid 2>/dev/null' TERM INT",
  "while :; do wait $pid; rc=$?; kill -0 $pid 2>/dev/null || break; done",
  "times >&3",
  "exit $rc",
].join("\n");

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
  const t0 = Date.now();
  const queue = [...files];
  const running = new Set();
  const failed = [];
  const totals = { tests: 0, pass: 0, fail: 0, skipped: 0 };
  /** reason -> how many tests, and the files they are in */
  const skips = new Map();
  let stopping = false;
  const runOne = (file) =>
    new Promise((resolve) => {
      const started = Date.now();
      // a file's output comes whole when it ends (a machines e2e takes minutes): say what runs meanwhile
      process.stdout.write(`▷ ${file} (${files.length - queue.length} of ${files.length})\n`);
      // through bash, which joins the file's cgroup and whose `times` is the fallback: the CPU
      // the file used with everything it started (its servers, JVMs and machines), what the
      // suite's length is made of on 2 cores
      // (a SIGTERM or Ctrl-C to bash is passed on to the test process, and bash waits for it)
      const group = cpuGroups?.make();
      const child = spawn("bash", ["-c", RUN_ONE, "run-test", file, group ?? ""], { stdio: ["ignore", "pipe", "pipe", "pipe"], env: { ...env, PATH: `${dirname(process.execPath)}:${env.PATH ?? ""}` } });
      running.add(child);
      const out = [];
      let times = "";
      child.stdout.on("data", (d) => out.push(d));
      child.stderr.on("data", (d) => out.push(d));
      child.stdio[3].on("data", (d) => (times += d));
      child.once("close", (code) => {
        const counted = group ? cpuGroups.read(group) : undefined;
        if (group) cpuGroups.drop(group);
        // the group holds everything `times` counts and more; a group bash could not join reads 0
        const waited = cpuSeconds(times);
        const cpu = counted !== undefined && Number.isFinite(counted) ? Math.max(counted, waited ?? 0) : waited;
        if (cpu !== undefined) cpuTotal += cpu;
        running.delete(child);
        const text = Buffer.concat(out).toString();
        for (const k of Object.keys(totals)) totals[k] += Number(new RegExp(`^ℹ ${k} (\\d+)$`, "m").exec(text)?.[1] ?? 0);
        if (code !== 0) failed.push({ file, why: failures(text) });
        for (const why of skipReasons(text)) {
          const k = skips.get(why) ?? { n: 0, files: new Set() };
          k.n++;
          k.files.add(file.replace(/^dist\//, "").replace(/\.test\.js$/, ""));
          skips.set(why, k);
        }
        // the file's own summary lines go: the run's totals come at the end
        process.stdout.write(text.replace(/^ℹ (tests|suites|pass|fail|cancelled|skipped|todo|duration_ms) .*\n/gm, ""));
        process.stdout.write(`${code === 0 ? "✔" : "✖"} ${file} (${((Date.now() - started) / 1000).toFixed(1)} s)\n`);
        if (cpu !== undefined) process.stdout.write(`ℹ cpu ${file} ${cpu.toFixed(1)} s\n`);
        resolve();
      });
    });
  // Once no light file is left, the light slot takes the heavy files that are not among the
  // longest: the suite's tail was two slots of heavy files with the third idle (run 15: 2,930 s;
  // the same durations scheduled this way, 2,647 s). The longest start first in the two others.
  const pick = (lightOnly) => {
    if (!lightOnly) return 0;
    const light = queue.findIndex((f) => !HEAVY.test(f));
    return light !== -1 ? light : queue.findIndex((f) => rank(f) === LONGEST_FIRST.length);
  };
  const slot = async (lightOnly) => {
    for (;;) {
      const i = pick(lightOnly);
      if (i === -1 || !queue.length || stopping) return;
      await runOne(queue.splice(i, 1)[0]);
    }
  };
  // Ctrl-C reaches the test processes too (same process group); a SIGTERM is passed on. Either way
  // we wait for them to clean up, then remove the PKI.
  process.on("SIGINT", () => (stopping = true));
  process.on("SIGTERM", () => {
    stopping = true;
    for (const c of running) c.kill("SIGTERM");
  });
  await Promise.all([...Array.from({ length: SLOTS }, () => slot(false)), ...Array.from({ length: LIGHT_SLOTS }, () => slot(true))]);
  process.stdout.write(`ℹ files ${files.length}\nℹ tests ${totals.tests}\nℹ pass ${totals.pass}\nℹ fail ${totals.fail}\nℹ skipped ${totals.skipped}\nℹ duration_ms ${Date.now() - t0}\nℹ cpu_s ${cpuTotal.toFixed(0)}\n`);
  if (skips.size) {
    process.stdout.write("ℹ skipped, by reason:\n");
    for (const [why, k] of [...skips].sort((a, b) => b[1].n - a[1].n || a[0].localeCompare(b[0]))) process.stdout.write(`  ${String(k.n).padStart(3)}  ${why}  (${[...k.files].join(", ")})\n`);
  }
  // a failing file's reasons again, last: in a long run its own output has scrolled far away
  for (const f of failed) process.stdout.write(`\n✖ ${f.file}, why:\n${f.why}\n`);
  if (failed.length) process.stdout.write(`✖ failing files:\n${failed.map((f) => `  ${f.file}`).join("\n")}\n`);
  status = failed.length || stopping ? 1 : 0;
} finally {
  removePki();
  cpuGroups?.dropAll();
}
process.exit(status);
