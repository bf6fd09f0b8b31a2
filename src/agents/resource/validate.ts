import { RpcError } from "../../errors.js";
import { Status } from "../../protocol/status.js";

// Property checks shared by the agent (never trust the wire) and `muster resource` (fail before
// anything is sent). A DDL hash input says nothing about its keys and values; these rules do.

export const PROPERTY_NAME = /^[a-z][a-z0-9_]*$/;
export const MAX_PROPERTIES = 64;
export const MAX_PROPERTY_NAME = 64;
export const MAX_VALUE_LENGTH = 16 * 1024;
// eslint-disable-next-line no-control-regex
const LINE_BREAK_OR_NUL = /[\x00\n\r]/;

/** The properties as puppet's `key=value` pairs, sorted by name; RpcError(InvalidData) saying what is wrong. */
export function resourceProperties(props: Record<string, unknown>): [string, string][] {
  const invalid = (why: string): never => {
    throw new RpcError(Status.InvalidData, why);
  };
  const entries = Object.entries(props);
  if (entries.length > MAX_PROPERTIES) invalid(`too many properties: ${entries.length} (at most ${MAX_PROPERTIES})`);
  const out: [string, string][] = [];
  for (const [k, v] of entries) {
    if (k.length > MAX_PROPERTY_NAME || !PROPERTY_NAME.test(k)) invalid(`property name ${JSON.stringify(k.slice(0, 80))} must match ${PROPERTY_NAME.source} (at most ${MAX_PROPERTY_NAME} characters)`);
    let value: string;
    if (typeof v === "string") value = v;
    else if ((typeof v === "number" && Number.isFinite(v)) || typeof v === "boolean") value = String(v);
    else return invalid(`property ${k} must be a string, number or boolean, got ${Array.isArray(v) ? "an array" : v === null ? "null" : typeof v}`);
    if (value === "") invalid(`property ${k} has an empty value (puppet resource cannot set one)`);
    if (value.length > MAX_VALUE_LENGTH) invalid(`property ${k} is too long: ${value.length} characters (at most ${MAX_VALUE_LENGTH})`);
    if (LINE_BREAK_OR_NUL.test(value)) invalid(`property ${k} contains a line break or NUL; puppet resource takes one-line values`);
    out.push([k, value]);
  }
  return out.sort((a, b) => a[0].localeCompare(b[0]));
}

/** `key=value` command-line words to a properties hash (split on the first '='). */
export function parsePropertyArgs(words: readonly string[]): Record<string, string> {
  const pairs = new Map<string, string>();
  for (const w of words) {
    const eq = w.indexOf("=");
    if (eq <= 0) throw new RpcError(Status.InvalidData, `${JSON.stringify(w)} is not key=value`);
    const k = w.slice(0, eq);
    if (pairs.has(k)) throw new RpcError(Status.InvalidData, `property ${k} is given more than once`);
    pairs.set(k, w.slice(eq + 1));
  }
  const out = Object.fromEntries(pairs);
  resourceProperties(out);
  return out;
}
