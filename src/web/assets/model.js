// Pure view logic of the console (no DOM, no fetch): ordering, timelines, formatting. The views in
// the other modules only render what these functions decide, and test/web/model.test.ts checks them.

/** Board order: failed nodes first (they need an operator), then working, waiting, done; by name within. */
export const STATUS_ORDER = { failed: 0, in_progress: 1, pending: 2, done: 3 };

/** @param {{status: string, identity: string}} a @param {{status: string, identity: string}} b */
export function boardOrder(a, b) {
  const sa = STATUS_ORDER[a.status] ?? 4;
  const sb = STATUS_ORDER[b.status] ?? 4;
  if (sa !== sb) return sa - sb;
  return a.identity < b.identity ? -1 : a.identity > b.identity ? 1 : 0;
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
export function timelineSegments(timeline, now) {
  if (!Array.isArray(timeline) || timeline.length === 0) return [];
  const segs = timeline.map((t) => {
    const start = Date.parse(t.start);
    const end = t.end ? Date.parse(t.end) : now;
    const ms = Number.isFinite(start) && Number.isFinite(end) ? Math.max(0, end - start) : 0;
    return { stage: t.stage, ms, running: !t.end };
  });
  const total = segs.reduce((s, x) => s + x.ms, 0);
  return segs.map((s) => ({ ...s, fraction: total > 0 ? s.ms / total : 1 / segs.length }));
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
  const view = (slash >= 0 ? path.slice(0, slash) : path) || "board";
  const arg = slash >= 0 ? decodeURIComponent(path.slice(slash + 1)) : undefined;
  return { view, arg, params };
}
