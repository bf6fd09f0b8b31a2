import type { HealthReport, HealthSummary, NodeHealth, ProblemKind } from "../health/model.js";
import type { ServiceHealth, ServiceProblemKind, ServiceSummary } from "../health/services.js";
import { green, red, yellow } from "./style.js";

// `muster health` as people read it: first whether this view can see (a degraded one says why),
// then the site's services (brokers first, each with its role, unhealthy ones with why and their
// failing checks), then the nodes, unhealthy first, each problem on its own line with why, then
// (unless --problems) the healthy ones, then a summary line for each.

export const PROBLEM_LABELS: Record<ProblemKind, string> = {
  unreachable: "unreachable",
  puppetdb_active: "PuppetDB: active",
  gone: "gone",
  provisioning_failed: "provisioning failed",
  puppet_failed: "Puppet failed",
  puppet_disabled: "Puppet disabled",
  puppetdb_no_report: "PuppetDB: no report",
  puppet_stale: "Puppet stale",
};

export const SERVICE_PROBLEM_LABELS: Record<ServiceProblemKind, string> = { down: "down", unobserved: "unobserved", failing: "failing" };

function healthyLine(n: NodeHealth): string {
  const parts = [n.seen_s_ago !== null ? `seen ${n.seen_s_ago} s ago` : "registered (no heartbeats)"];
  if (n.puppet?.status) parts.push(`Puppet ${n.puppet.status === "unchanged" ? "no changes" : n.puppet.status} ${n.puppet.age_s ?? 0} s ago${n.puppet.source === "puppetdb" ? " (PuppetDB)" : ""}`);
  if (n.provisioning && n.provisioning.status !== "done") parts.push(`provisioning ${n.provisioning.status}${n.provisioning.stage ? ` at ${n.provisioning.stage}` : ""}`);
  return parts.join(", ");
}

export function summaryLine(s: HealthSummary): string {
  const parts = (Object.keys(PROBLEM_LABELS) as ProblemKind[]).filter((k) => s[k] > 0).map((k) => `${s[k]} ${PROBLEM_LABELS[k]}`);
  return `${s.nodes} node${s.nodes === 1 ? "" : "s"}: ${s.healthy} healthy, ${s.unhealthy} unhealthy${parts.length ? ` (${parts.join(", ")})` : ""}`;
}

export function serviceSummaryLine(s: ServiceSummary): string {
  const parts = (Object.keys(SERVICE_PROBLEM_LABELS) as ServiceProblemKind[]).filter((k) => s[k] > 0).map((k) => `${s[k]} ${SERVICE_PROBLEM_LABELS[k]}`);
  return `${s.services} service${s.services === 1 ? "" : "s"}: ${s.healthy} healthy, ${s.unhealthy} unhealthy${parts.length ? ` (${parts.join(", ")})` : ""}`;
}

const paint = (label: string, s: string) => (label === "ok" ? green(s) : label.startsWith("Puppet stale") || label.startsWith("Puppet disabled") || label.startsWith("PuppetDB: no report") || label === "warn" ? yellow(s) : red(s));

/** Rows as aligned columns under a header. */
function table(header: string[], rows: string[][], labelColumn: number): string[] {
  const widths = header.slice(0, -1).map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (r: string[], painted: boolean) =>
    r
      .map((c, i) => (i === r.length - 1 ? c : painted && i === labelColumn ? paint(c, c.padEnd(widths[i]!)) : c.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  return [line(header, false), ...rows.map((r) => line(r, true))];
}

function serviceRows(list: readonly ServiceHealth[], problemsOnly: boolean): string[][] {
  const rows: string[][] = [];
  for (const s of list) {
    const warns = s.checks.filter((c) => c.status === "warn");
    if (s.problems.length === 0) {
      if (problemsOnly && !warns.length) continue;
      rows.push([s.name, s.role, "ok", `${s.checks.filter((c) => c.status === "ok").map((c) => c.name).join(", ") || "alive"}${s.observer ? ` (as ${s.observer} sees it)` : ""}`]);
    } else s.problems.forEach((p, i) => rows.push([i === 0 ? s.name : "", i === 0 ? s.role : "", SERVICE_PROBLEM_LABELS[p.kind], p.why]));
    for (const w of warns) rows.push(["", "", "warn", `${w.name}: ${w.why}`]);
  }
  return rows;
}

export function renderHealth(r: HealthReport, o: { problemsOnly?: boolean } = {}): string {
  const lines: string[] = [];
  if (r.view.degraded) lines.push(red(`This view cannot see since ${r.view.since}: ${r.view.why}. Nobody is marked unreachable for the silence meanwhile.`), "");
  if (r.services.length) {
    const rows = serviceRows(r.services, o.problemsOnly === true);
    if (rows.length) lines.push(...table(["SERVICE", "ROLE", "HEALTH", "WHY"], rows, 2), "");
    else lines.push(`(all ${r.services.length} services healthy)`, "");
  }
  const rows: string[][] = [];
  for (const n of r.nodes) {
    if (n.problems.length === 0) {
      if (!o.problemsOnly) rows.push([n.identity, "ok", healthyLine(n)]);
      continue;
    }
    n.problems.forEach((p, i) => rows.push([i === 0 ? n.identity : "", PROBLEM_LABELS[p.kind], p.why]));
  }
  if (rows.length) lines.push(...table(["NODE", "HEALTH", "WHY"], rows, 1));
  if (o.problemsOnly && r.summary.healthy > 0) lines.push(`(and ${r.summary.healthy} healthy node${r.summary.healthy === 1 ? "" : "s"})`);
  lines.push("");
  if (r.services.length) lines.push(serviceSummaryLine(r.service_summary));
  lines.push(summaryLine(r.summary));
  return lines.join("\n");
}
