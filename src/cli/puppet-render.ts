import type { RpcResult } from "../client/client.js";
import type { ProgressEvent, RunallReport, RunOutcome } from "../fleet/runall.js";
import { Status } from "../protocol/status.js";
import { bold, green, red, UNVERIFIED, unverifiedMark, yellow } from "./style.js";

// Text for `muster puppet ...`: runall's progress lines (mc-puppetd's shape) and summary, status,
// count and summary tables. Pure functions of their inputs.

/** `2026-11-21 07:09:56.123` in local time: the stamp of runall's progress lines. */
export function stamp(ms: number): string {
  const d = new Date(ms);
  const p = (n: number, w = 2) => String(n).padStart(w, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

const secs = (ms: number) => `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;

const colour: Record<RunOutcome, (s: string) => string> = {
  ok: green,
  changed: green,
  failed: red,
  skipped: yellow,
  busy: yellow,
  vanished: red,
  timeout: red,
  cancelled: yellow,
};

/** One progress line, or undefined for events not worth a line. */
export function progressLine(e: ProgressEvent): string | undefined {
  switch (e.type) {
    case "start":
      return `${stamp(e.at)}> Running ${e.identity}, concurrency is ${e.running}`;
    case "finish":
      return `${stamp(e.at)}> ${e.identity} ${colour[e.outcome](e.outcome)}${e.durationMs !== undefined ? ` after ${secs(e.durationMs)}` : ""}${e.detail ? `: ${e.detail}` : ""} (${e.done}/${e.total} done)`;
    case "skip":
      return `${stamp(e.at)}> Skipping ${e.identity} (${colour[e.outcome](e.outcome)})${e.detail ? `: ${e.detail}` : ""}`;
  }
}

const ORDER: RunOutcome[] = ["ok", "changed", "failed", "skipped", "busy", "vanished", "timeout", "cancelled"];

export function renderRunallSummary(r: RunallReport, unverified: readonly string[] = []): string {
  const mark = unverifiedMark(unverified);
  const rows = r.nodes.map((n) => [`${n.identity}${mark(n.identity)}`, n.outcome, n.exitcode === null ? "" : String(n.exitcode), n.durationMs === undefined ? "" : secs(n.durationMs), n.detail.replace(/\s+/g, " ").slice(0, 100)]);
  const head = ["NODE", "RESULT", "EXIT", "TIME", "DETAIL"];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const lines = [bold(head.map((h, i) => h.padEnd(widths[i]!)).join("  ").trimEnd())];
  for (const row of rows) lines.push(row.map((c, i) => (i === 1 ? colour[c as RunOutcome](c.padEnd(widths[i]!)) : c.padEnd(widths[i]!))).join("  ").trimEnd());
  const skipped = r.nodes.filter((n) => n.outcome === "skipped");
  if (skipped.length) {
    lines.push("", yellow(`Skipped, Puppet disabled (${skipped.length}):`));
    for (const n of skipped) lines.push(`   ${n.identity}${n.detail ? `  ${n.detail}` : ""}`);
  }
  const lost = r.nodes.filter((n) => n.outcome === "vanished" || n.outcome === "timeout");
  if (lost.length) {
    lines.push("", red(`Not heard from (${lost.length}):`));
    for (const n of lost) lines.push(`   ${n.identity}  ${n.detail}`);
  }
  const counts = ORDER.filter((o) => r.counts[o] > 0).map((o) => `${r.counts[o]} ${o}`);
  lines.push("", `${r.nodes.length} nodes: ${counts.join(", ") || "none"}`);
  lines.push(`makespan ${secs(r.makespanMs)} (first start to last end) with concurrency ${r.concurrency}, at most ${r.maxConcurrency} at once`);
  if (unverified.length) lines.push(`${unverified.length} of ${r.nodes.length} nodes ${UNVERIFIED}: no known key for their sender`);
  return lines.join("\n");
}

/** The exit code of a runall: 0 every run ok (disabled nodes skipped are fine), 2 some did not, 1 no nodes. */
export function runallExitCode(r: RunallReport): number {
  if (r.nodes.length === 0) return 1;
  const bad = r.counts.failed + r.counts.vanished + r.counts.timeout + r.counts.busy + r.counts.cancelled;
  return bad > 0 ? 2 : 0;
}

const ok = (res: RpcResult) => res.replies.filter((r) => r.statuscode === Status.OK).sort((a, b) => a.sender.localeCompare(b.sender));

export function renderStatus(res: RpcResult): string {
  const replies = [...res.replies].sort((a, b) => a.sender.localeCompare(b.sender));
  const width = Math.min(40, Math.max(10, ...replies.map((r) => r.sender.length)));
  const mark = unverifiedMark(res.unverified);
  return replies
    .map((r) => {
      if (r.statuscode !== Status.OK) return `${r.sender.padEnd(width)}: ${red(r.statusmsg)}${mark(r.sender)}`;
      const d = r.data;
      const lock = d.enabled === false && typeof d.disable_message === "string" ? ` (${d.disable_message})` : "";
      const text = `${String(d.message ?? d.status ?? "")}${lock}`;
      return `${r.sender.padEnd(width)}: ${d.enabled === false ? yellow(text) : text}${mark(r.sender)}`;
    })
    .join("\n");
}

/** The nodes that answered with a failure, each with its reason, as mco prints them under its own output. */
export function renderFailures(res: RpcResult, title: string): string[] {
  const failed = res.replies.filter((r) => r.statuscode !== Status.OK).sort((a, b) => a.sender.localeCompare(b.sender));
  if (!failed.length) return [];
  const width = Math.min(40, Math.max(...failed.map((r) => r.sender.length)));
  const mark = unverifiedMark(res.unverified);
  return ["", red(`${title} (${failed.length}):`), ...failed.map((r) => `   ${r.sender.padEnd(width)}: ${r.statusmsg || `status ${r.statuscode}`}${mark(r.sender)}`)];
}

export function renderCount(res: RpcResult): string {
  const st = ok(res).map((r) => r.data);
  const n = (p: (d: Record<string, unknown>) => boolean) => st.filter(p).length;
  const rows: [string, number][] = [
    ["Nodes currently enabled", n((d) => d.enabled === true)],
    ["Nodes currently disabled", n((d) => d.enabled === false)],
    ["", -1],
    ["Nodes currently doing puppet runs", n((d) => d.applying === true)],
    ["Nodes currently stopped", n((d) => d.status === "stopped")],
    ["", -1],
    ["Nodes with daemons started", n((d) => d.daemon_present === true)],
    ["Nodes without daemons started", n((d) => d.daemon_present !== true)],
    ["Daemons started but idling", n((d) => d.idling === true)],
  ];
  const w = Math.max(...rows.map(([l]) => l.length));
  return [`Total Puppet nodes: ${st.length}`, "", ...rows.map(([l, v]) => (v < 0 ? "" : `${l.padStart(w)}: ${v}`)), ...renderFailures(res, "Not counted, failed")].join("\n");
}

const SUMMARY_FIELDS: [string, string, boolean][] = [
  ["total_resources", "Total resources", false],
  ["out_of_sync_resources", "Out of sync resources", false],
  ["failed_resources", "Failed resources", false],
  ["changed_resources", "Changed resources", false],
  ["corrected_resources", "Corrected resources", false],
  ["config_retrieval_time", "Config retrieval time (s)", true],
  ["total_time", "Total run time (s)", true],
  ["since_lastrun", "Time since last run (s)", false],
];

/** mco puppet summary: min, average and max of the last run's figures over the nodes. */
export function renderSummaryStats(res: RpcResult): string {
  const data = ok(res).map((r) => r.data);
  const w = Math.max(...SUMMARY_FIELDS.map(([, l]) => l.length));
  const lines = [`Summary statistics for ${data.length} nodes:`, ""];
  for (const [key, label, float] of SUMMARY_FIELDS) {
    const vals = data.map((d) => d[key]).filter((v): v is number => typeof v === "number" && Number.isFinite(v));
    if (!vals.length) {
      lines.push(`${label.padStart(w)}:  no data`);
      continue;
    }
    const f = (v: number) => (float ? v.toFixed(2) : Number.isInteger(v) ? String(v) : v.toFixed(1));
    const avg = vals.reduce((a, b) => a + b, 0) / vals.length;
    lines.push(`${label.padStart(w)}:  min ${f(Math.min(...vals)).padStart(8)}  avg ${(float ? avg.toFixed(2) : avg.toFixed(1)).padStart(8)}  max ${f(Math.max(...vals)).padStart(8)}`);
  }
  const versions = new Map<string, number>();
  for (const d of data) if (typeof d.config_version === "string") versions.set(d.config_version, (versions.get(d.config_version) ?? 0) + 1);
  if (versions.size) lines.push("", `${"Config versions".padStart(w)}:  ${[...versions].sort((a, b) => b[1] - a[1]).map(([v, c]) => `${v} (${c})`).join(", ")}`);
  const failedNodes = data.length ? ok(res).filter((r) => typeof r.data.failed_resources === "number" && r.data.failed_resources > 0).map((r) => r.sender) : [];
  const mark = unverifiedMark(res.unverified);
  if (failedNodes.length) lines.push("", red(`Nodes whose last run had failures (${failedNodes.length}):`), ...failedNodes.map((n) => `   ${n}${mark(n)}`));
  lines.push(...renderFailures(res, "No summary from"));
  return lines.join("\n");
}
