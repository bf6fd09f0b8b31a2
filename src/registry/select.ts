import { compileFilter, FilterError, parseCompound, pqlQueryOf, registeredData, type CompoundExpr } from "../filter/index.js";
import type { Filter } from "../protocol/types.js";
import type { RegistryRecord } from "./record.js";

// Answering a filter from registry records. Pure: the same code serves `--dm registry`, the
// registry daemon's query subject, `muster registry query` and the HTTP endpoint.
//
// Every filter kind is evaluated exactly as a node evaluates it (compileFilter), against the
// metadata the node registered. Data plugins in -S are the exception: they run on the node, and
// the registry holds only what registration carries. Two of them are answered from that:
//   fact('path').value    the fact, as the node's fact() plugin returns it
//   agent('name').present, agent('name').name
// Any other plugin, or another agent() field (version, description, timeout come from DDLs the
// registry does not have), is refused with a FilterError that says to use broadcast discovery:
// guessing would silently select a different set of nodes than broadcast discovery would.

const AGENT_FIELDS = new Set(["present", "name"]);

function unsupported(plugin: string, field: string): FilterError {
  const why =
    plugin === "agent"
      ? `the registry answers agent().present and agent().name only, not agent().${field}`
      : `the data plugin ${plugin}() runs on the node and the registry holds only registration data (facts, classes, agents, identity)`;
  return new FilterError(`${why}; use broadcast discovery (--dm broadcast) for this filter`, "", 0, "-S");
}

function checkExpr(expr: CompoundExpr): void {
  switch (expr.kind) {
    case "or":
    case "and":
      for (const e of expr.operands) checkExpr(e);
      return;
    case "not":
      checkExpr(expr.operand);
      return;
    case "data": {
      const head = expr.field.split(".")[0] ?? "";
      if (expr.plugin === "fact" && head === "value") return;
      if (expr.plugin === "agent" && AGENT_FIELDS.has(expr.field)) return;
      throw unsupported(expr.plugin, expr.field);
    }
    default:
      return;
  }
}

/** Throws a FilterError (before any I/O) when the registry cannot answer the filter faithfully. */
export function checkRegistryFilter(filter: Filter): void {
  if (filter.identity.some((i) => pqlQueryOf(i) !== undefined)) throw new FilterError("a pql: identity is a PuppetDB query: discover with --dm puppetdb", "", 0, "-I");
  for (const source of filter.compound) checkExpr(parseCompound(source));
}


export interface SelectOptions {
  /** Only nodes that belong to this collective (the client's -T / configured collective). */
  collective?: string;
  /** Clock, ms epoch. */
  now: number;
  /** Records last seen longer ago than this are expired (ms); 0 keeps every record. */
  expireAfterMs: number;
}

/** Whether the record is still current: seen within `expireAfterMs` of `now`. */
export function isCurrent(r: RegistryRecord, now: number, expireAfterMs: number): boolean {
  return expireAfterMs <= 0 || now - r.last_seen < expireAfterMs;
}

/** The records matching the filter, sorted by identity. Throws FilterError for filters it cannot answer. */
export function selectNodes(records: Iterable<RegistryRecord>, filter: Filter, opts: SelectOptions): RegistryRecord[] {
  checkRegistryFilter(filter);
  const compiled = compileFilter(filter);
  const usesData = compiled.dataCalls.length > 0;
  const out: RegistryRecord[] = [];
  for (const r of records) {
    if (!isCurrent(r, opts.now, opts.expireAfterMs)) continue;
    if (opts.collective !== undefined && !r.collectives.includes(opts.collective)) continue;
    if (compiled.matches(r, usesData ? registeredData(r) : undefined)) out.push(r);
  }
  return out.sort((a, b) => (a.identity < b.identity ? -1 : a.identity > b.identity ? 1 : 0));
}

/** How full and how fresh the registry is, for one collective: what a reader needs to trust an empty answer. */
export interface RegistryStatus {
  /** Current records (of the collective, when one is given). */
  nodes: number;
  /** last_seen of the most recently heard node, ms epoch; null when there is none. */
  newest_seen: number | null;
  /** When the answering registry daemon started, ms epoch (absent when the bucket was read directly). */
  started_at?: number;
  /** The bucket's expiry, ms (0: none). */
  expire_after_ms: number;
}

/** A starting daemon asks nodes to register (splay up to 2 s) and writes them in batches: its first seconds may be incomplete. */
export const FILL_WINDOW_MS = 5_000;

export function registryStatus(records: Iterable<RegistryRecord>, opts: SelectOptions & { startedAt?: number }): RegistryStatus {
  let nodes = 0;
  let newest: number | null = null;
  for (const r of records) {
    if (!isCurrent(r, opts.now, opts.expireAfterMs)) continue;
    if (opts.collective !== undefined && !r.collectives.includes(opts.collective)) continue;
    nodes++;
    if (newest === null || r.last_seen > newest) newest = r.last_seen;
  }
  return { nodes, newest_seen: newest, expire_after_ms: opts.expireAfterMs, ...(opts.startedAt !== undefined ? { started_at: opts.startedAt } : {}) };
}

/** Longest a live fleet goes without any registration reaching the registry before we call it stale. */
export function staleAfterMs(expireAfterMs: number): number {
  return expireAfterMs > 0 ? expireAfterMs / 2 : 600_000;
}

/**
 * What is wrong with answering from this registry, or undefined when nothing is: empty, still
 * filling, or not hearing from anyone. Discovery prints it so an empty result is not mistaken for
 * "no node matches".
 */
export function registryWarning(s: RegistryStatus, now: number, where: string): string | undefined {
  const fix = "check that the nodes register (server config registration.interval > 0) and that `muster registry serve` runs against this broker, or discover with --dm broadcast";
  if (s.started_at !== undefined && now - s.started_at < FILL_WINDOW_MS) {
    return `the registry (${where}) started ${Math.max(0, Math.round((now - s.started_at) / 1000))} s ago and is still filling (${s.nodes} node${s.nodes === 1 ? "" : "s"} so far): the answer may be incomplete`;
  }
  if (s.nodes === 0) return `the registry (${where}) holds no current nodes, so nothing can match: ${fix}`;
  const age = s.newest_seen === null ? Infinity : now - s.newest_seen;
  if (age > staleAfterMs(s.expire_after_ms)) {
    return `the registry (${where}) is stale: its newest registration is ${Math.round(age / 1000)} s old (${s.nodes} node${s.nodes === 1 ? "" : "s"}); ${fix}`;
  }
  return undefined;
}
