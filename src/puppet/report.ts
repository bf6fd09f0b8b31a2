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
