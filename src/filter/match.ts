// Evaluating filters against a node's metadata. Pure: the node resolves data plugins first
// (CompiledFilter.dataCalls) and passes a lookup. Semantics (also in docs/filters.md):
//
// - Kinds are ANDed. Identity entries are ORed; fact, class, agent and compound entries ANDed.
//   An empty filter matches every node.
// - Comparisons are numeric when both sides parse as finite decimal numbers, else on strings
//   (`<` etc. lexicographic by UTF-16 code unit). Booleans and numbers are compared by their
//   string form: true == "true". `=~`, and `==` with a /regex/ value, are regex matches
//   (unanchored, case-sensitive, no flags).
// - `!=` is the negation of `==` on a fact that is present: an array fact matches `!=` when no
//   element equals the value.
// - Array facts match when any element matches. Structured facts are reached by dotted path
//   (os.family; array elements by index: disks.0); a flat fact whose name contains dots wins.
// - A missing fact never matches, for every operator, `!=` included: `country!=de` selects nodes
//   that have a country and it is not de. null, and objects (not arrays), count as missing.
// - -C checks md.classes, -A md.agents, -I md.identity: exact name or /regex/.
// - In -S a data plugin statement is false when the plugin returned undefined or lacks the
//   field; `not` then makes it true.
//
// Compiled compound expressions and regexes are cached by source text (LRU), so evaluating one
// request's filter on 10,000 emulated nodes compiles it once.

import { lookupFact } from "../protocol/facts.js";
import type { FactOperator, Filter, NodeMetadata } from "../protocol/types.js";
import { FilterError } from "./error.js";
import { Lru } from "./lru.js";
import { checkFactFilter, parseAgentFilter, parseClassFilter, parseCompound, parseIdentityFilter } from "./parse.js";
import type { CompoundExpr, FilterValue } from "./parse.js";
import { compileRegex } from "./regex.js";

/** Resolves a data plugin call on the node: `plugin('argument')` -> its result fields. */
export type DataLookup = (plugin: string, argument: string | undefined) => Record<string, unknown> | undefined;

export interface DataCall {
  readonly plugin: string;
  readonly argument: string | undefined;
}

export interface CompiledFilter {
  /** The data plugin calls the node must be able to answer, each once. */
  readonly dataCalls: readonly DataCall[];
  matches(md: NodeMetadata, data?: DataLookup): boolean;
}

/** A compiled -S expression. */
export interface CompiledCompound {
  readonly dataCalls: readonly DataCall[];
  evaluate(md: NodeMetadata, data: DataLookup): boolean;
}

type Scalar = string | number | boolean;
type Predicate = (md: NodeMetadata, data: DataLookup) => boolean;
type ValueTest = (actual: unknown) => boolean;

const NUMBER = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;
const noData: DataLookup = () => undefined;
const compoundCache = new Lru<string, CompiledCompound>(1000);

function toNumber(x: Scalar): number | undefined {
  if (typeof x === "number") return Number.isFinite(x) ? x : undefined;
  if (typeof x === "string" && NUMBER.test(x)) {
    const n = Number(x);
    return Number.isFinite(n) ? n : undefined;
  }
  return undefined;
}

function isScalar(x: unknown): x is Scalar {
  return typeof x === "string" || typeof x === "number" || typeof x === "boolean";
}

/** The test of one scalar against the value, for every operator but != (negated ==). */
function scalarTest(operator: Exclude<FactOperator, "!=">, value: FilterValue): (s: Scalar) => boolean {
  if (value.kind === "regex") {
    const re = compileRegex(value.source);
    return (s) => re.test(String(s));
  }
  const text = value.text;
  const num = toNumber(text);
  const ordered = (cmp: (a: number | string, b: number | string) => boolean) => (s: Scalar) => {
    const n = num === undefined ? undefined : toNumber(s);
    return n !== undefined && num !== undefined ? cmp(n, num) : cmp(String(s), text);
  };
  switch (operator) {
    case "==":
    case "=~": // =~ always carries a regex value; kept total for the type checker
      return ordered((a, b) => a === b);
    case "<":
      return ordered((a, b) => a < b);
    case ">":
      return ordered((a, b) => a > b);
    case "<=":
      return ordered((a, b) => a <= b);
    case ">=":
      return ordered((a, b) => a >= b);
  }
}

/** A test of a resolved fact (or data field) value; missing values fail every operator. */
export function compileComparison(operator: FactOperator, value: FilterValue): ValueTest {
  const negate = operator === "!=";
  const test = scalarTest(operator === "!=" ? "==" : operator, value);
  return (actual) => {
    if (isScalar(actual)) return test(actual) !== negate;
    if (Array.isArray(actual)) return actual.some((el) => isScalar(el) && test(el)) !== negate;
    return false;
  };
}

/** Resolves a dotted path; own properties only, so `constructor` or `__proto__` find nothing. */
function compilePath(path: string): (root: Record<string, unknown>) => unknown {
  const segments = path.split(".");
  return (root) => {
    if (Object.hasOwn(root, path)) return root[path];
    if (segments.length === 1) return undefined;
    let current: unknown = root;
    for (const segment of segments) {
      if (current === null || typeof current !== "object" || !Object.hasOwn(current, segment)) return undefined;
      current = (current as Record<string, unknown>)[segment];
    }
    return current;
  };
}

