import { MusterError } from "../errors.js";
import type { ActionSpec, AgentDDL, InputSpec } from "./types.js";
import { describeType } from "./validate.js";
import { findAction, findInput, isPlainObject } from "./util.js";

// CLI `key=value` arguments to the types the DDL declares. Coercion is strict ("3abc" is not 3)
// because a silently truncated number sent to a whole fleet is worse than an error.
// Range and validation checks stay in validateInput, which runs afterwards.

export function coerceCliInputs(ddl: AgentDDL, action: string, pairs: readonly string[]): Record<string, unknown> {
  const spec = findAction(ddl, action);
  if (!spec) {
    const known = Object.keys(ddl.actions).sort().join(", ");
    throw new MusterError("MUSTER_UNKNOWN_ACTION", `agent '${ddl.metadata.name}' has no action '${action}'; actions: ${known || "none"}`);
  }
  // A word that is not key=value is a malformed command line (exit 64); a bad key or value is invalid input (exit 1).
  const fail = (why: string, code: "MUSTER_INPUT_INVALID" | "MUSTER_USAGE" = "MUSTER_INPUT_INVALID"): never => {
    throw new MusterError(code, `${why}\n${usage(ddl.metadata.name, action, spec)}`);
  };
  const out: [string, unknown][] = [];
  const seen = new Set<string>();
  for (const pair of pairs) {
    const eq = pair.indexOf("=");
    if (eq <= 0) fail(`argument ${JSON.stringify(pair)} is not key=value`, "MUSTER_USAGE");
    const key = pair.slice(0, eq);
    const raw = pair.slice(eq + 1); // split on the first '=' only: values may contain '='
    const input = findInput(spec, key);
    if (!input) return fail(`unknown input '${key}' for ${ddl.metadata.name}#${action}`);
    if (seen.has(key)) fail(`input '${key}' is given more than once`);
    seen.add(key);
    const value = coerceValue(input, raw);
    if (value instanceof CoerceError) return fail(`input '${key}' must be ${value.message}, got ${JSON.stringify(raw)}`);
    out.push([key, value]);
  }
  return Object.fromEntries(out);
}

class CoerceError {
  constructor(readonly message: string) {}
}

const INTEGER = /^[+-]?\d+$/;
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
const TRUE_WORDS = new Set(["true", "yes", "y", "1"]);
const FALSE_WORDS = new Set(["false", "no", "n", "0"]);

/** One raw CLI string to the input's type, or a CoerceError saying what was expected. */
function coerceValue(input: InputSpec, raw: string): unknown {
  switch (input.type) {
    case "string":
      return raw;
    case "integer": {
      const n = Number(raw);
      return INTEGER.test(raw) && Number.isSafeInteger(n) ? n : new CoerceError("an integer");
    }
    case "float":
    case "number": {
      const n = Number(raw);
      return DECIMAL.test(raw) && Number.isFinite(n) ? n : new CoerceError("a number");
    }
    case "boolean": {
      const word = raw.toLowerCase();
      if (TRUE_WORDS.has(word)) return true;
      if (FALSE_WORDS.has(word)) return false;
      return new CoerceError("a boolean (true/false, yes/no, y/n, 1/0)");
    }
    case "hash": {
      const v = parseJson(raw);
      return isPlainObject(v) ? v : new CoerceError('a JSON object, e.g. {"key":"value"}');
    }
    case "array": {
      const v = parseJson(raw);
      return Array.isArray(v) ? v : new CoerceError('a JSON array, e.g. ["a","b"]');
    }
    case "list":
      return coerceListValue(input.list, raw);
  }
}

// A list of strings keeps the text; a list with numbers or booleans maps the text to the
// listed value whose string form it is, so `port=80` matches a listed 80.
function coerceListValue(list: InputSpec["list"], raw: string): unknown {
  if (list === undefined) return raw;
  const hit = list.find((v) => String(v) === raw);
  if (hit !== undefined) return hit;
  return new CoerceError(`one of ${list.map((v) => String(v)).join(", ")}`);
}

function parseJson(raw: string): unknown {
  try {
    return JSON.parse(raw) as unknown;
  } catch {
    return undefined;
  }
}

/** Lists an action's inputs so a CLI error shows what the action takes. */
function usage(agent: string, action: string, spec: ActionSpec): string {
  const names = Object.keys(spec.input).sort();
  if (names.length === 0) return `${agent}#${action} takes no inputs`;
  const lines = names.map((name) => {
    const input = spec.input[name];
    if (!input) return `  ${name}`;
    return `  ${name} (${describeType(input)}, ${input.optional ? "optional" : "required"}): ${input.description}`;
  });
  return [`${agent}#${action} inputs:`, ...lines].join("\n");
}
