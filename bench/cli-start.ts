// `npm run bench:cli`: what a `muster` command costs as a whole process, beside floors measured
// in the same run (docs/bench.md, "CLI start-up").
//
//   node dist/bench/cli-start.js [--nodes 10000] [--rounds 7] [--warmup 1] [--runtimes shipped,/usr/bin/node]
//                                [--no-find] [--out bench/results/cli-start.json]
//
// Start-up: `muster --version`, `muster --help` and `muster <command> --help` for every command
// against `node -e 0` of the same runtime, each help as muster prints it (the build's stored text)
// and rendered by commander (MUSTER_HELP_REPLAY=off: what a command pays to build its definition).
// `muster` is package.json's bin (dist/src/cli/main.cjs), as the package and `npm link` run it. Discovery: `muster find` against N emulated nodes
// (bench/nodes.ts, the emulator behind one connection), its replies signed and, on a second
// emulator, unsigned, against bare-NATS discovery from the same emulator (bench/discover-floor.ts:
// connect, publish one real signed discovery request, exit at the N-th reply). Every run is a
// fresh process, timed from spawn to exit; rounds interleave floors and muster, and runtimes, so
// all see the same machine state. Each runtime (`shipped`: the Node.js the .deb ships,
// packaging/runtime) runs its own floors. The table gives medians; ratios are muster's median over
// its floor's.

