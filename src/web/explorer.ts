import { buildFilter, FilterError } from "../filter/index.js";
import { lookupFact } from "../protocol/facts.js";
import type { Filter } from "../protocol/types.js";

// The fleet explorer: the registry's answer to a filter, as pages of chosen columns and as counts
// by fact value (what `muster facts` prints). Pure: nodes in, rows out.

/** A node as the registry's HTTP API returns it (src/registry/record.ts nodeView). */
export interface ExplorerNode {
  identity: string;
  facts: Record<string, unknown>;
  classes: string[];
  agents: string[];
  collectives: string[];
  last_seen?: number;
  age_seconds?: number;
}

export const MAX_PAGE = 1000;
export const MAX_COLUMNS = 50;

/**
 * The filter box's text as a wire filter: muster's compound language (-S), the same parser as the
 * CLI. Throws FilterError with the column of the problem.
 */
export function explorerFilter(text: string): Filter {
  const t = text.trim();
  return buildFilter(t ? { select: [t] } : {});
}

export interface FilterProblem {
  code: "filter";
  message: string;
  /** 1-based column into the filter text; 0 when the problem has no place. */
  column: number;
}

export function filterProblem(e: FilterError): FilterProblem {
  return { code: "filter", message: e.reason, column: e.column };
}

/** Columns as asked (`a,b`), checked: fact paths, or the pseudo-columns below. */
export function parseColumns(q: string | undefined): string[] {
  const cols = (q ?? "")
    .split(",")
    .map((c) => c.trim())
    .filter(Boolean);
  if (cols.length > MAX_COLUMNS) throw new Error(`at most ${MAX_COLUMNS} columns`);
  for (const c of cols) if (c.length > 200 || /[\s\u0000-\u001f]/.test(c)) throw new Error(`column ${JSON.stringify(c.slice(0, 40))} is not a fact name`);
  return [...new Set(cols)];
}

/** Columns that are not facts. */
const PSEUDO: Record<string, (n: ExplorerNode) => unknown> = {
  "@classes": (n) => n.classes.length,
  "@agents": (n) => n.agents.join(","),
  "@collectives": (n) => n.collectives.join(","),
  "@age": (n) => n.age_seconds ?? null,
};

export function columnValue(n: ExplorerNode, col: string): unknown {
  const pseudo = PSEUDO[col];
  if (pseudo) return pseudo(n);
  const v = lookupFact(n.facts ?? {}, col);
  return v === undefined ? null : v;
}

export function page(nodes: readonly ExplorerNode[], columns: readonly string[], offset: number, limit: number): { total: number; nodes: { identity: string; columns: Record<string, unknown> }[] } {
  const sorted = [...nodes].sort((a, b) => (a.identity < b.identity ? -1 : a.identity > b.identity ? 1 : 0));
  const slice = sorted.slice(Math.max(0, offset), Math.max(0, offset) + Math.min(Math.max(0, limit), MAX_PAGE));
  return { total: nodes.length, nodes: slice.map((n) => ({ identity: n.identity, columns: Object.fromEntries(columns.map((c) => [c, columnValue(n, c)])) })) };
}

/** A fact value as `muster facts` prints it (cli/output.ts formatValue, on one line). */
export function factLabel(v: unknown): string {
  if (v === null || v === undefined) return "(missing)";
  if (typeof v === "string") return v;
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  return JSON.stringify(v);
}

/** How many nodes have each value of `fact`, most common first (ties by value), as `muster facts`. */
export function countBy(nodes: readonly ExplorerNode[], fact: string): { value: string; count: number }[] {
  const counts = new Map<string, number>();
  for (const n of nodes) {
    const v = factLabel(columnValue(n, fact));
    counts.set(v, (counts.get(v) ?? 0) + 1);
  }
  return [...counts.entries()].map(([value, count]) => ({ value, count })).sort((a, b) => b.count - a.count || a.value.localeCompare(b.value));
}
