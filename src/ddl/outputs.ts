import type { AgentDDL } from "./types.js";
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