import { fork, spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { subcommandsOf } from "../src/cli/help-texts.js";
import { buildRequest } from "../src/client/request.js";
import { startNats, type NatsHandle } from "../src/lab/nats.js";
import { encodeRequest } from "../src/protocol/envelope.js";
import { subjects } from "../src/protocol/subjects.js";
import { emptyFilter } from "../src/protocol/types.js";
import { loadOrCreateSigningKey } from "../src/security/keys.js";
import { benchDir as here, cliPath, repoRoot } from "./paths.js";
import { benchRuntimes, scratchEnv, type Runtime } from "./runtimes.js";

const COLLECTIVE = "benchcli";
const UNSIGNED = "benchcliunsigned";

const { values: args } = parseArgs({
  options: {
    nodes: { type: "string", default: "10000" },
    rounds: { type: "string", default: "7" },
    warmup: { type: "string", default: "1" },
    "no-find": { type: "boolean", default: false },
    runtimes: { type: "string", default: "shipped,/usr/bin/node" },
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

/** One whole process of `node` (a runtime's path), timed from spawn to exit. */
function timed(node: string, argv: string[], env: NodeJS.ProcessEnv): Promise<Run> {
  return new Promise((ok, fail) => {
    const t0 = performance.now();
    const child = spawn(node, argv, { env, stdio: ["ignore", "pipe", "pipe"] });
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

async function must(node: string, argv: string[], env: NodeJS.ProcessEnv, check: (r: Run) => boolean): Promise<number> {
  const r = await timed(node, argv, env);
  if (!check(r)) throw new Error(`${node} ${argv.join(" ")} exited ${r.code}: ${r.stderr.slice(-600) || r.stdout.slice(-600)}`);
  return r.ms;
}

/** The command names `muster --help` lists. */
async function commandNames(env: NodeJS.ProcessEnv): Promise<string[]> {
  return subcommandsOf((await timed(process.execPath, [cliPath, "--help"], env)).stdout);
}

async function benchStart(rts: Runtime[], env: NodeJS.ProcessEnv) {
  const names = await commandNames(env);
  // Each help twice: as muster prints it (replayed from the build's texts, src/cli/help-replay.cts)
  // and rendered by commander (MUSTER_HELP_REPLAY=off), which is the start-up of a command that
  // builds its definition: what any command that does work pays before it starts working.
  const rendered = { ...env, MUSTER_HELP_REPLAY: "off" };
  const plan: [string, string[], NodeJS.ProcessEnv][] = [
    ["node -e 0", ["-e", "0"], env],
    ["muster --version", [cliPath, "--version"], env],
    ["muster --help", [cliPath, "--help"], env],
    ...names.map((n): [string, string[], NodeJS.ProcessEnv] => [`muster ${n} --help`, [cliPath, n, "--help"], env]),
    ["muster --help, rendered", [cliPath, "--help"], rendered],
    ...names.map((n): [string, string[], NodeJS.ProcessEnv] => [`muster ${n} --help, rendered`, [cliPath, n, "--help"], rendered]),
  ];
  const samples = new Map<string, number[]>(rts.flatMap((rt) => plan.map(([k]): [string, number[]] => [`${rt.path} ${k}`, []])));
  for (let r = -warmup; r < rounds; r++) {
    for (const rt of rts) {
      for (const [k, argv, e] of plan) {
        const ms = await must(rt.path, argv, e, (x) => x.code === 0 && (argv[0] === "-e" || x.stdout.length > 0));
        if (r >= 0) samples.get(`${rt.path} ${k}`)!.push(ms);
      }
      process.stderr.write(`  start-up ${rt.name} ${r < 0 ? "warm-up" : `round ${r + 1}/${rounds}`}: node -e 0 ${f(samples.get(`${rt.path} node -e 0`)!.at(-1) ?? NaN)} ms, --help ${f(samples.get(`${rt.path} muster --help`)!.at(-1) ?? NaN)} ms\n`);
    }
  }
  return rts.map((rt) => {
    const of = (k: string) => samples.get(`${rt.path} ${k}`)!;
    const floor = median(of("node -e 0"));
    const rows = plan.map(([k]) => ({ what: k, medianMs: Math.round(median(of(k)) * 10) / 10, ratio: ratio(median(of(k)), floor), samples: of(k).map((x) => Math.round(x * 10) / 10) }));
    return { runtime: rt.name, path: rt.path, floorMs: floor, rows };
  });
}

/** An emulator of N nodes (bench/nodes.ts) in its own process: `muster` signs every reply, `unsigned` none. */
async function startEmulator(mode: "muster" | "unsigned", collective: string, url: string, env: NodeJS.ProcessEnv): Promise<ChildProcess> {
  const emu = fork(join(here, "nodes.js"), [mode, String(nodes), url, collective, "0"], { env, stdio: ["ignore", "inherit", "inherit", "ipc"] });
  children.add(emu);
  await new Promise<void>((ok, fail) => {
    const t = setTimeout(() => fail(new Error(`emulator (${mode}, ${nodes}) not ready after 120 s`)), 120_000);
    emu.on("message", (m: { type?: string }) => {
      if (m.type !== "ready") return;
      clearTimeout(t);
      ok();
    });
    emu.once("exit", (code) => fail(new Error(`emulator (${mode}) exited with ${code} before ready`)));
  });
  return emu;
}

async function stopEmulator(emu: ChildProcess): Promise<void> {
  if (emu.exitCode === null) {
    const gone = new Promise((r) => emu.once("exit", r));
    emu.send({ type: "stop" });
    const t = setTimeout(() => emu.kill("SIGKILL"), 10_000);
    await gone;
    clearTimeout(t);
  }
  children.delete(emu);
}

/**
 * Per runtime and emulator (signed replies, unsigned): the floor, `muster find` as operators run it
 * (remembering the last discovery's answer, so it ends once every node answered: the warm-up
 * round makes the memory), and `muster find` without the memory (MUSTER_DISCOVERY_CACHE=off: the
 * 250 ms idle window ends it).
 */
async function benchFind(rts: Runtime[], url: string, env: NodeJS.ProcessEnv, dir: string) {
  const emus: ChildProcess[] = [];
  try {
    emus.push(await startEmulator("muster", COLLECTIVE, url, env), await startEmulator("unsigned", UNSIGNED, url, env));
    const key = loadOrCreateSigningKey();
    const kinds = [
      { kind: "signed", collective: COLLECTIVE },
      { kind: "unsigned", collective: UNSIGNED },
    ] as const;
    const noMemory = { ...env, MUSTER_DISCOVERY_CACHE: "off" };
    const samples = new Map<string, number[]>();
    const push = (k: string, ms: number) => samples.set(k, [...(samples.get(k) ?? []), ms]);
    let everyNode = true;
    for (let r = -warmup; r < rounds; r++) {
      for (const rt of rts) {
        for (const { kind, collective } of kinds) {
          const reqFile = join(dir, `discovery-request-${kind}.json`);
          // A fresh request each run: the nodes refuse a replayed id.
          writeFileSync(reqFile, encodeRequest(buildRequest({ key, collective, agent: "discovery", action: "ping", data: {}, filter: emptyFilter(), ttl: 60 })));
          const floor = await must(rt.path, [join(here, "discover-floor.js"), url, subjects.broadcast(collective, "discovery"), reqFile, String(nodes)], env, (x) => x.code === 0 && x.stdout.trim() === String(nodes));
          const runs: [string, Run][] = [];
          for (const [what, e] of [["find", env], ["find, no memory", noMemory]] as const) {
            const found = await timed(rt.path, [cliPath, "find", "--broker", url, "-T", collective], e);
            if (found.code !== 0 && found.code !== 1) throw new Error(`muster find exited ${found.code}: ${found.stderr.slice(-600)}`);
            runs.push([what, found]);
          }
          const counts = runs.map(([, x]) => x.stdout.split("\n").filter(Boolean).length);
          if (r >= 0) {
            push(`${rt.path} ${kind} floor`, floor);
            for (const [what, x] of runs) push(`${rt.path} ${kind} ${what}`, x.ms);
            if (counts.some((c) => c !== nodes)) everyNode = false;
          }
          process.stderr.write(`  find ${rt.name} ${kind} N=${nodes} ${r < 0 ? "warm-up" : `round ${r + 1}/${rounds}`}: floor ${f(floor)} ms, find ${f(runs[0]![1].ms)} ms (${counts[0]} found), no memory ${f(runs[1]![1].ms)} ms (${counts[1]} found)\n`);
        }
      }
    }
    return {
      nodes,
      everyNode,
      runtimes: rts.map((rt) => ({
        runtime: rt.name,
        path: rt.path,
        ...Object.fromEntries(
          kinds.map(({ kind }) => {
            const of = (w: string) => samples.get(`${rt.path} ${kind} ${w}`)!;
            const floorMs = median(of("floor"));
            return [kind, { floorMs, findMs: median(of("find")), ratio: ratio(median(of("find")), floorMs), noMemoryMs: median(of("find, no memory")), noMemoryRatio: ratio(median(of("find, no memory")), floorMs), samples: { floor: of("floor").map(Math.round), find: of("find").map(Math.round), noMemory: of("find, no memory").map(Math.round) } }];
          }),
        ) as unknown as Record<"signed" | "unsigned", { floorMs: number; findMs: number; ratio: number; noMemoryMs: number; noMemoryRatio: number }>,
      })),
    };
  } finally {
    for (const e of emus) await stopEmulator(e);
  }
}

/** Issue 29's targets. */
const START_TARGET = 1.25;
const FIND_SIGNED_TARGET = 1.5;
const FIND_UNSIGNED_TARGET = 2.5;

function report(start: Awaited<ReturnType<typeof benchStart>>, find: Awaited<ReturnType<typeof benchFind>> | undefined): string {
  const lines = [`load average ${loadavgAtStart.map((x) => x.toFixed(1)).join(" ")} at start, ${loadavg().map((x) => x.toFixed(1)).join(" ")} at end; ${rounds} rounds, medians`, ""];
  lines.push(`| process | ${start.map((s) => `${s.runtime} ms | vs node -e 0`).join(" | ")} |`, `|---|${start.map(() => "---:|---:").join("|")}|`);
  for (let i = 0; i < start[0]!.rows.length; i++) lines.push(`| \`${start[0]!.rows[i]!.what}\` | ${start.map((s) => `${f(s.rows[i]!.medianMs)} | ${s.rows[i]!.ratio}x`).join(" | ")} |`);
  if (find) {
    lines.push("", `| muster find, ${find.nodes} nodes | ${find.runtimes.map((r) => `${r.runtime}`).join(" | ")} |`, `|---|${find.runtimes.map(() => "---:").join("|")}|`);
    for (const kind of ["signed", "unsigned"] as const) {
      lines.push(`| floor, replies ${kind} | ${find.runtimes.map((r) => `${f(r[kind].floorMs)} ms`).join(" | ")} |`);
      lines.push(`| muster find, replies ${kind} | ${find.runtimes.map((r) => `${f(r[kind].findMs)} ms (${r[kind].ratio}x)`).join(" | ")} |`);
      lines.push(`| muster find, replies ${kind}, no discovery memory | ${find.runtimes.map((r) => `${f(r[kind].noMemoryMs)} ms (${r[kind].noMemoryRatio}x)`).join(" | ")} |`);
    }
  }
  lines.push("", "targets (issue 29):");
  for (const s of start) {
    const worst = s.rows.filter((r) => r.what !== "node -e 0" && !r.what.endsWith(", rendered")).reduce((a, b) => (b.ratio > a.ratio ? b : a));
    lines.push(`  ${s.runtime}: --version and every --help within ${START_TARGET}x of node -e 0: worst ${worst.what} ${worst.ratio}x -> ${worst.ratio <= START_TARGET ? "met" : "NOT MET"}`);
    const worstRendered = s.rows.filter((r) => r.what.endsWith(", rendered")).reduce((a, b) => (b.ratio > a.ratio ? b : a));
    lines.push(`  ${s.runtime}: a command's definition built (help rendered by commander), worst: ${worstRendered.what} ${worstRendered.ratio}x`);
  }
  if (find) {
    for (const r of find.runtimes) {
      lines.push(`  ${r.runtime}: muster find at ${find.nodes} nodes within ${FIND_SIGNED_TARGET}x of the signed floor: ${r.signed.ratio}x, within ${FIND_UNSIGNED_TARGET}x of the unsigned: ${r.unsigned.ratio}x -> ${r.signed.ratio <= FIND_SIGNED_TARGET && r.unsigned.ratio <= FIND_UNSIGNED_TARGET && find.everyNode ? "met" : "NOT MET"}`);
    }
    lines.push(`  ${find.everyNode ? "every node found in every round" : "NOT every node found in every round"}`);
  }
  return lines.join("\n") + "\n";
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "muster-bench-cli-"));
  const env = scratchEnv(dir);
  // No ./.muster/client.yaml of a lab in the cwd may redirect the CLI: run it from the scratch dir.
  process.chdir(dir);
  loadOrCreateSigningKey();
  const rts = await benchRuntimes(args.runtimes!);
  let nats: NatsHandle | undefined;
  const cleanup = async () => {
    for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
    await nats?.stop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  };
  for (const sig of ["SIGINT", "SIGTERM"] as const) process.once(sig, () => void cleanup().finally(() => process.exit(130)));
  try {
    process.stderr.write(`bench: start-up on ${rts.map((r) => r.name).join(", ")}\n`);
    const start = await benchStart(rts, env);
    let find: Awaited<ReturnType<typeof benchFind>> | undefined;
    if (!args["no-find"]) {
      nats = await startNats({ jetstream: false });
      process.stderr.write(`bench: muster find, ${nodes} nodes\n`);
      find = await benchFind(rts, nats.url, env, dir);
    }
    const text = report(start, find);
    process.stdout.write(text);
    const out = resolve(repoRoot, args.out!);
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, JSON.stringify({ time: new Date().toISOString(), node: process.version, runtimes: rts, options: { nodes, rounds, warmup }, loadavgAtStart, loadavgAtEnd: loadavg(), start, find, report: text.split("\n") }, null, 2) + "\n");
    process.stderr.write(`bench: wrote ${out}\n`);
  } finally {
    await cleanup();
  }
}

main().catch((e) => {
  process.stderr.write(`bench failed: ${(e as Error).stack ?? String(e)}\n`);
  process.exitCode = 1;
});
