// `npm run bench:cli`: what a `muster` command costs as a whole process, beside floors measured
// in the same run (docs/bench.md, "CLI start-up").
//
//   node dist/bench/cli-start.js [--nodes 10000] [--rounds 7] [--warmup 1] [--out bench/results/cli-start.json]
//
// Start-up: `muster --version`, `muster --help` and `muster <command> --help` for every command
// against `node -e 0`. Discovery: `muster find` against N emulated nodes (bench/nodes.ts, the
// emulator behind one connection) against bare-NATS discovery (bench/discover-floor.ts: connect,
// publish one real signed discovery request, exit at the N-th reply). Every run is a fresh
// process, timed from spawn to exit; rounds interleave floor and muster so both see the same
// machine state. The table gives medians; ratios are muster's median over its floor's.

import { fork, spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { buildRequest } from "../src/client/request.js";
import { startNats, type NatsHandle } from "../src/lab/nats.js";
import { encodeRequest } from "../src/protocol/envelope.js";
import { subjects } from "../src/protocol/subjects.js";
import { emptyFilter } from "../src/protocol/types.js";
import { loadOrCreateSigningKey } from "../src/security/keys.js";
import { benchDir as here, cliPath, repoRoot } from "./paths.js";

const COLLECTIVE = "benchcli";

const { values: args } = parseArgs({
  options: {
    nodes: { type: "string", default: "10000" },
    rounds: { type: "string", default: "7" },
    warmup: { type: "string", default: "1" },
    "no-find": { type: "boolean", default: false },
    out: { type: "string", default: join(repoRoot, "bench", "results", "cli-start.json") },
    help: { type: "boolean", short: "h", default: false },
  },
});
if (args.help) {
  process.stdout.write(readFileSync(fileURLToPath(import.meta.url), "utf8").split("\n").slice(0, 12).join("\n") + "\n");
  process.exit(0);
}
const nodes = Number(args.nodes);
const rounds = Number(args.rounds);
const warmup = Number(args.warmup);
if (!Number.isInteger(nodes) || nodes < 1 || !Number.isInteger(rounds) || rounds < 1 || !Number.isInteger(warmup) || warmup < 0) {
  process.stderr.write("bench: --nodes, --rounds and --warmup take whole numbers\n");
  process.exit(64);
}
const loadavgAtStart = loadavg();
const children = new Set<ChildProcess>();
process.on("exit", () => {
  for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
});

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.ceil(s.length / 2) - 1]! : NaN;
};
const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;
const f = (n: number) => (Number.isFinite(n) ? n.toFixed(0) : "n/a");

interface Run {
  ms: number;
  code: number | null;
  stdout: string;
  stderr: string;
}

/** One whole process, timed from spawn to exit. */
function timed(argv: string[], env: NodeJS.ProcessEnv): Promise<Run> {
  return new Promise((ok, fail) => {
    const t0 = performance.now();
    const child = spawn(process.execPath, argv, { env, stdio: ["ignore", "pipe", "pipe"] });
    children.add(child);
    let stdout = "";
    let stderr = "";
    child.stdout!.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
    child.once("error", fail);
    child.once("close", (code) => {
      children.delete(child);
      ok({ ms: performance.now() - t0, code, stdout, stderr });
    });
  });
}

async function must(argv: string[], env: NodeJS.ProcessEnv, check: (r: Run) => boolean): Promise<number> {
  const r = await timed(argv, env);
  if (!check(r)) throw new Error(`node ${argv.join(" ")} exited ${r.code}: ${r.stderr.slice(-600) || r.stdout.slice(-600)}`);
  return r.ms;
}

/** The command names `muster --help` lists. */
async function commandNames(env: NodeJS.ProcessEnv): Promise<string[]> {
  const r = await timed([cliPath, "--help"], env);
  const list = (r.stdout.split(/^Commands:$/m)[1] ?? "").split("\n\n")[0]!;
  return [...list.matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]!).filter((n) => n !== "help");
}

async function benchStart(env: NodeJS.ProcessEnv) {
  const names = await commandNames(env);
  const plan: [string, string[]][] = [
    ["node -e 0", ["-e", "0"]],
    ["muster --version", [cliPath, "--version"]],
    ["muster --help", [cliPath, "--help"]],
    ...names.map((n): [string, string[]] => [`muster ${n} --help`, [cliPath, n, "--help"]]),
  ];
  const samples = new Map<string, number[]>(plan.map(([k]) => [k, []]));
  for (let r = -warmup; r < rounds; r++) {
    for (const [k, argv] of plan) {
      const ms = await must(argv, env, (x) => x.code === 0 && (argv[0] === "-e" || x.stdout.length > 0));
      if (r >= 0) samples.get(k)!.push(ms);
    }
    process.stderr.write(`  start-up ${r < 0 ? "warm-up" : `round ${r + 1}/${rounds}`}: node -e 0 ${f(samples.get("node -e 0")!.at(-1) ?? NaN)} ms, --version ${f(samples.get("muster --version")!.at(-1) ?? NaN)} ms\n`);
  }
  const floor = median(samples.get("node -e 0")!);
  const rows = plan.map(([k]) => ({ what: k, medianMs: Math.round(median(samples.get(k)!) * 10) / 10, ratio: ratio(median(samples.get(k)!), floor), samples: samples.get(k)!.map((x) => Math.round(x * 10) / 10) }));
  return { floorMs: floor, rows };
}

