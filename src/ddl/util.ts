import type { ActionSpec, AgentDDL, InputSpec, OutputSpec } from "./types.js";

// Small helpers shared by the ddl modules. Lookups use Object.hasOwn because action and input
// names come from the wire: "constructor" or "toString" must not resolve to Object.prototype.

export function findAction(ddl: AgentDDL, action: string): ActionSpec | undefined {
  return Object.hasOwn(ddl.actions, action) ? ddl.actions[action] : undefined;
}

export function findInput(spec: ActionSpec, name: string): InputSpec | undefined {
  return Object.hasOwn(spec.input, name) ? spec.input[name] : undefined;
}

export function findOutput(spec: ActionSpec, name: string): OutputSpec | undefined {
  return Object.hasOwn(spec.output, name) ? spec.output[name] : undefined;
}

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return false;
  const proto: unknown = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

const MAX_SHOWN = 60;

/** A value as it appears in an error message: JSON, cut short so hostile input stays readable. */
export function showValue(v: unknown): string {
  let s: string;
  try {
    s = JSON.stringify(v) ?? String(v);
  } catch {
    s = String(v);
  }
  return s.length > MAX_SHOWN ? `${s.slice(0, MAX_SHOWN)}...` : s;
}

/** Defaults are shared DDL objects: hand each caller its own copy so mutations do not leak. */
export function copyDefault(v: unknown): unknown {
  return typeof v === "object" && v !== null ? structuredClone(v) : v;
}
