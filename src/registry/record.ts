import { isValidAgentName, isValidCollective, isValidIdentity } from "../protocol/subjects.js";
import type { NodeMetadata } from "../protocol/types.js";

// What the registry stores about a node, and the checks between untrusted bytes and that record.
// Pure: the receiver (registration messages) and every reader (values read back from the KV, which
// anyone with write access to the bucket could have put there) use the same checks.

/** One node as the registry knows it: its registration data plus when the registry last heard it. */
export interface RegistryRecord extends NodeMetadata {
  /** The muster version the node runs, as it reported it. */
  version?: string;
  /** The node's own clock when it sent the registration (ms epoch); informational only. */
  sent_at?: number;
  /** The registry's clock when it last wrote this record for a registration (ms epoch). */
  last_seen: number;
}

/** Why a registration was refused: a closed set, used as a metrics label and in logs. */
export const RejectReason = {
  oversized: "oversized",
  garbled: "garbled",
  shape: "shape",
  identity: "identity",
  collective: "collective",
} as const;
export type RejectReason = (typeof RejectReason)[keyof typeof RejectReason];

export interface RegistrationLimits {
  /** Largest registration message accepted, bytes. */
  maxBytes: number;
}

export const DEFAULT_LIMITS: RegistrationLimits = { maxBytes: 1024 * 1024 };
const MAX_CLASSES = 10_000;
const MAX_CLASS_LENGTH = 1024;
const MAX_AGENTS = 1000;
const MAX_COLLECTIVES = 100;
const MAX_VERSION_LENGTH = 64;

export type Checked = { ok: true; record: RegistryRecord } | { ok: false; reason: RejectReason; detail: string };

const dec = new TextDecoder("utf-8", { fatal: true });

function isPlainObject(x: unknown): x is Record<string, unknown> {
  return x !== null && typeof x === "object" && !Array.isArray(x);
}

function typeName(x: unknown): string {
  if (x === null) return "null";
  if (Array.isArray(x)) return "an array";
  return typeof x === "object" ? "an object" : `a ${typeof x}`;
}

function fail(reason: RejectReason, detail: string): Checked {
  return { ok: false, reason, detail };
}

function stringList(x: unknown, field: string, max: number, valid: (s: string) => boolean, what: string): string[] | string {
  if (!Array.isArray(x)) return `${field} is ${typeName(x)}, expected an array of strings`;
  if (x.length > max) return `${field} has ${x.length} entries; the limit is ${max}`;
  for (let i = 0; i < x.length; i++) {
    const v: unknown = x[i];
    if (typeof v !== "string") return `${field}[${i}] is ${typeName(v)}, expected a string`;
    if (!valid(v)) return `${field}[${i}] ${JSON.stringify(v.slice(0, 80))} is not ${what}`;
  }
  return x as string[];
}

/**
 * Checks a decoded registration (or stored record) and builds a fresh record from the known fields
 * only. `lastSeen` is the registry's clock; for stored records pass undefined to take theirs.
 */
