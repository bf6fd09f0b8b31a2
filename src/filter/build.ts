// From CLI flags to the wire Filter, and back from untrusted wire data to a checked Filter.

import { emptyFilter, FactOperators } from "../protocol/types.js";
import type { FactFilter, Filter } from "../protocol/types.js";
import { FilterError } from "./error.js";
import {
  checkFactFilter,
  type DataPluginCatalogue,
  FilterLimits,
  parseAgentFilter,
  parseClassFilter,
  parseCompound,
  parseFactFilter,
  parseIdentityFilter,
  parseWith,
} from "./parse.js";

/** The filter flags of a command line, each repeatable: -F -C -I -A -W -S. */
export interface FilterOptions {
  fact?: readonly string[];
  class?: readonly string[];
  identity?: readonly string[];
  agent?: readonly string[];
  with?: readonly string[];
  select?: readonly string[];
}

const FILTER_KEYS = ["fact", "class", "identity", "agent", "compound"] as const;
const FACT_KEYS = ["fact", "operator", "value"] as const;

function labelled<T>(context: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    throw err instanceof FilterError ? err.withContext(context) : err;
  }
}

/**
 * Builds the wire Filter from CLI flags. Fact filters are stored parsed; -S expressions are
 * parsed here (to fail before anything is sent) and stored as source text. Errors name the flag.
 * With `dataPlugins`, -S calls to data plugins (or fields) the caller does not know are refused.
 */
export function buildFilter(options: FilterOptions = {}, check: { dataPlugins?: DataPluginCatalogue } = {}): Filter {
  const filter = emptyFilter();
  for (const text of options.fact ?? []) filter.fact.push(labelled("-F", () => parseFactFilter(text)));
  for (const text of options.class ?? []) filter.class.push(labelled("-C", () => parseClassFilter(text)));
  for (const text of options.identity ?? []) filter.identity.push(labelled("-I", () => parseIdentityFilter(text)));
  for (const text of options.agent ?? []) filter.agent.push(labelled("-A", () => parseAgentFilter(text)));
  for (const text of options.with ?? []) {
    const parsed = labelled("-W", () => parseWith(text));
    filter.fact.push(...parsed.fact);
    filter.class.push(...parsed.class);
  }
  for (const text of options.select ?? []) {
    labelled("-S", () => parseCompound(text, check.dataPlugins));
    filter.compound.push(text);
  }
  return filter;
}

function typeName(x: unknown): string {
  if (x === undefined) return "nothing";
  if (x === null) return "null";
  if (Array.isArray(x)) return "an array";
  return typeof x === "object" ? "an object" : `a ${typeof x}`;
}

function isPlainObject(x: unknown): x is Record<string, unknown> {
  if (x === null || typeof x !== "object" || Array.isArray(x)) return false;
  const proto: unknown = Object.getPrototypeOf(x);
  return proto === Object.prototype || proto === null;
}

function wireError(where: string, reason: string): FilterError {
  return new FilterError(reason, "", 0, where);
}

function checkKeys(x: Record<string, unknown>, allowed: readonly string[], where: string): void {
  // An unknown key could be a constraint this node does not understand: refuse rather than
  // match more widely than the sender meant.
  for (const key of Object.keys(x)) {
    if (!allowed.includes(key)) {
      throw wireError(`${where}.${key.slice(0, 40)}`, `unknown key; expected only ${allowed.join(", ")}`);
    }
  }
}

function listAt(x: Record<string, unknown>, key: string): unknown[] {
  const list = x[key];
  if (list === undefined) return [];
  if (!Array.isArray(list)) throw wireError(`filter.${key}`, `expected an array but found ${typeName(list)}`);
  if (list.length > FilterLimits.maxEntries) {
    throw wireError(`filter.${key}`, `has ${list.length} entries; the limit is ${FilterLimits.maxEntries}`);
  }
  return list;
}

function stringAt(x: unknown, where: string): string {
  if (typeof x !== "string") throw wireError(where, `expected a string but found ${typeName(x)}`);
  return x;
}

function wireFact(x: unknown, where: string): FactFilter {
  if (!isPlainObject(x)) throw wireError(where, `expected an object {fact, operator, value} but found ${typeName(x)}`);
  checkKeys(x, FACT_KEYS, where);
  const fact = stringAt(x["fact"], `${where}.fact`);
  const operator = stringAt(x["operator"], `${where}.operator`);
  const value = stringAt(x["value"], `${where}.value`);
  const known = FactOperators.find((op) => op === operator);
  if (known === undefined) {
    throw wireError(`${where}.operator`, `unknown operator '${operator.slice(0, 40)}'; expected one of ${FactOperators.join(" ")}`);
  }
  const filter: FactFilter = { fact, operator: known, value };
  labelled(where, () => checkFactFilter(filter));
  return filter;
}

/**
 * Checks a filter from an untrusted sender: every type, every part parsed. Missing kinds
 * default to empty; unknown keys are refused. Returns a fresh Filter; throws FilterError.
 */
export function validateWireFilter(x: unknown): Filter {
  if (!isPlainObject(x)) throw wireError("filter", `expected an object but found ${typeName(x)}`);
  checkKeys(x, FILTER_KEYS, "filter");
  const names = (key: "class" | "identity" | "agent" | "compound", parse: (text: string) => unknown): string[] =>
    listAt(x, key).map((entry, i) => {
      const where = `filter.${key}[${i}]`;
      const text = stringAt(entry, where);
      labelled(where, () => parse(text));
      return text;
    });
  return {
    fact: listAt(x, "fact").map((entry, i) => wireFact(entry, `filter.fact[${i}]`)),
    class: names("class", parseClassFilter),
    identity: names("identity", parseIdentityFilter),
    agent: names("agent", parseAgentFilter),
    compound: names("compound", parseCompound),
  };
}
