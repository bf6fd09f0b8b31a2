import { compileFilter, FilterError, parseCompound, type CompoundExpr, type DataLookup } from "../filter/index.js";
import { lookupFact } from "../protocol/facts.js";
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
  for (const source of filter.compound) checkExpr(parseCompound(source));
}


/** fact() and agent() answered from a record, as the node's own plugins would. */
export function registryData(r: RegistryRecord): DataLookup {
  return (plugin, argument) => {
    if (!argument) return undefined;
    if (plugin === "fact") {
      const value = lookupFact(r.facts, argument);
      return value === undefined ? undefined : { value };
    }
    if (plugin === "agent") return { present: r.agents.includes(argument), name: argument };
    return undefined;
  };
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
    if (compiled.matches(r, usesData ? registryData(r) : undefined)) out.push(r);
  }
  return out.sort((a, b) => (a.identity < b.identity ? -1 : a.identity > b.identity ? 1 : 0));
}
