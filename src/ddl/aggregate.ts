import type { AgentDDL, AggregateSpec } from "./types.js";
import { findAction, findOutput } from "./util.js";

// Aggregates summarise the successful replies of one action, as declared in its DDL.
// Computation returns plain data (for --json); formatAggregate turns it into terminal lines.

interface AggregateBase {
  output: string;
  /** The output's display_as, or its name when the DDL does not declare it. */
  displayAs: string;
  format?: string;
}

export interface SummaryAggregate extends AggregateBase {
  function: "summary";
  /** Distinct values with their counts, most frequent first. */
  counts: { value: unknown; count: number }[];
}

export interface NumericAggregate extends AggregateBase {
  function: "average" | "sum";
  /** null for an average of no numbers. */
  value: number | null;
  /** How many numeric values went into it. */
  count: number;
}

export interface BooleanSummaryAggregate extends AggregateBase {
  function: "boolean_summary";
  true: number;
  false: number;
}

export type AggregateResult = SummaryAggregate | NumericAggregate | BooleanSummaryAggregate;

/** Computes every aggregate the action declares over the data of its successful replies. */
export function aggregateReplies(ddl: AgentDDL, action: string, replies: readonly Readonly<Record<string, unknown>>[]): AggregateResult[] {
  const spec = findAction(ddl, action);
  if (!spec?.aggregate) return [];
  return spec.aggregate.map((agg) => {
    const displayAs = findOutput(spec, agg.output)?.display_as ?? agg.output;
    const values = replies.map((r) => (Object.hasOwn(r, agg.output) ? r[agg.output] : undefined));
    return computeAggregate(agg, displayAs, values);
  });
}

/** One aggregate over the values of its output (undefined where a reply lacks it). */
export function computeAggregate(agg: AggregateSpec, displayAs: string, values: readonly unknown[]): AggregateResult {
  const base: AggregateBase = { output: agg.output, displayAs, ...(agg.format !== undefined ? { format: agg.format } : {}) };
  switch (agg.function) {
    case "summary":
      return { ...base, function: "summary", counts: summarise(values) };
    case "average":
    case "sum": {
      const nums = values.filter(isFiniteNumber);
      const sum = nums.reduce((a, b) => a + b, 0);
      const value = agg.function === "sum" ? sum : nums.length > 0 ? sum / nums.length : null;
      return { ...base, function: agg.function, value, count: nums.length };
    }
    case "boolean_summary":
      return {
        ...base,
        function: "boolean_summary",
        true: values.filter((v) => v === true).length,
        false: values.filter((v) => v === false).length,
      };
  }
}

function isFiniteNumber(v: unknown): v is number {
  return typeof v === "number" && Number.isFinite(v);
}

// Arrays count once per element (a node with classes [a, b] counts for a and for b);
// missing values are not a value.
function summarise(values: readonly unknown[]): { value: unknown; count: number }[] {
  const counts = new Map<string, { value: unknown; count: number }>();
  for (const v of values.flatMap((x) => (Array.isArray(x) ? x : [x]))) {
    if (v === undefined || v === null) continue;
    // Key by type and JSON so "1" and 1 stay distinct and equal objects group together.
    const key = `${typeof v}:${JSON.stringify(v)}`;
    const entry = counts.get(key);
    if (entry) entry.count++;
    else counts.set(key, { value: v, count: 1 });
  }
  return [...counts.values()].sort((a, b) => b.count - a.count || label(a.value).localeCompare(label(b.value)));
}

/** Terminal lines for one aggregate, MCollective style. */
export function formatAggregate(result: AggregateResult): string[] {
  switch (result.function) {
    case "summary":
      return table(`Summary of ${result.displayAs}:`, result.counts.map((c) => [fmt(result.format, c.value), String(c.count)]));
    case "boolean_summary":
      return table(`Summary of ${result.displayAs}:`, [
        ["true", String(result.true)],
        ["false", String(result.false)],
      ]);
    case "average":
    case "sum": {
      const title = result.function === "average" ? "Average" : "Sum";
      if (result.value === null) return [`${title} of ${result.displayAs}: no numeric values`];
      const shown = fmt(result.format ?? (result.function === "average" ? "%.2f" : undefined), result.value);
      const from = `${result.count} ${result.count === 1 ? "reply" : "replies"}`;
      return [`${title} of ${result.displayAs}: ${shown} (${from})`];
    }
  }
}

// Labels are right-aligned to the longest one, as `mco` prints summaries.
function table(title: string, rows: [string, string][]): string[] {
  if (rows.length === 0) return [title, "", "   (no values)"];
  const width = Math.max(...rows.map(([k]) => k.length));
  return [title, "", ...rows.map(([k, v]) => `   ${k.padStart(width)}: ${v}`)];
}

function label(v: unknown): string {
  if (typeof v === "string") return v;
  if (typeof v === "number") return formatNumber(v);
  return JSON.stringify(v) ?? String(v);
}

/** Removes binary float noise (0.1 + 0.2) without rounding away real digits. */
function formatNumber(n: number): string {
  return Number.isInteger(n) ? String(n) : String(Number(n.toPrecision(12)));
}

/**
 * A small printf subset for DDL `format`: %s, %d/%i, %f with optional width and precision
 * (`%10s`, `%.2f`), and %%. Without a format the value is shown as it is.
 */
export function fmt(format: string | undefined, value: unknown): string {
  if (format === undefined) return label(value);
  let used = false;
  const out = format.replace(/%(-)?(\d+)?(?:\.(\d+))?([sdif%])/g, (_m, left: string | undefined, width: string | undefined, prec: string | undefined, conv: string) => {
    if (conv === "%") return "%";
    used = true;
    // Caps keep a careless DDL from asking toFixed for more than it allows or padding wildly.
    const p = prec !== undefined ? Math.min(Number(prec), 20) : undefined;
    let s: string;
    if (conv === "s") s = p !== undefined ? label(value).slice(0, p) : label(value);
    else if (typeof value !== "number") s = label(value);
    else if (conv === "f") s = value.toFixed(p ?? 6);
    else s = String(Math.trunc(value));
    const w = width !== undefined ? Math.min(Number(width), 200) : 0;
    return left ? s.padEnd(w) : s.padStart(w);
  });
  return used ? out : `${out}${label(value)}`;
}
