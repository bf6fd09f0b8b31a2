// `npm run bench:runall`: how close `muster puppet runall` gets to the best possible makespan.
//
//   node dist/bench/runall.js [--nodes 47] [--concurrency 4] [--run-ms 400,1500] [--seed 1] [--rounds 3]
//
// An emulated fleet (child process, one NATS connection) whose puppet agent simulates runs of known
// per-node lengths spread evenly over --run-ms. The scheduler runs here through the same code as the
// CLI (src/fleet/runner.ts). Ideal makespan = max(total run time / concurrency, longest run): a lower
// bound no scheduler can beat. Reported per start order (duration: longest last run first, the
// default; name: mc-puppetd's), plus the CLI end to end (its own process, discovery excluded as the
// makespan runs from the first start to the last end). Target: within 2% of the ideal.
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { MusterClient } from "../src/client/client.js";
import { idealMakespan, listMakespan, type RunallReport } from "../src/fleet/runall.js";
import { runAll } from "../src/fleet/runner.js";
import { startNats } from "../src/lab/nats.js";
import { benchFleet } from "./runall-plan.js";

const { values: a } = parseArgs({
  options: {
    nodes: { type: "string", default: "47" },
    concurrency: { type: "string", default: "4" },
    "run-ms": { type: "string", default: "400,1500" },
    seed: { type: "string", default: "1" },
    rounds: { type: "string", default: "3" },
  },
});
const N = Number(a.nodes);
const C = Number(a.concurrency);
const [minMs, maxMs] = a["run-ms"]!.split(",").map(Number) as [number, number];
const seed = Number(a.seed);
const rounds = Number(a.rounds);
const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = join(here, "..", "..");

const plan = benchFleet(N, minMs, maxMs, seed);
const runTimes = [...plan.runMs.values()];
const total = runTimes.reduce((x, y) => x + y, 0);
const ideal = idealMakespan(runTimes, C);

const dir = mkdtempSync(join(tmpdir(), "muster-bench-runall-"));
process.env.MUSTER_CONFIG_DIR = join(dir, "keys");
const nats = await startNats({ jetstream: false });
const fleet = spawn(process.execPath, [join(here, "runall-fleet.js"), nats.url, String(N), String(minMs), String(maxMs), String(seed)], { stdio: ["ignore", "pipe", "inherit"], env: process.env });
const lines = createInterface({ input: fleet.stdout! });
const next = () => new Promise<string>((resolve) => lines.once("line", resolve));

interface Row {
  how: string;
  round: number;
  makespanMs: number;
  /** What the same start order gives with zero overhead (list scheduling on exact run times). */
  orderBoundMs: number;
  ratio: number;
  maxConcurrency: number;
  ok: number;
}
const rows: Row[] = [];
const record = (how: string, round: number, r: RunallReport) => {
  const ok = r.counts.ok + r.counts.changed;
  if (ok !== N) throw new Error(`${how}: only ${ok} of ${N} runs ended well: ${JSON.stringify(r.counts)}`);
  const order = r.order.map((id) => plan.runMs.get(id)!);
  rows.push({ how, round, makespanMs: r.makespanMs, orderBoundMs: listMakespan(order, C), ratio: r.makespanMs / ideal, maxConcurrency: r.maxConcurrency, ok });
  process.stderr.write(`  ${how} round ${round}: makespan ${(r.makespanMs / 1000).toFixed(3)} s, ${((r.makespanMs / ideal - 1) * 100).toFixed(2)}% over ideal\n`);
};
let nodeSide: { runs: number; maxRunning: number } | undefined;
try {
  if ((await next()) !== "ready") throw new Error("fleet did not start");
  const client = await MusterClient.connect({ brokers: [nats.url], collective: "muster", name: "bench-runall" });
  try {
    for (let round = 1; round <= rounds; round++) {
      for (const order of ["duration", "name"] as const) {
        const { report } = await runAll(client, { concurrency: C, nodes: plan.ids, order, runonce: { force: true } });
        record(`library, order ${order}`, round, report);
      }
    }
  } finally {
    await client.close();
  }
  for (let round = 1; round <= rounds; round++) {
    const cli = spawn(process.execPath, [join(repoRoot, "dist", "src", "cli", "main.js"), "puppet", "runall", String(C), "--broker", nats.url, "--json"], { stdio: ["ignore", "pipe", "inherit"], env: process.env, cwd: tmpdir() });
    let out = "";
    cli.stdout!.on("data", (d: Buffer) => (out += d.toString()));
    const code = await new Promise<number | null>((resolve) => cli.once("close", resolve));
    if (code !== 0) throw new Error(`muster puppet runall exited ${code}`);
    record("CLI muster puppet runall", round, JSON.parse(out) as RunallReport);
  }
  fleet.kill("SIGTERM");
  nodeSide = JSON.parse(await next()) as { runs: number; maxRunning: number };
} finally {
  if (fleet.exitCode === null) fleet.kill("SIGKILL");
  await nats.stop();
  rmSync(dir, { recursive: true, force: true });
}

const best = (how: string) => Math.min(...rows.filter((r) => r.how === how).map((r) => r.ratio));
const hows = [...new Set(rows.map((r) => r.how))];
const lines2 = [
  `runall scheduler: ${N} emulated nodes, run times ${minMs}-${maxMs} ms (total ${(total / 1000).toFixed(2)} s, longest ${(Math.max(...runTimes) / 1000).toFixed(3)} s), concurrency ${C}`,
  `ideal makespan max(total/${C}, longest) = ${(ideal / 1000).toFixed(3)} s`,
  ...hows.map((h) => {
    const rs = rows.filter((r) => r.how === h);
    const overhead = rs.map((r) => (r.makespanMs - r.orderBoundMs).toFixed(0)).join(" / ");
    return `  ${h.padEnd(28)} makespan ${rs.map((r) => (r.makespanMs / 1000).toFixed(3)).join(" / ")} s  ratio ${rs.map((r) => r.ratio.toFixed(4)).join(" / ")}  (best ${((best(h) - 1) * 100).toFixed(2)}% over ideal; the order alone ${((rs[0]!.orderBoundMs / ideal - 1) * 100).toFixed(2)}%, messaging and timers +${overhead} ms)`;
  }),
  `most runs at once on the nodes: ${nodeSide?.maxRunning} (concurrency ${C}); runs: ${nodeSide?.runs}`,
  `target: within 2% of the ideal with the default order: ${best("library, order duration") <= 1.02 && best("CLI muster puppet runall") <= 1.02 ? "met" : "NOT met"}`,
];
process.stdout.write(`${lines2.join("\n")}\n`);
mkdirSync(join(repoRoot, "bench", "results"), { recursive: true });
writeFileSync(join(repoRoot, "bench", "results", "runall.json"), JSON.stringify({ nodes: N, concurrency: C, runMs: [minMs, maxMs], seed, totalMs: total, idealMs: ideal, rows, nodeSide, at: new Date().toISOString() }, null, 2));
