import { PuppetRunStatuses, type PuppetRunStatus } from "../protocol/puppet-run.js";
import type { PuppetDbEvent, PuppetDbNodeStatus, PuppetDbRun } from "../protocol/puppetdb.js";
import type { PuppetDbReader } from "./http.js";
import { str } from "./pql.js";

// Puppet runs as PuppetDB records them: each active node's latest report (its time and status,
// the record fleet health keeps where PuppetDB is configured), and a node's last reports with their
// resource counts and, for a failed run, the events that failed (the console's node page). Queries
// and the reading of PuppetDB's rows are pure; the two reads at the end ask through a reader. The
// shapes are the wire's (protocol/puppetdb.ts): the registry hands them on as they are.

/** Active nodes a page holds (a page stays well under a broker's 1 MB max_payload). */
export const NODE_PAGE = 2000;
export const MAX_RUNS = 20;
export const MAX_EVENTS = 50;

const ms = (v: unknown): number | null => {
  if (typeof v !== "string") return null;
  const t = Date.parse(v);
  return Number.isFinite(t) ? t : null;
};
const isStatus = (v: unknown): v is PuppetRunStatus => (PuppetRunStatuses as readonly unknown[]).includes(v);
const text = (v: unknown, max = 2000): string | null => (typeof v === "string" ? v.slice(0, max) : null);

export function nodeStatusQuery(offset: number, limit = NODE_PAGE): string {
  return `nodes[certname, report_timestamp, latest_report_status, latest_report_noop, deactivated, expired] { order by certname limit ${Math.floor(limit)} offset ${Math.floor(offset)} }`;
}

/** Active nodes' latest reports from PuppetDB's rows (anything else dropped). */
export function nodeStatusFrom(rows: readonly unknown[]): PuppetDbNodeStatus[] {
  const out: PuppetDbNodeStatus[] = [];
  for (const r of rows) {
    if (r === null || typeof r !== "object") continue;
    const x = r as Record<string, unknown>;
    if (typeof x.certname !== "string" || x.deactivated || x.expired) continue;
    out.push({ certname: x.certname, report_at: ms(x.report_timestamp), status: isStatus(x.latest_report_status) ? x.latest_report_status : null, noop: x.latest_report_noop === true });
  }
  return out;
}

export function runsQuery(certname: string, limit: number): string {
  const n = Math.max(1, Math.min(MAX_RUNS, Math.floor(limit)));
  return `reports[hash, status, noop, start_time, end_time, configuration_version, metrics] { certname = ${str(certname)} order by end_time desc limit ${n} }`;
}

/** A report's metric, from its metrics' data ([{category, name, value}]). */
function metric(metrics: unknown, category: string, name: string): number | null {
  const data = metrics !== null && typeof metrics === "object" ? (metrics as { data?: unknown }).data : undefined;
  if (!Array.isArray(data)) return null;
  for (const m of data) {
    const d = (m ?? {}) as { category?: unknown; name?: unknown; value?: unknown };
    if (d.category === category && d.name === name && typeof d.value === "number" && Number.isFinite(d.value)) return d.value;
  }
  return null;
}

/** The runs of PuppetDB's report rows, newest first; each keeps its report's hash for its events. */
export function runsFrom(certname: string, rows: readonly unknown[]): (PuppetDbRun & { hash: string })[] {
  const out: (PuppetDbRun & { hash: string })[] = [];
  for (const r of rows) {
    if (r === null || typeof r !== "object") continue;
    const x = r as Record<string, unknown>;
    const time = ms(x.end_time);
    if (typeof x.hash !== "string" || time === null || !isStatus(x.status)) continue;
    const count = (name: string) => Math.max(0, Math.round(metric(x.metrics, "resources", name) ?? 0));
    const total = metric(x.metrics, "time", "total");
    out.push({
      identity: certname,
      hash: x.hash,
      time,
      start: ms(x.start_time),
      status: x.status,
      noop: x.noop === true,
      resources: { total: count("total"), changed: count("changed"), failed: count("failed") },
      duration_s: total !== null && total > 0 ? Math.round(total * 100) / 100 : null,
      config_version: text(x.configuration_version, 256),
      events: [],
    });
  }
  return out.sort((a, b) => b.time - a.time);
}

export function failedEventsQuery(hashes: readonly string[]): string {
  return `events[report, resource_type, resource_title, property, message] { status = "failure" and report in [${hashes.map(str).join(", ")}] }`;
}

/** The failed events of each report, by its hash. */
export function eventsFrom(rows: readonly unknown[]): Map<string, PuppetDbEvent[]> {
  const out = new Map<string, PuppetDbEvent[]>();
  for (const r of rows) {
    const x = (r ?? {}) as Record<string, unknown>;
    if (typeof x.report !== "string" || typeof x.resource_type !== "string" || typeof x.resource_title !== "string") continue;
    const list = out.get(x.report) ?? out.set(x.report, []).get(x.report)!;
    if (list.length < MAX_EVENTS) list.push({ type: x.resource_type.slice(0, 200), title: x.resource_title.slice(0, 500), property: text(x.property, 200), message: text(x.message) });
  }
  return out;
}

/** Every active node's latest report, a page at a time. */
export async function readNodeStatuses(db: PuppetDbReader, offset: number, limit = NODE_PAGE): Promise<{ nodes: PuppetDbNodeStatus[]; more: boolean; next: number }> {
  const rows = await db.query(nodeStatusQuery(offset, limit));
  return { nodes: nodeStatusFrom(rows), more: rows.length >= limit, next: offset + rows.length };
}

/** A node's last `limit` runs, newest first, a failed run's failed events with it. */
export async function readRuns(db: PuppetDbReader, certname: string, limit: number): Promise<PuppetDbRun[]> {
  const runs = runsFrom(certname, await db.query(runsQuery(certname, limit)));
  const failed = runs.filter((r) => r.status === "failed").map((r) => r.hash);
  const events = failed.length ? eventsFrom(await db.query(failedEventsQuery(failed))) : new Map<string, PuppetDbEvent[]>();
  return runs.map(({ hash, ...r }) => ({ ...r, events: events.get(hash) ?? [] }));
}
