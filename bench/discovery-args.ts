import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { repoRoot } from "./paths.js";

// What the discovery benches share (bench/registry.ts, bench/puppetdb.ts): the same flags with the
// same defaults and checks, and the same summary of their samples.

export interface DiscoveryBenchArgs {
  nodes: number;
  rounds: number;
  warmup: number;
  idleMs: number;
  out: string;
  /** The bench's own flags, as given. */
  extra: Record<string, string | undefined>;
}

/** --nodes 10000 --rounds 5 --warmup 1 --idle-ms 250 --out bench/results/<name>-latest.json, and the bench's own string flags. */
export function discoveryBenchArgs(name: string, extra: Record<string, string> = {}): DiscoveryBenchArgs {
  const { values } = parseArgs({
    options: {
      nodes: { type: "string", default: "10000" },
      rounds: { type: "string", default: "5" },
      warmup: { type: "string", default: "1" },
      "idle-ms": { type: "string", default: "250" },
      out: { type: "string", default: join(repoRoot, "bench", "results", `${name}-latest.json`) },
      ...Object.fromEntries(Object.entries(extra).map(([k, d]) => [k, { type: "string" as const, default: d }])),
    },
  });
  const a = { nodes: Number(values.nodes), rounds: Number(values.rounds), warmup: Number(values.warmup), idleMs: Number(values["idle-ms"]), out: String(values.out) };
  if (!Number.isInteger(a.nodes) || a.nodes < 1 || !Number.isInteger(a.rounds) || a.rounds < 1 || !Number.isInteger(a.warmup) || a.warmup < 0) {
    process.stderr.write(`bench:${name}: --nodes, --rounds, --warmup take whole numbers\n`);
    process.exit(64);
  }
  return { ...a, extra: Object.fromEntries(Object.keys(extra).map((k) => [k, (values as Record<string, unknown>)[k] as string | undefined])) };
}

export const round2 = (x: number) => Math.round(x * 100) / 100;

/** Median and 90th percentile of the samples (ms), and the samples, rounded. */
export function stats(samples: number[]): { median: number; p90: number; samples: number[] } {
  const s = [...samples].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))] ?? NaN;
  return { median: round2(q(0.5)), p90: round2(q(0.9)), samples: samples.map(round2) };
}

/** The head of a discovery bench's report: what ran, when, on what. */
export function reportHead(name: string, a: Pick<DiscoveryBenchArgs, "nodes" | "rounds" | "warmup" | "idleMs">): { bench: string; time: string; nodes: number; rounds: number; warmup: number; idleMs: number; cpus: number; loadavgAtStart: number[] } {
  return { bench: name, time: new Date().toISOString(), nodes: a.nodes, rounds: a.rounds, warmup: a.warmup, idleMs: a.idleMs, cpus: cpus().length, loadavgAtStart: loadavg().map(round2) };
}
