import { bucketKey, DEFAULT_PUPPET_RUNS_BUCKET, kvSubject } from "./buckets.js";
import { parseNodeValue } from "./node-value.js";

// A node's Puppet runs, as history: each time the `puppet` data plugin a heartbeat carries
// (protocol/heartbeat.ts) reports a new last run, the node writes that run to its own key of the
// runs bucket (DEFAULT_PUPPET_RUNS_BUCKET), whose history keeps its last runs (the bucket's
// `history`, 10 by default). Runs started by muster, by the Puppet daemon or by hand are all seen,
// since the node reads Puppet's own last_run_summary.yaml. Readers: fleet health (a failing
// streak), the console's node page. Pure: the record, how a run's status is judged, the codec.

export const PuppetRunStatuses = ["failed", "changed", "unchanged"] as const;
export type PuppetRunStatus = (typeof PuppetRunStatuses)[number];

export interface PuppetRunRecord {
  identity: string;
  /** When the run ended, ms epoch (Puppet's time.last_run). */
  time: number;
  status: PuppetRunStatus;
  resources: { total: number; changed: number; failed: number };
  /** Seconds the run took (time.total), when Puppet said. */
  duration_s: number | null;
  config_version: string | null;
}

/** Runs a node's key keeps by default. */
export const DEFAULT_PUPPET_RUN_HISTORY = 10;
/** Puppet's default `runinterval` (seconds): what a node's Puppet runs at when its puppet.conf does not say. */
export const DEFAULT_RUNINTERVAL_S = 1800;

export function puppetRunSubject(identity: string, bucket = DEFAULT_PUPPET_RUNS_BUCKET): string {
  return kvSubject(bucket, bucketKey(identity));
}

/**
 * A run's status from its last_run_summary counts, as operators read it: failed when a resource or
 * event failed, or when the run applied no catalog at all (no resources: the catalog did not
 * compile or could not be fetched); changed when a resource changed; else unchanged.
 */
export function summaryRunStatus(s: { resources: Record<string, number>; events: Record<string, number> }): PuppetRunStatus {
  const r = s.resources;
  if ((r.failed ?? 0) > 0 || (r.failed_to_restart ?? 0) > 0 || (s.events.failure ?? 0) > 0 || !((r.total ?? 0) > 0)) return "failed";
  return (r.changed ?? 0) > 0 ? "changed" : "unchanged";
}

const num = (v: unknown): number => (typeof v === "number" && Number.isFinite(v) ? v : 0);

/**
 * The last run the `puppet` data plugin's values describe, or undefined when Puppet has not run
 * (lastrun 0). Values from an older node without `last_run_status` are judged by their counts.
 */
export function puppetRunFromStatus(identity: string, v: Record<string, unknown>): PuppetRunRecord | undefined {
  const lastrun = num(v.lastrun);
  if (lastrun <= 0) return undefined;
  const resources = { total: num(v.total_resources), changed: num(v.changed_resources), failed: num(v.failed_resources) };
  const status = (PuppetRunStatuses as readonly unknown[]).includes(v.last_run_status) ? (v.last_run_status as PuppetRunStatus) : resources.failed > 0 ? "failed" : resources.changed > 0 ? "changed" : "unchanged";
  return {
    identity,
    time: Math.round(lastrun * 1000),
    status,
    resources,
    duration_s: typeof v.total_time === "number" && Number.isFinite(v.total_time) && v.total_time > 0 ? Math.round(v.total_time * 100) / 100 : null,
    config_version: typeof v.config_version === "string" && v.config_version ? v.config_version.slice(0, 256) : null,
  };
}

const enc = new TextEncoder();

export function encodePuppetRun(r: PuppetRunRecord): Uint8Array {
  return enc.encode(JSON.stringify(r));
}

export type PuppetRunParse = { ok: true; run: PuppetRunRecord } | { ok: false; reason: string };

const isObject = (x: unknown): x is Record<string, unknown> => typeof x === "object" && x !== null && !Array.isArray(x);
const isCount = (x: unknown) => typeof x === "number" && Number.isInteger(x) && x >= 0;

/** One stored run, checked; with `key`, it must be stored under its own identity's key. */
export function parsePuppetRun(data: Uint8Array, key?: string): PuppetRunParse {
  const refuse = (reason: string): PuppetRunParse => ({ ok: false, reason });
  const p = parseNodeValue(data, 16 * 1024, key);
  if (!p.ok) return p;
  const v = p.value;
  if (typeof v.time !== "number" || !Number.isFinite(v.time) || v.time <= 0) return refuse("time must be a time in ms");
  if (!(PuppetRunStatuses as readonly unknown[]).includes(v.status)) return refuse(`status must be ${PuppetRunStatuses.join(", ")}`);
  const r = v.resources;
  if (!isObject(r) || !isCount(r.total) || !isCount(r.changed) || !isCount(r.failed)) return refuse("resources must be {total, changed, failed} counts");
  if (v.duration_s !== null && (typeof v.duration_s !== "number" || !Number.isFinite(v.duration_s) || v.duration_s < 0)) return refuse("duration_s must be seconds or null");
  if (v.config_version !== null && (typeof v.config_version !== "string" || v.config_version.length > 256)) return refuse("config_version must be a string or null");
  return {
    ok: true,
    run: { identity: v.identity, time: v.time, status: v.status as PuppetRunStatus, resources: { total: r.total as number, changed: r.changed as number, failed: r.failed as number }, duration_s: v.duration_s as number | null, config_version: v.config_version as string | null },
  };
}
