import type { AgentDDL, OutputSpec } from "./types.js";
import { copyDefault, findAction } from "./util.js";

/**
 * Returns a copy of a reply's data with every declared output that is missing (absent or
 * undefined) set to its DDL default, so displays and aggregates see the documented shape.
 * Data of an action the DDL does not know is returned as a plain copy.
 */
export function applyOutputDefaults(ddl: AgentDDL, action: string, data: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...data };
  const spec = findAction(ddl, action);
  if (!spec) return out;
  for (const [name, output] of Object.entries(spec.output)) {
    if (output.default !== undefined && (!Object.hasOwn(out, name) || out[name] === undefined)) {
      out[name] = copyDefault(output.default);
    }
  }
  return out;
}

function outputProblem(type: NonNullable<OutputSpec["type"]>, v: unknown): string | undefined {
  switch (type) {
    case "string":
      return typeof v === "string" ? undefined : "a string";
    case "integer":
      return typeof v === "number" && Number.isInteger(v) ? undefined : "an integer";
    case "float":
    case "number":
      return typeof v === "number" && Number.isFinite(v) ? undefined : "a number";
    case "boolean":
      return typeof v === "boolean" ? undefined : "a boolean";
    case "hash":
      return typeof v === "object" && v !== null && !Array.isArray(v) ? undefined : "a hash (JSON object)";
    case "array":
      return Array.isArray(v) ? undefined : "an array";
    case "any":
      return undefined;
  }
}

/**
 * Checks reply data against the action's declared outputs: every typed output present must be of
 * its type or null. Returns the data with the offending outputs removed (and defaults applied) and
 * what was wrong, in words; undeclared fields pass through untouched. Data of an action the DDL
 * does not know passes unchecked.
 */
export function checkOutputs(ddl: AgentDDL, action: string, data: Readonly<Record<string, unknown>>): { data: Record<string, unknown>; problems: string[] } {
  const out = applyOutputDefaults(ddl, action, data);
  const problems: string[] = [];
  const spec = findAction(ddl, action);
  if (!spec) return { data: out, problems };
  for (const [name, output] of Object.entries(spec.output)) {
    const v = out[name];
    if (!output.type || v === undefined || v === null) continue;
    const want = outputProblem(output.type, v);
    if (!want) continue;
    const shown = JSON.stringify(v) ?? String(v);
    problems.push(`${name} must be ${want}, got ${shown.length > 60 ? `${shown.slice(0, 57)}...` : shown}`);
    delete out[name];
  }
  return { data: out, problems };
}
