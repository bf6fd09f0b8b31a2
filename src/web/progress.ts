import { Stages, type NodeRecord } from "../protocol/provision-record.js";

// How fast provisioning goes, from the provisioner's records alone: nodes finished and failed per
// minute, an estimate of when what is waiting will be through, and per stage and per master how long
// things take and how many are under way. Pure: records and the clock in, numbers out. The records
// hold each node's latest round only, so a node retried after failing counts where it is now.

/** Nearest-rank percentile of ascending `sorted` (p in 0..100); undefined for no samples. */
export function percentile(sorted: readonly number[], p: number): number | undefined {
  if (sorted.length === 0) return undefined;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))];
}

export interface ThroughputBucket {
  /** The bucket's start, ms epoch. */
  start: number;
  /** Nodes whose record says done, finished within the bucket. */
  done: number;
  /** Nodes whose record says failed, failed within the bucket. */
  failed: number;
}

export interface Throughput {
  bucket_ms: number;
  /** The first bucket's start; the last bucket holds `now`. */
  since: number;
  buckets: ThroughputBucket[];
}

/**
 * Done and failed nodes per bucket (a minute by default) over the last `spanMs` (three hours), by
 * the time the record says they finished (`finishedAt`). Buckets are aligned to whole minutes.
 */
export function throughput(records: Iterable<NodeRecord>, now: number, bucketMs = 60_000, spanMs = 3 * 3600_000): Throughput {
  const n = Math.max(1, Math.round(spanMs / bucketMs));
  const since = (Math.floor(now / bucketMs) - n + 1) * bucketMs;
  const buckets: ThroughputBucket[] = Array.from({ length: n }, (_, i) => ({ start: since + i * bucketMs, done: 0, failed: 0 }));
  for (const r of records) {
    if ((r.status !== "done" && r.status !== "failed") || r.finishedAt === undefined || !Number.isFinite(r.finishedAt)) continue;
    const i = Math.floor((r.finishedAt - since) / bucketMs);
    if (i < 0 || i >= n) continue;
    buckets[i]![r.status]++;
  }
  return { bucket_ms: bucketMs, since, buckets };
}

export interface Eta {
  pending: number;
  in_progress: number;
  /** Nodes that finished (done or failed) in the window, per minute; null when none did. */
  rate_per_min: number | null;
  /** Seconds until pending and in-progress nodes are through; null without an estimate. */
  eta_s: number | null;
  window_s: number;
  /** How eta_s was made: from stage durations and the nodes worked on at once, from the finishing rate, or not at all. */
  method: "stages" | "rate" | "none";
  /** Nodes worked on at once (stages method): those in progress now, at least one. */
  concurrency: number | null;
  /** A whole round's usual time, seconds (the stages' p50 summed). */
  per_node_s: number | null;
  /** Nodes gone (the provisioner waits for them; they hold no slot and are not counted). */
  gone: number;
}

const isGone = (r: NodeRecord) => (r.status === "in_progress" || r.status === "pending") && r.gone !== undefined;

/**
 * When will what is waiting be through? From the stages: each node in progress needs the usual
 * (p50) time of the stages it has left (less what its current stage has run), each pending node a
 * whole round, and as many are worked on at once as are in progress now; the estimate is the
 * longer of the slowest node under way and all the work over that concurrency. Gone nodes hold no
 * slot and are left out. Without stage times yet, from the rate nodes left the queue in the last
 * `windowMs` (15 minutes).
 */
