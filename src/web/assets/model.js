// Pure view logic of the console (no DOM, no fetch): ordering, timelines, formatting. The views in
// the other modules only render what these functions decide, and test/web/model.test.ts checks them.

/** Board order: failed nodes first (they need an operator), then gone ones, working, waiting, done; by name within. */
export const STATUS_ORDER = { failed: 0, in_progress: 2, pending: 3, done: 4 };

const statusRank = (n) => (n.gone ? 1 : (STATUS_ORDER[n.status] ?? 5));
const byName = (a, b) => (a.identity < b.identity ? -1 : a.identity > b.identity ? 1 : 0);

/** @param {{status: string, identity: string, gone?: unknown}} a @param {{status: string, identity: string, gone?: unknown}} b */
export function boardOrder(a, b) {
  return statusRank(a) - statusRank(b) || byName(a, b);
}

/** Columns the board sorts by (its `sort` URL parameter); `status` is the board's own order. */
export const BOARD_SORTS = ["status", "identity", "stage", "master", "elapsed", "tries"];

/**
 * The board's rows in the order asked: a column and a direction; ties by the board's order.
 * `elapsed` is live for running nodes (seconds at `now`).
 */
export function sortBoard(nodes, sort = "status", dir = "asc", now = Date.now()) {
  const key = {
    status: null,
    identity: null,
    stage: (n) => n.stage ?? "",
    master: (n) => n.master ?? "",
    elapsed: (n) => elapsedSeconds(n, now) ?? -1,
    tries: (n) => n.tries ?? 0,
  }[sort];
  const sign = dir === "desc" ? -1 : 1;
  let cmp;
  if (sort === "identity") cmp = (a, b) => sign * byName(a, b);
  else if (!key) cmp = (a, b) => sign * boardOrder(a, b);
  else
    cmp = (a, b) => {
      const x = key(a);
      const y = key(b);
      return (x < y ? -sign : x > y ? sign : 0) || boardOrder(a, b);
    };
  return [...nodes].sort(cmp);
}

/** Fewer completed runs of a stage than this, and nobody can say how long it usually takes. */
export const STUCK_MIN_SAMPLES = 5;
/** Never "stuck" sooner than this, however fast a stage usually is. */
export const STUCK_MIN_MS = 60_000;

/**
 * Is a node in progress stuck: on its stage for longer than the stage usually takes (twice its
 * p95 over the completed runs in the records, at least a minute)? `stages` is the progress
 * figures' per-stage list. Null when not stuck, not in progress, or there is too little to compare.
 * @returns {{stage: string, since: number, for_ms: number, usual_ms: number} | null}
 */
export function stuckInfo(node, stages, now) {
  if (node.status !== "in_progress" || node.gone || node.waiting) return null;
  const running = (node.timeline ?? []).find((t) => !t.end && t.stage === node.stage) ?? (node.timeline ?? []).findLast((t) => !t.end);
  if (!running) return null;
  const stat = (stages ?? []).find((s) => s.stage === running.stage);
  if (!stat || stat.samples < STUCK_MIN_SAMPLES || stat.p95_ms == null) return null;
  const since = Date.parse(running.start);
  if (!Number.isFinite(since)) return null;
  const forMs = now - since;
  return forMs > Math.max(2 * stat.p95_ms, STUCK_MIN_MS) ? { stage: running.stage, since, for_ms: forMs, usual_ms: stat.p95_ms } : null;
}

/** "3 min ago", "in 2 h", "just now": a time relative to `now` (both ms). */
export function formatRelative(ms, now) {
  if (ms == null || !Number.isFinite(ms)) return "";
  const d = Math.round((now - ms) / 1000);
  const a = Math.abs(d);
  const say = (n, unit) => (d >= 0 ? `${n} ${unit} ago` : `in ${n} ${unit}`);
  if (a < 10) return "just now";
  if (a < 60) return say(a, "s");
  if (a < 3600) return say(Math.round(a / 60), "min");
  if (a < 48 * 3600) return say(Math.round(a / 360) / 10, "h");
  return say(Math.round(a / 86400), "days");
}

