import type { HealthReport, HealthSummary, NodeHealth, ProblemKind } from "../health/model.js";
import { green, red, yellow } from "./style.js";

// `muster health` as people read it: unhealthy nodes first, each problem on its own line with why,
// then (unless --problems) the healthy ones, then a summary line.

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

export function renderHealth(r: HealthReport, o: { problemsOnly?: boolean } = {}): string {
  const rows: [string, string, string][] = [];
  for (const n of r.nodes) {
    if (n.problems.length === 0) {
      if (!o.problemsOnly) rows.push([n.identity, "ok", healthyLine(n)]);
      continue;
    }
    n.problems.forEach((p, i) => rows.push([i === 0 ? n.identity : "", PROBLEM_LABELS[p.kind], p.why]));
  }
  const w0 = Math.max(4, ...rows.map((r) => r[0].length));
  const w1 = Math.max(6, ...rows.map((r) => r[1].length));
  const paint = (label: string, s: string) => (label === "ok" ? green(s) : label.startsWith("Puppet stale") || label.startsWith("Puppet disabled") || label.startsWith("PuppetDB: no report") ? yellow(s) : red(s));
  const lines = rows.map(([id, label, why]) => `${id.padEnd(w0)}  ${paint(label, label.padEnd(w1))}  ${why}`.trimEnd());
  if (rows.length) lines.unshift(`${"NODE".padEnd(w0)}  ${"HEALTH".padEnd(w1)}  WHY`);
  if (o.problemsOnly && r.summary.healthy > 0) lines.push(`(and ${r.summary.healthy} healthy node${r.summary.healthy === 1 ? "" : "s"})`);
  lines.push("", summaryLine(r.summary));
  return lines.join("\n");
}