function asValue(entry: string): FilterValue {
  return entry.length >= 2 && entry.startsWith("/") && entry.endsWith("/")
    ? { kind: "regex", source: entry.slice(1, -1) }
    : { kind: "literal", text: entry };
}

function nameTest(value: FilterValue): (names: readonly string[]) => boolean {
  if (value.kind === "regex") {
    const re = compileRegex(value.source);
    return (names) => names.some((n) => re.test(n));
  }
  const text = value.text;
  return (names) => names.includes(text);
}

function compileExpr(expr: CompoundExpr, calls: Map<string, DataCall>): Predicate {
  switch (expr.kind) {
    case "or": {
      const operands = expr.operands.map((e) => compileExpr(e, calls));
      return (md, data) => operands.some((p) => p(md, data));
    }
    case "and": {
      const operands = expr.operands.map((e) => compileExpr(e, calls));
      return (md, data) => operands.every((p) => p(md, data));
    }
    case "not": {
      const operand = compileExpr(expr.operand, calls);
      return (md, data) => !operand(md, data);
    }
    case "fact": {
      const lookup = compilePath(expr.fact);
      const test = compileComparison(expr.operator, expr.value);
      return (md) => test(lookup(md.facts));
    }
    case "class": {
      const test = nameTest(expr.value);
      return (md) => test(md.classes);
    }
    case "data": {
      const { plugin, argument } = expr;
      calls.set(JSON.stringify([plugin, argument ?? null]), { plugin, argument });
      const lookup = compilePath(expr.field);
      const test = compileComparison(expr.operator, expr.value);
      return (_md, data) => {
        const result = data(plugin, argument);
        return result !== null && typeof result === "object" && test(lookup(result));
      };
    }
  }
}

/** Parses and compiles a -S expression, or returns the cached compilation of the same text. */
export function compileCompound(source: string): CompiledCompound {
  const cached = compoundCache.get(source);
  if (cached !== undefined) return cached;
  const calls = new Map<string, DataCall>();
  const evaluate = compileExpr(parseCompound(source), calls);
  const compiled: CompiledCompound = { dataCalls: [...calls.values()], evaluate };
  compoundCache.set(source, compiled);
  return compiled;
}

function labelled<T>(context: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    throw err instanceof FilterError ? err.withContext(context) : err;
  }
}

function identityPredicate(entries: readonly string[]): Predicate {
  // --nodes files become long identity lists: exact names go in a set.
  const exact = new Set<string>();
  const patterns: RegExp[] = [];
  entries.forEach((entry, i) => {
    const value = asValue(labelled(`filter.identity[${i}]`, () => parseIdentityFilter(entry)));
    if (value.kind === "regex") patterns.push(compileRegex(value.source));
    else exact.add(value.text);
  });
  return (md) => exact.has(md.identity) || patterns.some((re) => re.test(md.identity));
}

/**
 * Compiles a filter for matching. Throws FilterError if any part does not parse (a filter
 * that came over the wire should have passed validateWireFilter first).
 */
export function compileFilter(filter: Filter): CompiledFilter {
  const predicates: Predicate[] = [];
  const calls = new Map<string, DataCall>();

  // Cheapest checks first: most nodes are rejected by identity, agent or class.
  if (filter.identity.length > 0) predicates.push(identityPredicate(filter.identity));
  filter.agent.forEach((entry, i) => {
    const test = nameTest(asValue(labelled(`filter.agent[${i}]`, () => parseAgentFilter(entry))));
    predicates.push((md) => test(md.agents));
  });
  filter.class.forEach((entry, i) => {
    const test = nameTest(asValue(labelled(`filter.class[${i}]`, () => parseClassFilter(entry))));
    predicates.push((md) => test(md.classes));
  });
  filter.fact.forEach((ff, i) => {
    const statement = labelled(`filter.fact[${i}]`, () => checkFactFilter(ff));
    const lookup = compilePath(statement.fact);
    const test = compileComparison(statement.operator, statement.value);
    predicates.push((md) => test(lookup(md.facts)));
  });
  filter.compound.forEach((source, i) => {
    const compiled = labelled(`filter.compound[${i}]`, () => compileCompound(source));
    for (const call of compiled.dataCalls) calls.set(JSON.stringify([call.plugin, call.argument ?? null]), call);
    predicates.push(compiled.evaluate);
  });

  return {
    dataCalls: [...calls.values()],
    matches(md, data = noData) {
      for (const p of predicates) if (!p(md, data)) return false;
      return true;
    },
  };
}

/**
 * fact() and agent() answered from what a node registered (or PuppetDB holds), as the node's own
 * plugins would: the two data plugins a source other than the node can answer.
 */
export function registeredData(md: Pick<NodeMetadata, "facts" | "agents">): DataLookup {
  return (plugin, argument) => {
    if (!argument) return undefined;
    if (plugin === "fact") {
      const value = lookupFact(md.facts, argument);
      return value === undefined ? undefined : { value };
    }
    if (plugin === "agent") return { present: md.agents.includes(argument), name: argument };
    return undefined;
  };
}