async function benchFind(url: string, env: NodeJS.ProcessEnv, dir: string) {
  const emu = fork(join(here, "nodes.js"), ["muster", String(nodes), url, COLLECTIVE, "0"], { env, stdio: ["ignore", "inherit", "inherit", "ipc"] });
  children.add(emu);
  try {
    await new Promise<void>((ok, fail) => {
      const t = setTimeout(() => fail(new Error(`emulator (${nodes}) not ready after 120 s`)), 120_000);
      emu.on("message", (m: { type?: string }) => {
        if (m.type !== "ready") return;
        clearTimeout(t);
        ok();
      });
      emu.once("exit", (code) => fail(new Error(`emulator exited with ${code} before ready`)));
    });
    const key = loadOrCreateSigningKey();
    const reqFile = join(dir, "discovery-request.json");
    const floorArgv = [join(here, "discover-floor.js"), url, subjects.broadcast(COLLECTIVE, "discovery"), reqFile, String(nodes)];
    const musterArgv = [cliPath, "find", "--broker", url, "-T", COLLECTIVE];
    const floor: number[] = [];
    const muster: number[] = [];
    let everyNode = true;
    for (let r = -warmup; r < rounds; r++) {
      // A fresh request each run: the nodes refuse a replayed id.
      writeFileSync(reqFile, encodeRequest(buildRequest({ key, collective: COLLECTIVE, agent: "discovery", action: "ping", data: {}, filter: emptyFilter(), ttl: 60 })));
      const a = await must(floorArgv, env, (x) => x.code === 0 && x.stdout.trim() === String(nodes));
      const found = await timed(musterArgv, env);
      const lines = found.stdout.split("\n").filter(Boolean).length;
      if (found.code !== 0 && found.code !== 1) throw new Error(`muster find exited ${found.code}: ${found.stderr.slice(-600)}`);
      if (r >= 0) {
        floor.push(a);
        muster.push(found.ms);
        if (lines !== nodes) everyNode = false;
      }
      process.stderr.write(`  find N=${nodes} ${r < 0 ? "warm-up" : `round ${r + 1}/${rounds}`}: floor ${f(a)} ms, muster find ${f(found.ms)} ms (${lines} found)\n`);
    }
    return { nodes, floorMs: median(floor), musterMs: median(muster), ratio: ratio(median(muster), median(floor)), everyNode, samples: { floor: floor.map(Math.round), muster: muster.map(Math.round) } };
  } finally {
    if (emu.exitCode === null) {
      const gone = new Promise((r) => emu.once("exit", r));
      emu.send({ type: "stop" });
      const t = setTimeout(() => emu.kill("SIGKILL"), 10_000);
      await gone;
      clearTimeout(t);
    }
    children.delete(emu);
  }
}

function report(start: Awaited<ReturnType<typeof benchStart>>, find: Awaited<ReturnType<typeof benchFind>> | undefined): string {
  const lines = [`load average ${loadavgAtStart.map((x) => x.toFixed(1)).join(" ")} at start, ${loadavg().map((x) => x.toFixed(1)).join(" ")} at end; ${rounds} rounds, medians`, "", "| process | median ms | vs node -e 0 |", "|---|---:|---:|"];
  for (const r of start.rows) lines.push(`| \`${r.what}\` | ${f(r.medianMs)} | ${r.ratio}x |`);
  const worst = start.rows.filter((r) => r.what !== "node -e 0").reduce((a, b) => (b.ratio > a.ratio ? b : a));
  lines.push("", `targets:`, `  --version and every --help within 1.5x of node -e 0: worst ${worst.what} ${worst.ratio}x -> ${worst.ratio <= 1.5 ? "met" : "NOT MET"}`);
  if (find) {
    lines.push(`  muster find at ${find.nodes} nodes within 2.5x of bare NATS discovery: ${f(find.musterMs)} ms vs ${f(find.floorMs)} ms = ${find.ratio}x, ${find.everyNode ? "every node found in every round" : "NOT every node found"} -> ${find.ratio <= 2.5 && find.everyNode ? "met" : "NOT MET"}`);
  }
  return lines.join("\n") + "\n";
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "muster-bench-cli-"));
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("MUSTER_") && k !== "XDG_CONFIG_HOME") env[k] = v;
  env.MUSTER_CONFIG_DIR = dir;
  process.env.MUSTER_CONFIG_DIR = dir;
  // No ./.muster/client.yaml of a lab in the cwd may redirect the CLI: run it from the scratch dir.
  process.chdir(dir);
  loadOrCreateSigningKey();
  let nats: NatsHandle | undefined;
  const cleanup = async () => {
    for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
    await nats?.stop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  };
  for (const sig of ["SIGINT", "SIGTERM"] as const) process.once(sig, () => void cleanup().finally(() => process.exit(130)));
  try {
    process.stderr.write("bench: start-up\n");
    const start = await benchStart(env);
    let find: Awaited<ReturnType<typeof benchFind>> | undefined;
    if (!args["no-find"]) {
      nats = await startNats({ jetstream: false });
      process.stderr.write(`bench: muster find, ${nodes} nodes\n`);
      find = await benchFind(nats.url, env, dir);
    }
    const text = report(start, find);
    process.stdout.write(text);
    const out = resolve(repoRoot, args.out!);
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, JSON.stringify({ time: new Date().toISOString(), node: process.version, options: { nodes, rounds, warmup }, loadavgAtStart, loadavgAtEnd: loadavg(), start, find, report: text.split("\n") }, null, 2) + "\n");
    process.stderr.write(`bench: wrote ${out}\n`);
  } finally {
    await cleanup();
  }
}

main().catch((e) => {
  process.stderr.write(`bench failed: ${(e as Error).stack ?? String(e)}\n`);
  process.exitCode = 1;
});
