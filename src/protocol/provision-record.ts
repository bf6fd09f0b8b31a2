import { bucketKey } from "./buckets.js";

// The provisioning record: one per node in the provisioner's state bucket (DEFAULT_STATE_BUCKET),
// written by the provisioner and read by `muster provision`, the web console, the lab and
// decommission. Its type, its stages and its codec live here, once; the only code that reads or
// writes the bucket is src/provisioner/state.ts (ProvisionState). The bucket is writable by every
// admin credential, so a value is checked field by field on the way in and a bad one is refused
// with a reason, never cast. Fields this version does not know are kept as they are (a newer
// provisioner's record read and written back by an older tool loses nothing).

/** The provisioning steps in order. A record holds the last completed one; a restart resumes after it. */
export const Stages = [
  "lock",
  "set_puppet_host",
  "clean_cert",
  "request_csr",
  "sign_csr",
  "bootstrap",
  "production",
  "daemonize",
  // unlock before disable: under provisioning isolation a disabled node leaves the provisioning
  // collective at once (docs/security.md#provisioning-isolation), so nothing after it reaches it
  "unlock",
  "disable",
  "notify",
] as const;
export type Stage = (typeof Stages)[number];

export const NodeStatuses = ["pending", "in_progress", "done", "failed"] as const;
export type NodeStatus = (typeof NodeStatuses)[number];

export interface NodeRecord {
  identity: string;
  status: NodeStatus;
  /** The last completed stage. */
  stage?: Stage;
  /** The stage being worked on (for status displays). */
  current?: Stage;
  /** Failed attempts of the current stage. */
  attempts: number;
  /** Provisioning rounds started (1 + operator retries and restarts). */
  rounds: number;
  master?: string;
  masterAddress?: string;
  nodeAddress?: string;
  owner?: string;
  /** ms epoch after which another provisioner may take the node over. */
  claimExpires?: number;
  /** ms epoch at which the node's deploy lock (ours) expires. */
  lockExpires?: number;
  startedAt?: number;
  updatedAt: number;
  finishedAt?: number;
  timings: Partial<Record<Stage, number>>;
  /** When each stage of this round started (its first try) and ended (ms epoch), for timelines (the web board). Absent in records written before it existed. */
  stageTimes?: Partial<Record<Stage, { start: number; end?: number }>>;
  fingerprint?: string;
  /**
   * The node's ed25519 public key, pinned from its first signed reply to a directed request: from
   * then on a reply or startup event for this identity that does not verify against it is refused.
   */
  nodeKey?: string;
  hadCert?: boolean;
  signedBy?: string;
  lastError?: string;
  /**
   * The node went away while the provisioner was working on it: `since` is when the provisioner
   * learned it (ms epoch), `reason` says how ("broker connection closed", "no heartbeat for 20 s").
   * Deleted when the node is back. Absent in records written before it existed.
   */
  gone?: { since: number; reason: string };
  /**
   * What happened to the node's rounds, oldest first (the last ROUND_HISTORY): each round's start,
   * how it ended, the operator who retried it. Absent in records written before it existed.
   */
  history?: RoundEvent[];
  /**
   * The node waits for a Puppet master: `master` (its own, which no longer answers discovery: its
   * CSR and certificate are there) or, without it, any master (none answers). `since`: when the
   * provisioner began waiting (ms epoch); `reason` is what status shows. Deleted when the master
   * answers. Absent in records written before it existed.
   */
  masterWait?: {
    since: number;
    reason: string;
    master?: string;
    /**
     * Set when `master` is not yet the node's own but the known master its criteria pick (this
     * fact decided): past known_master_wait the node falls back to a master that answers rather
     * than fail. Absent in records written before it existed.
     */
    criterion?: string;
  };
  /**
   * This round stopped waiting for the master its criteria picked (`from`, which did not answer in
   * time) and went by the usual rule; `reason` is what the log and the admins' notice say, `at` when.
   * Cleared with a new round. Absent in records written before it existed.
   */
  masterFallback?: { from: string; reason: string; at: number };
  log: string[];
}

export const RoundEvents = ["started", "done", "failed", "retried", "restarted", "gone", "back"] as const;
export type RoundEventType = (typeof RoundEvents)[number];

/** One entry of a record's round history. */
export interface RoundEvent {
  /** ms epoch */
  at: number;
  round: number;
  event: RoundEventType;
  /** The stage it happened at (failed, gone), if any. */
  stage?: string;
  /** Why (failed: the error; gone: how the provisioner knows). */
  detail?: string;
  /** Who (a provisioner for started, an operator for retried). */
  by?: string;
}

/** Entries a record's history keeps (the oldest go first). */
export const ROUND_HISTORY = 20;

/** Adds an entry to the record's round history. */
export function noteRound(rec: NodeRecord, e: Omit<RoundEvent, "at" | "round">, now = Date.now()): void {
  const entry: RoundEvent = { at: now, round: rec.rounds, event: e.event };
  if (e.stage) entry.stage = e.stage;
  if (e.detail) entry.detail = e.detail.slice(0, 500);
  if (e.by) entry.by = e.by.slice(0, 200);
  rec.history = [...(rec.history ?? []), entry].slice(-ROUND_HISTORY);
}

/** Log lines a record keeps (the oldest go first). */
export const LOG_TAIL = 30;

/** A node's key in the state bucket. */
export function recordKey(identity: string): string {
  return bucketKey(identity);
}

export function newRecord(identity: string, now = Date.now()): NodeRecord {
  return { identity, status: "pending", attempts: 0, rounds: 0, updatedAt: now, timings: {}, log: [] };
}

