import { readFileSync, statSync } from "node:fs";
import { parse } from "yaml";

// What a Puppet run left behind: $statedir/last_run_report.yaml (full report, Ruby-tagged YAML)
// and $publicdir/last_run_summary.yaml (counts). We read only files written by this run.

export interface FailedResource {
  /** e.g. "File[/tmp/x]" */
  resource: string;
  file?: string;
  line?: number;
  /** The failure messages of the resource's events. */
  messages: string[];
}

export interface RunReport {
  status?: string;
  environment?: string;
  failedResources: FailedResource[];
  /** Log lines at err level or above, Facter's own noise excluded. */
  errors: string[];
  /** Resource counts from the summary: total, changed, failed, skipped, out_of_sync, ... */
  resources: Record<string, number>;
  configVersion?: string;
}

/** Read the report and summary when they are newer than `sinceMs`; undefined parts are left empty. */
export function readRunReport(reportPath: string, summaryPath: string, sinceMs: number): RunReport {
  const out: RunReport = { failedResources: [], errors: [], resources: {} };
  const report = readYamlSince(reportPath, sinceMs);
  if (isRecord(report)) {
    if (typeof report.status === "string") out.status = report.status;
    if (typeof report.environment === "string") out.environment = report.environment;
    if (Array.isArray(report.logs)) {
      for (const l of report.logs) {
        if (!isRecord(l) || !["err", "alert", "emerg", "crit"].includes(String(l.level))) continue;
        if (l.source === "Facter") continue; // e.g. /proc/1/environ unreadable in containers
        out.errors.push(String(l.message ?? ""));
      }
    }
    if (isRecord(report.resource_statuses)) {
      for (const [name, st] of Object.entries(report.resource_statuses)) {
        if (!isRecord(st) || st.failed !== true) continue;
        const messages = Array.isArray(st.events)
          ? st.events.filter((e) => isRecord(e) && e.status === "failure").map((e) => String((e as Record<string, unknown>).message ?? ""))
          : [];
        const fr: FailedResource = { resource: name, messages };
        if (typeof st.file === "string") fr.file = st.file;
        if (typeof st.line === "number") fr.line = st.line;
        out.failedResources.push(fr);
      }
    }
  }
  const summary = readYamlSince(summaryPath, sinceMs);
  if (isRecord(summary)) {
    if (isRecord(summary.resources)) {
      for (const [k, v] of Object.entries(summary.resources)) if (typeof v === "number") out.resources[k] = v;
    }
    if (isRecord(summary.version) && summary.version.config !== undefined && summary.version.config !== null) out.configVersion = String(summary.version.config);
  }
  return out;
}

/** Failed resources and errors from the console output, for runs that left no report. */
export function parseRunOutput(output: string): { failedResources: FailedResource[]; errors: string[] } {
  const failed = new Map<string, FailedResource>();
  const errors: string[] = [];
  for (const raw of output.split("\n")) {
    const line = raw.trim();
    const m = /^Error: (.*)$/.exec(line);
    if (!m?.[1] || m[1].startsWith("Facter:")) continue;
    errors.push(m[1]);
    // Error: /Stage[main]/Main/File[/x]/ensure: change from 'absent' to 'file' failed: ...
    const r = /^\/Stage\[[^\]]+\](?:\/[^/[]+)*\/([A-Z][\w:]*\[[^\]]*\])(?:\/[\w]+)?: (.*)$/.exec(m[1]);
    if (r?.[1]) {
      const fr = failed.get(r[1]) ?? { resource: r[1], messages: [] };
      fr.messages.push(r[2] ?? "");
      failed.set(r[1], fr);
    }
  }
  return { failedResources: [...failed.values()], errors };
}

function readYamlSince(path: string, sinceMs: number): unknown {
  try {
    if (statSync(path).mtimeMs < sinceMs) return undefined; // left by a previous run
    return parse(readFileSync(path, "utf8"), { logLevel: "silent", maxAliasCount: -1 });
  } catch {
    return undefined;
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** A resource the last run changed or failed to change, with what Puppet said about it. */
export interface ResourceOutcome {
  /** e.g. "File[/etc/motd]" */
  resource: string;
  status: "changed" | "failed";
  file?: string;
  line?: number;
  /** Its events' messages ("content changed '{md5}a' to '{md5}b'", "change from ... failed: ..."). */
  messages: string[];
}

export interface ReportDetails {
  /** changed, unchanged or failed, as Puppet says. */
  status?: string;
  /** When the run started, as the report says (ISO 8601). */
  time?: string;
  environment?: string;
  config_version?: string;
  /** Failed resources first, then changed ones, by name; at most `limit`. */
  resources: ResourceOutcome[];
  /** Changed or failed resources left out beyond `limit`. */
  resources_left_out: number;
  /** Log lines at warning or above (Facter's own noise excluded), at most 50. */
  logs: { level: string; source?: string; message: string }[];
}

const LOG_LEVELS = new Set(["warning", "err", "alert", "emerg", "crit"]);

/** Pure: what a parsed last_run_report.yaml says the run did, resource by resource. */
export function reportDetails(report: unknown, limit = 200): ReportDetails | undefined {
  if (!isRecord(report)) return undefined;
  const out: ReportDetails = { resources: [], resources_left_out: 0, logs: [] };
  const str = (v: unknown) => (v === undefined || v === null ? undefined : v instanceof Date ? v.toISOString() : String(v));
  if (str(report.status)) out.status = str(report.status)!;
  if (str(report.time)) out.time = str(report.time)!;
  if (str(report.environment)) out.environment = str(report.environment)!;
  if (str(report.configuration_version)) out.config_version = str(report.configuration_version)!;
  const all: ResourceOutcome[] = [];
  if (isRecord(report.resource_statuses)) {
    for (const [name, st] of Object.entries(report.resource_statuses)) {
      if (!isRecord(st) || (st.failed !== true && st.changed !== true)) continue;
      const events = Array.isArray(st.events) ? st.events.filter(isRecord) : [];
      const r: ResourceOutcome = { resource: name, status: st.failed === true ? "failed" : "changed", messages: events.map((e) => String(e.message ?? "")).filter(Boolean).map((m) => m.slice(0, 1000)).slice(0, 20) };
      if (typeof st.file === "string") r.file = st.file;
      if (typeof st.line === "number") r.line = st.line;
      all.push(r);
    }
  }
  all.sort((a, b) => (a.status === b.status ? (a.resource < b.resource ? -1 : a.resource > b.resource ? 1 : 0) : a.status === "failed" ? -1 : 1));
  out.resources = all.slice(0, limit);
  out.resources_left_out = all.length - out.resources.length;
  if (Array.isArray(report.logs)) {
    for (const l of report.logs) {
      if (!isRecord(l) || !LOG_LEVELS.has(String(l.level)) || l.source === "Facter") continue;
      if (out.logs.length >= 50) break;
      out.logs.push({ level: String(l.level), ...(typeof l.source === "string" ? { source: l.source } : {}), message: String(l.message ?? "").slice(0, 1000) });
    }
  }
  return out;
}

/** The last run's report file, when it is there and not larger than `maxBytes` (reports of huge catalogs are skipped). */
export function readLastRunReport(path: string, maxBytes = 32 * 1024 * 1024): ReportDetails | undefined {
  try {
    if (statSync(path).size > maxBytes) return undefined;
    return reportDetails(parse(readFileSync(path, "utf8"), { logLevel: "silent", maxAliasCount: -1 }));
  } catch {
    return undefined;
  }
}