export function eta(records: Iterable<NodeRecord>, now: number, windowMs = 15 * 60_000, stages?: readonly StageStat[]): Eta {
  let pending = 0;
  let finished = 0;
  let gone = 0;
  const working: NodeRecord[] = [];
  for (const r of records) {
    if (isGone(r)) gone++;
    else if (r.status === "pending") pending++;
    else if (r.status === "in_progress") working.push(r);
    else if (r.finishedAt !== undefined && r.finishedAt > now - windowMs && r.finishedAt <= now) finished++;
  }
  const inProgress = working.length;
  const rate = finished > 0 ? finished / (windowMs / 60_000) : null;
  const left = pending + inProgress;
  const base = { pending, in_progress: inProgress, rate_per_min: rate, window_s: windowMs / 1000, gone };
  if (left === 0) return { ...base, eta_s: 0, method: "none", concurrency: null, per_node_s: null };
  const p50 = new Map((stages ?? []).filter((s) => s.p50_ms !== null).map((s) => [s.stage, s.p50_ms!]));
  if (p50.size > 0) {
    const order = Stages.filter((s) => p50.has(s));
    const whole = order.reduce((n, s) => n + p50.get(s)!, 0);
    const remaining = working.map((r) => {
      const done = r.stage ? Stages.indexOf(r.stage) : -1;
      let ms = 0;
      for (const s of order) {
        const i = Stages.indexOf(s);
        if (i <= done) continue;
        const t = r.stageTimes?.[s];
        ms += s === r.current && t && t.end === undefined ? Math.max(0, p50.get(s)! - (now - t.start)) : p50.get(s)!;
      }
      return ms;
    });
    const c = Math.max(1, inProgress);
    const work = remaining.reduce((a, b) => a + b, 0) + pending * whole;
    const ms = Math.max(Math.max(0, ...remaining), work / c);
    return { ...base, eta_s: Math.round(ms / 1000), method: "stages", concurrency: c, per_node_s: Math.round(whole / 100) / 10 };
  }
  return { ...base, eta_s: rate === null ? null : Math.round((left / rate) * 60), method: rate === null ? "none" : "rate", concurrency: null, per_node_s: null };
}

export interface StageStat {
  stage: string;
  /** Completed runs of the stage in the records (their current round). */
  samples: number;
  p50_ms: number | null;
  p95_ms: number | null;
  /** Nodes working on this stage now. */
  in_flight: number;
}

/** Per stage, in the provisioner's order: how long it took where it completed, and how many are on it now. */
export function stageStats(records: Iterable<NodeRecord>): StageStat[] {
  const took = new Map<string, number[]>();
  const flying = new Map<string, number>();
  for (const r of records) {
    if (r.status === "in_progress" && r.current) flying.set(r.current, (flying.get(r.current) ?? 0) + 1);
    for (const [stage, t] of Object.entries(r.stageTimes ?? {})) {
      if (!t || t.end === undefined || !Number.isFinite(t.start) || !Number.isFinite(t.end)) continue;
      let xs = took.get(stage);
      if (!xs) took.set(stage, (xs = []));
      xs.push(Math.max(0, t.end - t.start));
    }
  }
  const out: StageStat[] = [];
  for (const stage of Stages) {
    const xs = (took.get(stage) ?? []).sort((a, b) => a - b);
    const inFlight = flying.get(stage) ?? 0;
    if (xs.length === 0 && inFlight === 0) continue;
    out.push({ stage, samples: xs.length, p50_ms: percentile(xs, 50) ?? null, p95_ms: percentile(xs, 95) ?? null, in_flight: inFlight });
  }
  return out;
}

export interface MasterStat {
  /** "" for nodes that have no master yet. */
  master: string;
  in_flight: number;
  done: number;
  failed: number;
  /** Start to finish of its done nodes (their current round). */
  p50_ms: number | null;
  p95_ms: number | null;
}

/** Per master: nodes under way, done and failed, and how long a done node took from start to finish. */
export function masterStats(records: Iterable<NodeRecord>): MasterStat[] {
  const by = new Map<string, { in_flight: number; done: number; failed: number; took: number[] }>();
  for (const r of records) {
    if (r.status === "pending") continue;
    const m = r.master ?? "";
    let s = by.get(m);
    if (!s) by.set(m, (s = { in_flight: 0, done: 0, failed: 0, took: [] }));
    if (r.status === "in_progress") s.in_flight++;
    else s[r.status]++;
    if (r.status === "done" && r.startedAt !== undefined && r.finishedAt !== undefined) s.took.push(Math.max(0, r.finishedAt - r.startedAt));
  }
  return [...by.entries()]
    .map(([master, s]) => {
      const xs = s.took.sort((a, b) => a - b);
      return { master, in_flight: s.in_flight, done: s.done, failed: s.failed, p50_ms: percentile(xs, 50) ?? null, p95_ms: percentile(xs, 95) ?? null };
    })
    .sort((a, b) => (a.master === "" ? 1 : b.master === "" ? -1 : a.master < b.master ? -1 : a.master > b.master ? 1 : 0));
}

export interface Progress {
  /** ms epoch the figures were computed at. */
  now: number;
  throughput: Throughput;
  eta: Eta;
  stages: StageStat[];
  masters: MasterStat[];
}

export function progress(records: readonly NodeRecord[], now: number, hours = 3): Progress {
  const stages = stageStats(records);
  return { now, throughput: throughput(records, now, 60_000, hours * 3600_000), eta: eta(records, now, undefined, stages), stages, masters: masterStats(records) };
}