/**
 * The dedupe key of a round's notice (the notifier sends a key once): the node, its round, what is
 * told, and when the round began. The round's start tells a machine provisioned again under an old
 * name (its record decommissioned, so its rounds count from 1 again) from the first one.
 */
export function noticeKey(rec: NodeRecord, what: "provisioned" | "failed"): string {
  return `${rec.identity}#${rec.rounds}#${what}${rec.startedAt ? `#${rec.startedAt}` : ""}`;
}

export function appendLog(rec: NodeRecord, line: string, now = Date.now()): void {
  rec.log.push(`${new Date(now).toISOString()} ${line}`);
  if (rec.log.length > LOG_TAIL) rec.log.splice(0, rec.log.length - LOG_TAIL);
}

const enc = new TextEncoder();
const dec = new TextDecoder();

export function encodeNodeRecord(rec: NodeRecord): Uint8Array {
  return enc.encode(JSON.stringify(rec));
}

export type RecordVerdict = { ok: true; record: NodeRecord } | { ok: false; reason: string };

/** A record as stored (bytes), or why it is not one. `key`: the bucket key it was read under, which must be its identity's. */
export function decodeNodeRecord(data: Uint8Array, key?: string): RecordVerdict {
  let v: unknown;
  try {
    v = JSON.parse(dec.decode(data));
  } catch {
    return { ok: false, reason: "not JSON" };
  }
  const r = parseNodeRecord(v);
  if (r.ok && key !== undefined && recordKey(r.record.identity) !== key) return { ok: false, reason: `stored under ${key}, names ${r.record.identity}` };
  return r;
}

const isStage = (x: unknown): x is Stage => typeof x === "string" && (Stages as readonly string[]).includes(x);
const isMs = (x: unknown): x is number => typeof x === "number" && Number.isFinite(x);
const isCount = (x: unknown): x is number => typeof x === "number" && Number.isInteger(x) && x >= 0;
const isObject = (x: unknown): x is Record<string, unknown> => typeof x === "object" && x !== null && !Array.isArray(x);

/** The optional fields and the check each must pass when present. */
const OPTIONAL: [keyof NodeRecord, (x: unknown) => boolean, string][] = [
  ["stage", isStage, "a stage"],
  ["current", isStage, "a stage"],
  ["master", (x) => typeof x === "string", "a string"],
  ["masterAddress", (x) => typeof x === "string", "a string"],
  ["nodeAddress", (x) => typeof x === "string", "a string"],
  ["owner", (x) => typeof x === "string", "a string"],
  ["claimExpires", isMs, "a time in ms"],
  ["lockExpires", isMs, "a time in ms"],
  ["startedAt", isMs, "a time in ms"],
  ["finishedAt", isMs, "a time in ms"],
  ["fingerprint", (x) => typeof x === "string", "a string"],
  ["nodeKey", (x) => typeof x === "string", "a string"],
  ["hadCert", (x) => typeof x === "boolean", "true or false"],
  ["signedBy", (x) => typeof x === "string", "a string"],
  ["lastError", (x) => typeof x === "string", "a string"],
  ["gone", (x) => isObject(x) && isMs(x.since) && typeof x.reason === "string", "{since: ms, reason: string}"],
  ["history", (x) => Array.isArray(x) && x.length <= 1000 && x.every((e) => isObject(e) && isMs(e.at) && isCount(e.round) && (RoundEvents as readonly unknown[]).includes(e.event) && ["stage", "detail", "by"].every((k) => e[k] === undefined || typeof e[k] === "string")), "a list of {at, round, event, stage?, detail?, by?}"],
  ["masterWait", (x) => isObject(x) && isMs(x.since) && typeof x.reason === "string" && (x.master === undefined || typeof x.master === "string") && (x.criterion === undefined || typeof x.criterion === "string"), "{since: ms, reason: string, master?: string, criterion?: string}"],
  ["masterFallback", (x) => isObject(x) && typeof x.from === "string" && typeof x.reason === "string" && isMs(x.at), "{from: string, reason: string, at: ms}"],
  ["stageTimes", (x) => isObject(x) && Object.entries(x).every(([k, t]) => isStage(k) && isObject(t) && isMs(t.start) && (t.end === undefined || isMs(t.end))), "stage: {start, end?} in ms"],
];

/** A parsed JSON value checked as a record, or why it is not one. */
export function parseNodeRecord(v: unknown): RecordVerdict {
  if (!isObject(v)) return { ok: false, reason: "not an object" };
  if (typeof v.identity !== "string" || !v.identity) return { ok: false, reason: "no identity" };
  if (!(NodeStatuses as readonly unknown[]).includes(v.status)) return { ok: false, reason: `unknown status ${JSON.stringify(v.status)}` };
  for (const f of ["attempts", "rounds"] as const) if (!isCount(v[f])) return { ok: false, reason: `${f} is not a count` };
  if (!isMs(v.updatedAt)) return { ok: false, reason: "updatedAt is not a time in ms" };
  if (!isObject(v.timings) || !Object.entries(v.timings).every(([k, t]) => isStage(k) && isMs(t))) return { ok: false, reason: "timings is not stage: ms" };
  if (!Array.isArray(v.log) || !v.log.every((l) => typeof l === "string")) return { ok: false, reason: "log is not a list of lines" };
  for (const [field, check, what] of OPTIONAL) {
    // null counts as absent: JSON has no undefined, and an older writer may have sent one
    if (v[field] === null) delete v[field];
    else if (v[field] !== undefined && !check(v[field])) return { ok: false, reason: `${field} is not ${what}` };
  }
  return { ok: true, record: v as unknown as NodeRecord };
}