export function checkRegistration(x: unknown, lastSeen: number | undefined): Checked {
  if (!isPlainObject(x)) return fail("shape", `expected an object but found ${typeName(x)}`);
  const identity = x["identity"];
  if (typeof identity !== "string") return fail("identity", `identity is ${typeName(identity)}, expected a string`);
  if (!isValidIdentity(identity)) return fail("identity", `identity ${JSON.stringify(identity.slice(0, 80))} is not a valid identity`);
  const facts = x["facts"];
  if (!isPlainObject(facts)) return fail("shape", `facts is ${typeName(facts)}, expected an object`);
  const classes = stringList(x["classes"] ?? [], "classes", MAX_CLASSES, (s) => s.length > 0 && s.length <= MAX_CLASS_LENGTH, "a class name");
  if (typeof classes === "string") return fail("shape", classes);
  const agents = stringList(x["agents"] ?? [], "agents", MAX_AGENTS, isValidAgentName, "an agent name");
  if (typeof agents === "string") return fail("shape", agents);
  const collectives = stringList(x["collectives"], "collectives", MAX_COLLECTIVES, isValidCollective, "a collective name");
  if (typeof collectives === "string") return fail("shape", collectives);
  if (collectives.length === 0) return fail("collective", "collectives is empty; a node belongs to at least one");
  const version = x["version"];
  if (version !== undefined && (typeof version !== "string" || version.length > MAX_VERSION_LENGTH)) return fail("shape", `version is ${typeName(version)}, expected a string of at most ${MAX_VERSION_LENGTH} characters`);
  const time = x["time"] ?? x["sent_at"];
  if (time !== undefined && (typeof time !== "number" || !Number.isFinite(time))) return fail("shape", `time is ${typeName(time)}, expected a number (ms since the epoch)`);
  let seen = lastSeen;
  if (seen === undefined) {
    const stored = x["last_seen"];
    if (typeof stored !== "number" || !Number.isFinite(stored)) return fail("shape", `last_seen is ${typeName(stored)}, expected a number (ms since the epoch)`);
    seen = stored;
  }
  const record: RegistryRecord = { identity, facts, classes, agents, collectives, last_seen: seen };
  if (version !== undefined) record.version = version;
  if (time !== undefined) record.sent_at = time;
  return { ok: true, record };
}

/** Parses JSON text without letting a pathological document escape as an exception. */
function parseJson(bytes: Uint8Array): { ok: true; value: unknown } | { ok: false; detail: string } {
  try {
    return { ok: true, value: JSON.parse(dec.decode(bytes)) };
  } catch (e) {
    // invalid UTF-8, invalid JSON, or nesting deep enough to exhaust the stack (RangeError)
    return { ok: false, detail: `not UTF-8 JSON: ${(e as Error).message.slice(0, 120)}` };
  }
}

/**
 * A registration message as received on `<collective>.registration`: size, encoding, types, and
 * that the node claims membership of the collective it registered in.
 */
export function parseRegistration(bytes: Uint8Array, collective: string, now: number, limits: RegistrationLimits = DEFAULT_LIMITS): Checked {
  if (bytes.length > limits.maxBytes) return fail("oversized", `${bytes.length} bytes; the limit is ${limits.maxBytes}`);
  const parsed = parseJson(bytes);
  if (!parsed.ok) return fail("garbled", parsed.detail);
  const checked = checkRegistration(parsed.value, now);
  if (checked.ok && !checked.record.collectives.includes(collective)) {
    return fail("collective", `registered in collective ${collective} but lists only ${checked.record.collectives.join(", ")}`);
  }
  return checked;
}

/** A value read back from the registry bucket, or undefined when it is not a valid record. */
export function decodeRecord(bytes: Uint8Array): RegistryRecord | undefined {
  const parsed = parseJson(bytes);
  if (!parsed.ok) return undefined;
  const checked = checkRegistration(parsed.value, undefined);
  return checked.ok ? checked.record : undefined;
}

const enc = new TextEncoder();

export function encodeRecord(r: RegistryRecord): Uint8Array {
  return enc.encode(JSON.stringify(r));
}

/**
 * What a registration says about the node, without timestamps: two registrations with the same
 * fingerprint carry the same data, so the registry need not rewrite the record for the second.
 */
export function fingerprint(r: RegistryRecord): string {
  return JSON.stringify([r.facts, r.classes, r.agents, r.collectives, r.version ?? null]);
}

/**
 * The KV key of an identity. KV keys allow `[-/_=.a-zA-Z0-9]`; every other character, and `_`
 * itself (so the mapping stays one-to-one), becomes `_` and two hex digits: `a:b_c` -> `a_3ab_5fc`.
 */
export function keyFor(identity: string): string {
  return identity.replace(/[^-/=.a-zA-Z0-9]/g, (c) => `_${c.charCodeAt(0).toString(16).padStart(2, "0")}`);
}

/** A record as HTTP and `registry query --json` show it: plus its age in seconds. */
export function nodeView(r: RegistryRecord, now: number): RegistryRecord & { age_seconds: number } {
  return { ...r, age_seconds: Math.max(0, Math.round((now - r.last_seen) / 100) / 10) };
}