/** The exact time in the operator's own time zone, named: what hovering over a relative time shows. */
export function localTime(ms) {
  return new Date(ms).toLocaleString([], { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" });
}

/** Problem kinds of fleet health (src/health/model.ts), worst first, as the landing page names them. */
export const HEALTH_KINDS = [
  { kind: "unreachable", label: "Unreachable", one: "unreachable" },
  { kind: "puppetdb_active", label: "Unreachable, active in PuppetDB", one: "active in PuppetDB" },
  { kind: "gone", label: "Gone", one: "gone" },
  { kind: "provisioning_failed", label: "Provisioning failed", one: "provisioning failed" },
  { kind: "puppet_failed", label: "Puppet failed", one: "Puppet failed" },
  { kind: "puppet_disabled", label: "Puppet disabled", one: "Puppet disabled" },
  { kind: "puppetdb_no_report", label: "No report in PuppetDB", one: "no report in PuppetDB" },
  { kind: "puppet_stale", label: "Puppet stale", one: "Puppet stale" },
];

/** The unhealthy nodes of a health view grouped by problem kind, in HEALTH_KINDS order: [{kind, label, nodes: [{identity, why, since}]}]. */
export function healthGroups(nodes) {
  return HEALTH_KINDS.map((k) => ({
    ...k,
    nodes: (nodes ?? []).flatMap((n) => (n.problems ?? []).filter((p) => p.kind === k.kind).map((p) => ({ identity: n.identity, why: p.why, since: p.since ?? null }))),
  }));
}

/** The site's roles as the landing page names them, in the order the site is built (src/protocol/service.ts). */
export const SERVICE_ROLES = [
  { role: "broker", label: "Broker" },
  { role: "master", label: "Puppet master" },
  { role: "provisioner", label: "Provisioner" },
  { role: "registry", label: "Registry" },
  { role: "console", label: "Console" },
  { role: "notifier", label: "Notifier" },
];

/**
 * One row per service of the site for the landing page: its state (ok, warn, down, unobserved,
 * failing: the worst problem, else warn when a check warns), why in one line, and every check.
 */
export function siteRows(services) {
  const label = Object.fromEntries(SERVICE_ROLES.map((r) => [r.role, r.label]));
  return (services ?? []).map((s) => {
    const p = s.problems?.[0];
    const warns = (s.checks ?? []).filter((c) => c.status === "warn");
    const state = p ? p.kind : warns.length ? "warn" : "ok";
    const why = p ? (s.problems ?? []).map((x) => x.why).join("; ") : warns.length ? warns.map((c) => `${c.name}: ${c.why}`).join("; ") : (s.checks ?? []).map((c) => c.name).join(", ") || "alive";
    return { name: s.name, role: s.role, roleLabel: label[s.role] ?? s.role, state, why, observer: s.observer ?? null, checks: s.checks ?? [], lastSeen: s.last_seen ?? null };
  });
}

/** How fresh a health view is, in seconds: from the view's fresh_as_of (the last probe that came back), else its time. */
export function freshSeconds(view, time, now) {
  const at = Date.parse(view?.fresh_as_of ?? time ?? "");
  return Number.isFinite(at) ? Math.max(0, Math.round((now - at) / 1000)) : null;
}

/** The tab's title: the number of nodes with problems first, when there are any. */
export function titleWithProblems(title, unhealthy) {
  return unhealthy > 0 ? `(${unhealthy}) ${title}` : title;
}

/** Nodes that became unhealthy since the previous view (for browser notifications): [{identity, why}]. */
export function newProblems(before, after) {
  const had = new Set((before ?? []).map((n) => `${n.identity}\u0000${n.problems?.[0]?.kind}`));
  return (after ?? []).filter((n) => n.problems?.length && !had.has(`${n.identity}\u0000${n.problems[0].kind}`)).map((n) => ({ identity: n.identity, kind: n.problems[0].kind, why: n.problems[0].why }));
}

/** "3.2 per minute" style rates and "about 14 min" ETAs. */
export function formatEta(seconds) {
  if (seconds == null || !Number.isFinite(seconds)) return "no estimate";
  if (seconds === 0) return "nothing left";
  if (seconds < 60) return "under a minute";
  if (seconds < 3600) return `about ${Math.round(seconds / 60)} min`;
  const h = Math.floor(seconds / 3600);
  return `about ${h} h ${String(Math.round((seconds % 3600) / 60)).padStart(2, "0")} min`;
}

/**
 * One CSV line per row, RFC 4180 quoting. A text cell a spreadsheet would run as a formula (it
 * starts with = + - @, tab or CR) gets a leading ' so opening the file runs nothing.
 */
export function toCsv(rows, columns) {
  const cell = (v) => {
    if (v === undefined || v === null) return "";
    let t = typeof v === "string" ? v : typeof v === "number" || typeof v === "boolean" ? String(v) : JSON.stringify(v);
    if (typeof v === "string" && /^[=+\-@\t\r]/.test(t)) t = `'${t}`;
    return /[",\r\n]/.test(t) ? `"${t.replace(/"/g, '""')}"` : t;
  };
  return [columns.map(cell).join(","), ...rows.map((r) => columns.map((c) => cell(r[c])).join(","))].join("\r\n") + "\r\n";
}

/** The board's rows as exported (CSV and JSON): what the table shows, one flat object a node, with its times (ISO). */
export function boardExportRows(nodes, stages, now) {
  return nodes.map((n) => {
    const stuck = stuckInfo(n, stages, now);
    return {
      identity: n.identity,
      status: n.status,
      stage: n.stage ?? "",
      master: n.master ?? "",
      started: n.started ?? null,
      finished: n.finished ?? null,
      updated: n.updated ?? null,
      elapsed_s: elapsedSeconds(n, now) == null ? null : Math.round(elapsedSeconds(n, now)),
      tries: n.tries ?? 0,
      rounds: n.rounds ?? 0,
      gone_since: n.gone?.since ?? null,
      gone_reason: n.gone?.reason ?? null,
      stuck_for_s: stuck ? Math.round(stuck.for_ms / 1000) : null,
      last_error: n.last_error ?? null,
    };
  });
}
export const BOARD_EXPORT_COLUMNS = ["identity", "status", "stage", "master", "started", "finished", "updated", "elapsed_s", "tries", "rounds", "gone_since", "gone_reason", "stuck_for_s", "last_error"];

/** {os: {family: "Debian"}} -> {"os.family": "Debian"}: structured values as dotted keys, the names filters use. Lists stay whole. */
export function flattenFacts(obj, prefix = "", out = {}) {
  for (const [k, v] of Object.entries(obj ?? {})) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (v && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length) flattenFacts(v, key, out);
    else out[key] = v;
  }
  return out;
}

/**
 * Facts grouped by their first name part (os.*, networking.*), one group "(top level)" for plain
 * ones, each sorted; only those whose dotted name or value contains `find` (case-insensitive).
 * @returns {{name: string, entries: [string, unknown][]}[]}
 */
export function factGroups(facts, find = "") {
  const needle = find.trim().toLowerCase();
  const groups = new Map();
  const flat = flattenFacts(facts);
  for (const key of Object.keys(flat).sort()) {
    const v = flat[key];
    if (needle && !key.toLowerCase().includes(needle) && !cellText(v).toLowerCase().includes(needle)) continue;
    const dot = key.indexOf(".");
    const name = dot < 0 ? "(top level)" : key.slice(0, dot);
    if (!groups.has(name)) groups.set(name, []);
    groups.get(name).push([key, v]);
  }
  return [...groups.entries()].sort(([a], [b]) => (a === "(top level)" ? -1 : b === "(top level)" ? 1 : a < b ? -1 : 1)).map(([name, entries]) => ({ name, entries }));
}

/**
 * The explorer's rows for export: identity and the chosen columns, where a column naming a
 * structured fact becomes one column per value inside it, by its dotted name (os -> os.family,
 * os.release.major), never JSON in a cell. Returns the rows and the columns in order.
 */
export function explorerExport(rows, columns) {
  const cols = ["identity"];
  const out = rows.map((r) => {
    const row = { identity: r.identity };
    for (const c of columns) {
      const v = r.columns?.[c];
      if (v && typeof v === "object" && !Array.isArray(v)) Object.assign(row, flattenFacts(v, c));
      else row[c] = v;
    }
    for (const k of Object.keys(row)) if (!cols.includes(k)) cols.push(k);
    return row;
  });
  return { rows: out, columns: cols };
}

/** {view, arg, params} back to a hash: what parseRoute reads (empty params left out). */
export function routeHash(view, arg, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  const qs = q.toString();
  return `#/${view}${arg ? `/${encodeURIComponent(arg)}` : ""}${qs ? `?${qs}` : ""}`;
}

/** The board's find box: part of the node's name, or exactly its status, stage or master. */
export function matchesFind(node, find) {
  if (!find) return true;
  return node.identity.includes(find) || node.status === find || node.stage === find || node.master === find;
}

/** Counts per status, for the board's summary line. */
export function statusCounts(nodes) {
  const counts = { failed: 0, in_progress: 0, pending: 0, done: 0 };
  for (const n of nodes) counts[n.status] = (counts[n.status] ?? 0) + 1;
  return counts;
}

/**
 * A node's timeline as bar segments: each stage's share of the whole span (a running stage ends
 * at `now`), so where the time went shows at a glance. Fractions add up to 1 when there is a span.
 * @param {{stage: string, start: string, end?: string}[]} timeline
 * @param {number} now ms epoch
 * @returns {{stage: string, ms: number, fraction: number, running: boolean}[]}
 */
export function timelineSegments(timeline, now, scaleMs) {
  if (!Array.isArray(timeline) || timeline.length === 0) return [];
  const segs = timeline.map((t) => {
    const start = Date.parse(t.start);
    const end = t.end ? Date.parse(t.end) : now;
    const ms = Number.isFinite(start) && Number.isFinite(end) ? Math.max(0, end - start) : 0;
    return { stage: t.stage, ms, running: !t.end };
  });
  const total = segs.reduce((s, x) => s + x.ms, 0);
  // On a common scale (every row of the board against the same span) a stage's width is its time
  // over the scale; otherwise its share of the node's own time.
  const denom = scaleMs > 0 ? Math.max(scaleMs, total) : total;
  return segs.map((s) => ({ ...s, fraction: denom > 0 ? s.ms / denom : 1 / segs.length }));
}

/** The total time of a timeline (ms), a running stage ending at `now`. */
export function timelineTotal(timeline, now) {
  return timelineSegments(timeline, now).reduce((s, x) => s + x.ms, 0);
}

/**
 * The board's common time scale: the longest of the nodes' timelines, rounded up to a readable
 * span (so rows compare at a glance and the scale does not jitter as a running node grows).
 */
export function timelineScale(nodes, now) {
  let max = 0;
  for (const n of nodes) max = Math.max(max, timelineTotal(n.timeline, now));
  const steps = [10e3, 30e3, 60e3, 120e3, 300e3, 600e3, 900e3, 1800e3, 3600e3, 2 * 3600e3, 4 * 3600e3, 8 * 3600e3, 24 * 3600e3];
  return steps.find((s) => s >= max) ?? Math.ceil(max / (24 * 3600e3)) * 24 * 3600e3;
}

/** A timeline in words, for screen readers and the keyboard: "lock 1s, bootstrap 6s, production 3s (running)". */
export function timelineText(timeline, now) {
  const segs = timelineSegments(timeline, now);
  if (segs.length === 0) return "no stages yet";
  return segs.map((s) => `${s.stage} ${formatDuration(s.ms / 1000) || "0ms"}${s.running ? " (running)" : ""}`).join(", ");
}

/** Seconds as "700ms", "4s", "2m05s", "1h02m". */
export function formatDuration(seconds) {
  if (seconds == null || !Number.isFinite(seconds) || seconds < 0) return "";
  if (seconds < 1) return `${Math.round(seconds * 1000)}ms`;
  const s = Math.floor(seconds);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(s % 60).padStart(2, "0")}s`;
  const h = Math.floor(m / 60);
  return `${h}h${String(m % 60).padStart(2, "0")}m`;
}

/**
 * A provisioning record's summary line on the node page: "stage sign_csr, master m1, 12s, round 2",
 * with the failed tries of the current stage only when there are some (rounds are what a retry
 * adds to; tries start again at 0 with each round).
 */
export function provisioningLine(p, now) {
  const tries = p.tries ? `, ${p.tries} failed ${p.tries === 1 ? "try" : "tries"} of this stage` : "";
  return `stage ${p.stage || "none"}, master ${p.master ?? "none"}, ${formatDuration(elapsedSeconds(p, now))}, round ${p.rounds ?? 0}${tries}`;
}

const ROUND_EVENTS = { started: "round started", done: "provisioned", failed: "failed", retried: "retried", restarted: "node restarted", gone: "gone", back: "back" };

/**
 * A record's rounds (its history, oldest first) as the node page's table shows them, newest
 * first: what happened, with who for a start or a retry ("retried by alice (web console)"), the
 * stage and the detail (a failure's error, how a node was found gone, what a retried node was).
 */
export function roundRows(history) {
  return [...(history ?? [])].reverse().map((h) => ({
    at: h.at,
    round: h.round,
    event: h.event,
    what: `${ROUND_EVENTS[h.event] ?? h.event}${h.by ? ` by ${h.by}` : ""}`,
    stage: h.stage ?? "",
    detail: h.detail ?? "",
  }));
}

/**
 * The throughput chart's time labels: the buckets (oldest first) starting on the hour or half hour,
 * each with how its label is anchored at the bucket's left edge. Near the chart's ends a label is
 * anchored inward (start at the left, end at the right), so none reaches past the chart.
 */
export function chartTicks(buckets) {
  const n = buckets.length;
  return buckets.flatMap((b, i) => (new Date(b.start).getMinutes() % 30 === 0 ? [{ i, start: b.start, anchor: i > n - 12 ? "end" : i < 4 ? "start" : "middle" }] : []));
}

/** Elapsed seconds of a board node: live for one in progress, as the server said otherwise. */
export function elapsedSeconds(node, now) {
  if (node.status === "in_progress" && node.started) {
    const start = Date.parse(node.started);
    if (Number.isFinite(start)) return Math.max(0, (now - start) / 1000);
  }
  return node.elapsed_s;
}

/**
 * The caret line under a bad filter: spaces up to the 1-based column, then "^". A column past the
 * end points just after the last character (where the parser expected more).
 */
export function caretLine(source, column) {
  const col = Math.max(1, Math.min(Number(column) || 1, source.length + 1));
  return " ".repeat(col - 1) + "^";
}

/** "a, b,,c " -> ["a", "b", "c"]: the explorer's chosen fact columns, without duplicates. */
export function parseColumns(text) {
  const out = [];
  for (const part of String(text ?? "").split(",")) {
    const c = part.trim();
    if (c && !out.includes(c)) out.push(c);
  }
  return out;
}

/** The bars of a counts chart: each value's width relative to the largest count. */
export function countBars(counts) {
  const max = counts.reduce((m, c) => Math.max(m, c.count), 0);
  return counts.map((c) => ({ value: c.value, count: c.count, fraction: max > 0 ? c.count / max : 0 }));
}

/** The rows a virtual list renders for a scroll position: the visible ones plus `overscan` either side. */
export function visibleRange(scrollTop, viewportHeight, rowHeight, total, overscan = 8) {
  const first = Math.max(0, Math.floor(scrollTop / rowHeight) - overscan);
  const last = Math.min(total, Math.ceil((scrollTop + viewportHeight) / rowHeight) + overscan);
  return { first, last: Math.max(first, last) };
}

/** A cell value as text: strings as they are, everything else as JSON; missing as empty. */
export function cellText(v) {
  if (v === undefined || v === null) return "";
  if (typeof v === "string") return v;
  return JSON.stringify(v);
}

/** "#/explorer?filter=a%3Db&columns=x" -> {view: "explorer", arg: undefined, params: {filter: "a=b", columns: "x"}} */
export function parseRoute(hash) {
  const h = String(hash ?? "").replace(/^#\/?/, "");
  const q = h.indexOf("?");
  const path = q >= 0 ? h.slice(0, q) : h;
  const params = Object.fromEntries(new URLSearchParams(q >= 0 ? h.slice(q + 1) : ""));
  const slash = path.indexOf("/");
  const view = (slash >= 0 ? path.slice(0, slash) : path) || "health";
  const arg = slash >= 0 ? decodeURIComponent(path.slice(slash + 1)) : undefined;
  return { view, arg, params };
}

/**
 * The last Puppet run as people read it, from the puppet agent's last_run_summary (Puppet's own
 * counts and times), its last_run_report (every changed and failed resource with its messages) and
 * its status (whose last_runonce is the run this agent started, with its message, failed resources
 * and errors; used when it is the same run as the summary's, and where no report answered).
 * @returns {null | {status: "failed"|"changed"|"unchanged", label: string, at: number|null, duration_s: number|null,
 *   environment: string|null, config_version: string|null, puppet_version: string|null,
 *   counts: {name: string, value: number}[], failed_resources: {resource: string, messages: string[]}[],
 *   changed_resources: {resource: string, messages: string[]}[], left_out: number,
 *   errors: string[], message: string|null, enabled: boolean|null, disable_message: string|null, applying: boolean}}
 */
export function puppetRunView(summary, status, report = null) {
  const last = status?.last_runonce ?? null;
  if (!summary && !last && !report) return null;
  const s = summary ?? {};
  const at = Number(s.lastrun) > 0 ? Number(s.lastrun) * 1000 : Number.isFinite(last?.finished_at) ? last.finished_at : null;
  // the run this agent started is the summary's run when it ended within a few seconds of it
  const same = Boolean(last && (at === null || Math.abs((last.finished_at ?? 0) - at) < 10_000));
  const failedCount = Number(s.failed_resources ?? 0);
  const changedCount = Number(s.changed_resources ?? 0);
  const failed = failedCount > 0 || Number(s.events?.failure ?? 0) > 0 || (same && last.success === false);
  const changed = !failed && (changedCount > 0 || (same && last.changed === true));
  // The report (last_run_report.yaml) names every changed and failed resource with its messages;
  // without it, the run this agent started names its failed resources and errors.
  const fromReport = report && Array.isArray(report.resources);
  const errors = fromReport ? (report.logs ?? []).filter((l) => l.level !== "warning").map((l) => String(l.message)) : same && Array.isArray(last.errors) ? last.errors.map(String) : [];
  const failedResources = fromReport
    ? report.resources.filter((r) => r.status === "failed").map((r) => ({ resource: String(r.resource), messages: (r.messages ?? []).map(String) }))
    : same && Array.isArray(last.failed_resources)
      ? last.failed_resources.map((r) => ({ resource: String(r), messages: errors.filter((e) => e.includes(String(r))) }))
      : [];
  const changedResources = fromReport ? report.resources.filter((r) => r.status === "changed").map((r) => ({ resource: String(r.resource), messages: (r.messages ?? []).map(String) })) : [];
  const num = (v) => (Number.isFinite(Number(v)) ? Number(v) : 0);
  const duration = Number.isFinite(s.total_time) ? s.total_time : same && Number.isFinite(last.duration) ? last.duration : null;
  return {
    status: failed ? "failed" : changed ? "changed" : "unchanged",
    label: failed ? "failed" : changed ? "changed" : "no changes",
    at,
    duration_s: duration === null ? null : Math.round(duration * 10) / 10,
    environment: s.environment ?? (same ? (last.environment ?? null) : null),
    config_version: s.config_version == null ? null : String(s.config_version),
    puppet_version: s.puppet_version ?? null,
    counts: summary
      ? [
          { name: "resources", value: num(s.total_resources) },
          { name: "changed", value: changedCount },
          { name: "failed", value: failedCount },
          { name: "skipped", value: num(s.skipped_resources) },
          { name: "out of sync", value: num(s.out_of_sync_resources) },
          { name: "corrected drift", value: num(s.corrected_resources) },
        ]
      : [],
    failed_resources: failedResources,
    changed_resources: changedResources,
    left_out: fromReport ? Number(report.resources_left_out ?? 0) : 0,
    errors: errors.filter((e) => !failedResources.some((f) => f.messages.includes(e))),
    message: same ? (last.message ?? null) : null,
    enabled: typeof status?.enabled === "boolean" ? status.enabled : null,
    disable_message: status?.disable_message ?? null,
    applying: status?.applying === true,
  };
}

/** The nodes fleet health reports unreachable (from the health view's unhealthy nodes): a Set of identities. */
export function unreachableSet(healthNodes) {
  return new Set((healthNodes ?? []).filter((n) => n.reachable === false || (n.problems ?? []).some((p) => p.kind === "unreachable")).map((n) => n.identity));
}

/**
 * A board row's status as the operator should read it: the provisioner's status, and whether
 * health says the node is unreachable now (a node provisioned long ago stays "done" in its record
 * however dead it is).
 * @returns {{status: string, unreachable: boolean, label: string}}
 */
export function boardStatus(node, unreachable) {
  const down = unreachable?.has(node.identity) ?? false;
  return { status: node.status, unreachable: down, label: down ? `${node.status}, unreachable` : node.status };
}

const isPlainObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

/** Facter's `os` fact as people say it: "Debian 13 (trixie)"; what it lacks is left out. */
export function osText(os) {
  if (!isPlainObject(os)) return cellText(os);
  const name = os.name ?? os.distro?.id ?? os.family ?? "";
  const release = os.release?.major ?? os.release?.full ?? os.distro?.release?.major ?? "";
  const codename = os.distro?.codename ?? "";
  const text = [name, release].filter((x) => x !== "" && x != null).join(" ") + (codename ? ` (${codename})` : "");
  return text || cellText(os);
}

/**
 * A fact's value in a table cell: the `os` fact as its name and release, any other structured
 * value as its dotted parts ("family=Debian, release.major=13"), never raw JSON.
 */
export function factCellText(column, v) {
  if (!isPlainObject(v)) return cellText(v);
  if (column === "os" || column.endsWith(".os")) return osText(v);
  return Object.entries(flattenFacts(v))
    .map(([k, x]) => `${k}=${cellText(x)}`)
    .join(", ");
}

/**
 * The last Puppet run fleet health knows (its Puppet runs bucket: status, when, how long, counts),
 * for a node whose puppet agent was not asked or did not answer (it is unreachable): the same
 * shape as puppetRunView's, marked `known_only`. Null when health knows no run either.
 */
export function knownRunView(run) {
  if (!run || !run.status) return null;
  const at = typeof run.time === "number" ? run.time : Date.parse(run.time ?? run.last_run ?? "");
  const res = run.resources ?? null;
  return {
    status: run.status,
    label: run.status === "unchanged" ? "no changes" : run.status,
    at: Number.isFinite(at) ? at : null,
    duration_s: Number.isFinite(run.duration_s) ? Math.round(run.duration_s * 10) / 10 : null,
    environment: null,
    config_version: run.config_version ?? null,
    puppet_version: null,
    counts: res ? [{ name: "resources", value: res.total ?? 0 }, { name: "changed", value: res.changed ?? 0 }, { name: "failed", value: res.failed ?? 0 }] : [],
    failed_resources: [],
    changed_resources: [],
    left_out: 0,
    errors: [],
    message: null,
    enabled: null,
    disable_message: null,
    applying: false,
    known_only: true,
  };
}

const ALERT_EVENT_WORDS = { fired: "fired", resolved: "resolved", delivery_failed: "delivery failed", acknowledged: "acknowledged", silenced: "silenced", unsilenced: "silence ended", test: "test alert" };

/**
 * One event of the alerts' history as the Alerts page's table shows it: what happened, about what,
 * and who was told (or why nobody was, or what failed).
 * @returns {{what: string, about: string, detail: string, ok: boolean}}
 */
export function alertEventRow(e) {
  const about = e.identity ? `${e.identity}${e.kind && e.kind !== "test" ? ` ${e.kind.replace(/_/g, " ")}` : ""}` : "the admins";
  const what = e.type === "delivery_failed" ? `${ALERT_EVENT_WORDS[e.of] ?? e.of ?? "alert"} not delivered` : (ALERT_EVENT_WORDS[e.type] ?? e.type);
  let detail = "";
  if (e.type === "fired" || e.type === "resolved" || e.type === "test") detail = e.told?.length ? `told ${e.told.join(", ")}${e.notifier ? ` (through ${e.notifier})` : ""}` : e.held ? `nobody told: ${e.held}` : "nobody told";
  else if (e.type === "delivery_failed") detail = e.error ?? "";
  else if (e.type === "silenced") detail = `until ${localTime(e.until)}${e.note ? `: ${e.note}` : ""}`;
  else if (e.type === "acknowledged") detail = e.note ?? "";
  return { what, about, detail, ok: e.type !== "delivery_failed" };
}

/** The last delivery in a sentence (the Alerts page, the banner): who was told when, or what fails since when. */
export function deliveryText(d, now = Date.now()) {
  if (!d) return "No alert has been sent yet.";
  if (d.ok) return `The last alert reached ${d.told?.length ? d.told.join(", ") : "its recipients"}${d.notifier ? ` through ${d.notifier}` : ""}, ${formatRelative(Date.parse(d.at), now)}.`;
  const since = d.failing_since ? `, failing since ${formatRelative(Date.parse(d.failing_since), now)}` : "";
  return `Alerts are not reaching the admins${since}: ${d.error ?? "not delivered"}`;
}
