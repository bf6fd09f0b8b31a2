import { MusterError } from "../errors.js";

// --limit N|N% with --limit-method first|random and --limit-seed: which of the discovered nodes to call.

export interface LimitSpec {
  count?: number;
  percent?: number;
  method: "first" | "random";
  seed?: number;
}

export function parseLimit(text: string, method: "first" | "random" = "first", seed?: number): LimitSpec {
  const m = /^(\d+)(%?)$/.exec(text.trim());
  if (!m) throw new MusterError("MUSTER_USAGE", `--limit takes a count or a percentage (e.g. 10 or 25%), got ${JSON.stringify(text)}`);
  const n = Number(m[1]);
  if (m[2]) {
    if (n < 1 || n > 100) throw new MusterError("MUSTER_USAGE", `--limit percentage must be between 1% and 100%`);
    return { percent: n, method, seed };
  }
  if (n < 1) throw new MusterError("MUSTER_USAGE", `--limit must be at least 1`);
  return { count: n, method, seed };
}

/** Deterministic for a given seed (mulberry32), so `--limit-seed` reproduces a selection. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function applyLimit(nodes: string[], spec: LimitSpec): string[] {
  const want = spec.count ?? Math.max(1, Math.ceil((nodes.length * (spec.percent ?? 100)) / 100));
  if (want >= nodes.length) return [...nodes];
  if (spec.method === "first") return nodes.slice(0, want);
  const rand = rng(spec.seed ?? Date.now());
  const pool = [...nodes];
  for (let i = pool.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [pool[i], pool[j]] = [pool[j]!, pool[i]!];
  }
  return pool.slice(0, want).sort();
}
