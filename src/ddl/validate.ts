import { isIPv4, isIPv6 } from "node:net";
import { RpcError } from "../errors.js";
import { Status, type StatusCode } from "../protocol/status.js";
import type { AgentDDL, InputSpec, NamedValidator } from "./types.js";
import { copyDefault, findAction, findInput, isPlainObject, showValue } from "./util.js";

// Input validation against an action's DDL. The same function runs in the client (fail before
// anything is sent) and in the server (never trust the wire), so both give the same message.

export interface InputProblem {
  status: StatusCode;
  message: string;
}

/**
 * Checks `data` against the action's inputs and returns a new object with defaults applied.
 * Absent (undefined or null) inputs take their default; MCollective applies defaults before
 * the required check, so a required input with a default is satisfied by it.
 */
export function validateInput(ddl: AgentDDL, action: string, data: unknown): Record<string, unknown> {
  const spec = findAction(ddl, action);
  const agent = ddl.metadata.name;
  if (!spec) {
    const known = Object.keys(ddl.actions).sort().join(", ");
    throw new RpcError(Status.UnknownAction, `unknown action '${action}' for agent '${agent}'; actions: ${known || "none"}`);
  }
  if (!isPlainObject(data)) {
    throw new RpcError(Status.InvalidData, `input for ${agent}#${action} must be an object of named inputs, got ${kindOf(data)}`);
  }
  for (const key of Object.keys(data)) {
    if (!findInput(spec, key)) {
      throw new RpcError(Status.InvalidData, `unknown input '${key}' for ${agent}#${action}; expected ${inputList(Object.keys(spec.input))}`);
    }
  }
  const out: [string, unknown][] = [];
  for (const [name, input] of Object.entries(spec.input)) {
    const given = Object.hasOwn(data, name) ? data[name] : undefined;
    if (given === undefined || given === null) {
      if (input.default !== undefined) out.push([name, copyDefault(input.default)]);
      else if (!input.optional) throw new RpcError(Status.MissingData, `missing required input '${name}' for ${agent}#${action} (${input.description})`);
      continue;
    }
    const problem = inputProblem(name, input, given);
    if (problem) throw new RpcError(problem.status, problem.message);
    out.push([name, given]);
  }
  // fromEntries defines own properties, so even an odd input name cannot reach a prototype.
  return Object.fromEntries(out);
}

/** Why `value` does not satisfy `input`, or undefined when it does. */
export function inputProblem(name: string, input: InputSpec, value: unknown): InputProblem | undefined {
  const typeError = typeMismatch(input, value);
  if (typeError) return invalid(`input '${name}' must be ${typeError}, got ${showValue(value)}`);
  if (typeof value !== "string") return undefined;
  if (input.maxlength !== undefined && input.maxlength > 0 && value.length > input.maxlength) {
    // maxlength 0 means "no limit", as in MCollective DDLs.
    return invalid(`input '${name}' must be at most ${input.maxlength} characters, got ${value.length}`);
  }
  return validationFailure(name, input, value);
}

/** Describes what the type requires when `value` is not of it. */
function typeMismatch(input: InputSpec, value: unknown): string | undefined {
  switch (input.type) {
    case "string":
      return typeof value === "string" ? undefined : "a string";
    case "integer":
      return typeof value === "number" && Number.isInteger(value) ? undefined : "an integer";
    case "float":
    case "number":
      return typeof value === "number" && Number.isFinite(value) ? undefined : "a number";
    case "boolean":
      return typeof value === "boolean" ? undefined : "a boolean (true or false)";
    case "hash":
      return isPlainObject(value) ? undefined : "a hash (JSON object)";
    case "array":
      return Array.isArray(value) ? undefined : "an array";
    case "list":
      return listMismatch(input.list, value);
  }
}

function listMismatch(list: InputSpec["list"], value: unknown): string | undefined {
  const scalar = typeof value === "string" || typeof value === "number" || typeof value === "boolean";
  if (!scalar) return "one of the listed values";
  if (list === undefined || list.includes(value)) return undefined;
  return `one of ${list.map((v) => showValue(v)).join(", ")}`;
}

function validationFailure(name: string, input: InputSpec, value: string): InputProblem | undefined {
  const v = input.validation;
  if (v === undefined || v === "") return undefined;
  if (isNamedValidator(v)) {
    return namedValidators[v].test(value) ? undefined : invalid(`input '${name}' must be ${namedValidators[v].expects}, got ${showValue(value)}`);
  }
  const re = compiled(input, v);
  // A DDL whose regex does not compile is the agent's fault, not the caller's: UnknownError.
  if (re instanceof Error) return { status: Status.UnknownError, message: `input '${name}' has an invalid validation regex /${v}/ in the DDL: ${re.message}` };
  return re.test(value) ? undefined : invalid(`input '${name}' must match /${v}/, got ${showValue(value)}`);
}

// Characters MCollective's shellsafe validator refuses, plus & alone, CR and NUL which a shell
// (or a C string) would treat specially just the same.
const SHELL_UNSAFE = /[`$;|&<>\n\r\0]/;

const namedValidators: Record<NamedValidator, { test(v: string): boolean; expects: string }> = {
  shellsafe: { test: (v) => !SHELL_UNSAFE.test(v), expects: "shell safe (no ` $ ; | & < > or line breaks)" },
  ipv4address: { test: (v) => isIPv4(v), expects: "an IPv4 address" },
  ipv6address: { test: (v) => isIPv6(v), expects: "an IPv6 address" },
};

function isNamedValidator(v: string): v is NamedValidator {
  return Object.hasOwn(namedValidators, v);
}

// Compile each DDL regex once; keyed by the InputSpec so a discarded DDL frees its entries.
const regexCache = new WeakMap<InputSpec, { source: string; re: RegExp | Error }>();

function compiled(input: InputSpec, source: string): RegExp | Error {
  const hit = regexCache.get(input);
  if (hit && hit.source === source) return hit.re;
  const re = compileRegex(source);
  regexCache.set(input, { source, re });
  return re;
}

function compileRegex(source: string): RegExp | Error {
  try {
    return new RegExp(source);
  } catch (e) {
    return e instanceof Error ? e : new Error(String(e));
  }
}

/** Why a `validation` value is unusable (a regex that does not compile), or undefined. */
export function validationProblem(validation: string): string | undefined {
  if (validation === "" || isNamedValidator(validation)) return undefined;
  const re = compileRegex(validation);
  return re instanceof Error ? `validation /${validation}/ does not compile: ${re.message}` : undefined;
}

/** Short type description for messages and help, e.g. `integer` or `list (a, b)`. */
export function describeType(input: InputSpec): string {
  return input.type === "list" && input.list ? `list (${input.list.map((v) => String(v)).join(", ")})` : input.type;
}

function invalid(message: string): InputProblem {
  return { status: Status.InvalidData, message };
}

function inputList(names: string[]): string {
  return names.length === 0 ? "no inputs" : `one of: ${[...names].sort().join(", ")}`;
}

function kindOf(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  return typeof v === "object" ? "a non-plain object" : `${typeof v} ${showValue(v)}`;
}
