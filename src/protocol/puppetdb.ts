// PuppetDB through the registry daemon: `muster.registry.<bucket>.puppetdb` (subjects.ts). The
// registry holds the PuppetDB credential and asks PuppetDB; clients (the CLI, the console, the
// bench) need only the broker. docs/puppetdb.md describes it. Pure: message shapes and the checks
// a client makes of an answer (the registry is trusted no more than any other sender).
//
//   {"op": "discover", "filter": <wire Filter>, "collective": "muster"}
//       -> {"identities": [...], "warnings": [...], "puppetdb": "<its URL>"}
//   {"op": "nodes", "offset": 0}      every active node's latest report, a page (NODE_PAGE) at a time
//       -> {"nodes": [{certname, report_at, status, noop}], "more": bool, "next": <the next page's offset>, "puppetdb"}
//   {"op": "runs", "certname": "...", "limit": 5}   a node's last runs, a failed one's failed events
//       -> {"runs": [{identity, time, start, status, noop, resources, duration_s, config_version, events}], "puppetdb"}
//   any  -> {"error": "...", "code": "MUSTER_FILTER_INVALID" | "MUSTER_PUPPETDB_UNAVAILABLE" | "bad_request" | "too_large"}

import { PuppetRunStatuses, type PuppetRunRecord, type PuppetRunStatus } from "./puppet-run.js";

/** A node PuppetDB lists as active, with its latest report. */
export interface PuppetDbNodeStatus {
  certname: string;
  /** When its latest report was made (ms epoch), null when PuppetDB holds none. */
  report_at: number | null;
  status: PuppetRunStatus | null;
  noop: boolean;
}

export interface PuppetDbEvent {
  type: string;
  title: string;
  property: string | null;
  message: string | null;
}

/** A run from PuppetDB's report: the node-side record's fields, and more. */
export interface PuppetDbRun extends PuppetRunRecord {
  noop: boolean;
  /** When the run started (ms epoch). */
  start: number | null;
  /** The failed events of a failed run (at most 50), empty otherwise. */
  events: PuppetDbEvent[];
}

export const PuppetDbOps = ["discover", "nodes", "runs"] as const;
export type PuppetDbOp = (typeof PuppetDbOps)[number];

export interface PuppetDbDiscoverRequest {
  op: "discover";
  filter: unknown;
  collective?: string;
}

export type PuppetDbRequest = PuppetDbDiscoverRequest | { op: "nodes"; offset: number } | { op: "runs"; certname: string; limit: number };

export interface PuppetDbDiscoverReply {
  identities: string[];
  warnings: string[];
  /** The PuppetDB the registry asked (its base URL), for messages. */
  puppetdb: string;
}

export interface PuppetDbErrorReply {
  error: string;
  code: string;
}

export const MAX_PUPPETDB_REQUEST_BYTES = 256 * 1024;

const isStrings = (x: unknown): x is string[] => Array.isArray(x) && x.every((s) => typeof s === "string");

/** A registry's answer to discover, checked; an error reply or a malformed one is a string saying what. */
export function checkDiscoverReply(x: unknown): PuppetDbDiscoverReply | PuppetDbErrorReply {
  if (x === null || typeof x !== "object") return { error: "the registry's answer is not an object", code: "bad_reply" };
  const r = x as Record<string, unknown>;
  if (typeof r.error === "string") return { error: r.error, code: typeof r.code === "string" ? r.code : "unknown" };
  if (!isStrings(r.identities) || !isStrings(r.warnings ?? []) || typeof r.puppetdb !== "string") return { error: "the registry's answer lacks identities, warnings or puppetdb", code: "bad_reply" };
  return { identities: r.identities, warnings: (r.warnings as string[] | undefined) ?? [], puppetdb: r.puppetdb };
}

const isObj = (x: unknown): x is Record<string, unknown> => x !== null && typeof x === "object" && !Array.isArray(x);
const isMsOrNull = (x: unknown) => x === null || (typeof x === "number" && Number.isFinite(x));
const isStatusOrNull = (x: unknown) => x === null || (PuppetRunStatuses as readonly unknown[]).includes(x);
const isCount = (x: unknown) => typeof x === "number" && Number.isInteger(x) && x >= 0;

function isNodeStatus(x: unknown): x is PuppetDbNodeStatus {
  return isObj(x) && typeof x.certname === "string" && isMsOrNull(x.report_at) && isStatusOrNull(x.status) && typeof x.noop === "boolean";
}

function isRun(x: unknown): x is PuppetDbRun {
  if (!isObj(x) || typeof x.identity !== "string" || typeof x.time !== "number" || !isMsOrNull(x.start) || !isStatusOrNull(x.status) || x.status === null || typeof x.noop !== "boolean") return false;
  const r = x.resources;
  if (!isObj(r) || !isCount(r.total) || !isCount(r.changed) || !isCount(r.failed)) return false;
  if (!isMsOrNull(x.duration_s) || !(x.config_version === null || typeof x.config_version === "string") || !Array.isArray(x.events)) return false;
  return x.events.every((e) => isObj(e) && typeof e.type === "string" && typeof e.title === "string" && (e.property === null || typeof e.property === "string") && (e.message === null || typeof e.message === "string"));
}

function errorOf(x: unknown): PuppetDbErrorReply | undefined {
  if (!isObj(x)) return { error: "the registry's answer is not an object", code: "bad_reply" };
  return typeof x.error === "string" ? { error: x.error, code: typeof x.code === "string" ? x.code : "unknown" } : undefined;
}

/** A registry's page of node statuses, checked. */
export function checkNodesReply(x: unknown): { nodes: PuppetDbNodeStatus[]; more: boolean; next: number; puppetdb: string } | PuppetDbErrorReply {
  const e = errorOf(x);
  if (e) return e;
  const r = x as Record<string, unknown>;
  if (!Array.isArray(r.nodes) || !r.nodes.every(isNodeStatus) || typeof r.more !== "boolean" || !isCount(r.next) || typeof r.puppetdb !== "string") return { error: "the registry's answer is not a page of nodes", code: "bad_reply" };
  return { nodes: r.nodes, more: r.more, next: r.next as number, puppetdb: r.puppetdb };
}

/** A registry's runs of a node, checked (they must be the node's). */
export function checkRunsReply(x: unknown, certname: string): { runs: PuppetDbRun[]; puppetdb: string } | PuppetDbErrorReply {
  const e = errorOf(x);
  if (e) return e;
  const r = x as Record<string, unknown>;
  if (!Array.isArray(r.runs) || !r.runs.every((run) => isRun(run) && run.identity === certname) || typeof r.puppetdb !== "string") return { error: "the registry's answer is not a list of the node's runs", code: "bad_reply" };
  return { runs: r.runs as PuppetDbRun[], puppetdb: r.puppetdb };
}
