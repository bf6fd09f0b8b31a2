import { spreadRunTimes } from "../src/emulator/simulated-puppet.js";

/** The bench fleet: node-01.bench ... with run times spread evenly over [minMs, maxMs], shuffled by seed. */
export function benchFleet(count: number, minMs: number, maxMs: number, seed: number): { ids: string[]; runMs: Map<string, number> } {
  const ids = Array.from({ length: count }, (_, i) => `node-${String(i + 1).padStart(2, "0")}.bench`);
  const times = spreadRunTimes(count, minMs, maxMs, seed);
  return { ids, runMs: new Map(ids.map((id, i) => [id, times[i]!])) };
}
