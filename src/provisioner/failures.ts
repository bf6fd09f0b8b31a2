import { createHash } from "node:crypto";
import { Stages, type NodeRecord } from "../protocol/provision-record.js";

// Failed nodes grouped by cause: the stage they failed on and their last error with the parts that
// differ from node to node (numbers, names, addresses, paths) taken out, so 190 nodes failing for
// one reason read as one line with a count. Pure; shared by `muster provision status --failed
// --group`, `muster provision retry --group` and the web console's board.

/** The stage a failed record failed on: the step it was working on, else the last one it completed. */
export function failedStage(rec: NodeRecord): string {
  return rec.current ?? rec.stage ?? "";
}

const UUID = /\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/gi;
const TIME = /\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?/g;
const FINGERPRINT = /\b[0-9a-f]{2}(?::[0-9a-f]{2}){7,}\b/gi;
const IPV4 = /\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b/g;
const IPV6 = /\[?\b(?:[0-9a-f]{1,4}:){2,7}[0-9a-f]{1,4}\b\]?(?::\d+)?/gi;
const URL_RE = /\b[a-z][a-z0-9+.-]*:\/\/[^\s'"<>)\]]+/gi;
// an absolute path: after the start, a space, a bracket, a quote or "=" (not the middle of a word or "a/b")
const PATH = /(^|[\s([{'"=,:])\/[^\s'"()[\]{},]+/g;
// a host or node name: two or more dot-separated labels with a letter in them (not "1.5", not "e.g.")
const HOST = /\b(?=[a-z0-9-]*[a-z])[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)+\b/gi;
const HEX = /\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b/gi;
const NUMBER = /\b\d+(?:\.\d+)?\b/g;
const QUOTED = /"[^"\n]{0,200}"|'[^'\n]{0,200}'/g;
const ESCAPE = /[.*+?^${}()|[\]\\]/g;

/** Longest reason kept: beyond this, errors are told apart by their start. */
export const MAX_REASON = 240;

/**
 * A last error without what differs between nodes: the node's own name and its master, URLs, times,
 * addresses, paths, host names, certificate fingerprints, UUIDs and long hex (fingerprints, request ids), quoted values and
 * numbers, each replaced by a placeholder. Whitespace is collapsed. What stays is the cause.
 */
export function normaliseReason(error: string | undefined, names: readonly (string | undefined)[] = []): string {
  let s = (error ?? "").replace(/\s+/g, " ").trim();
  if (!s) return "(no error recorded)";
  for (const n of names) if (n && n.length >= 2) s = s.replace(new RegExp(`(?<![A-Za-z0-9.-])${n.replace(ESCAPE, "\\$&")}(?![A-Za-z0-9-]|\\.[A-Za-z0-9])`, "g"), "<name>");
  s = s
    .replace(URL_RE, "<url>")
    .replace(TIME, "<time>")
    .replace(UUID, "<id>")
    .replace(FINGERPRINT, "<fingerprint>")
    .replace(IPV4, "<address>")
    .replace(IPV6, "<address>")
    .replace(PATH, "$1<path>")
    .replace(QUOTED, "<value>")
    .replace(HOST, "<name>")
    .replace(HEX, "<hex>")
    .replace(NUMBER, "<n>");
  return s.length > MAX_REASON ? `${s.slice(0, MAX_REASON - 1)}…` : s;
}

/** A group's stable id: the same stage and reason give the same id in the console and the CLI. */
export function groupId(stage: string, reason: string): string {
  return createHash("sha256").update(`${stage}\u0000${reason}`).digest("hex").slice(0, 10);
}

export interface FailureGroup {
  /** groupId(stage, reason): what `muster provision retry --group` and the console's retry take. */
  id: string;
  stage: string;
  reason: string;
  count: number;
  /** Masters of the group's nodes, most nodes first; "" for nodes that had none yet. */
  masters: { master: string; count: number }[];
  /** One node of the group (the first by name), as an example of the error and its log. */
  example: { identity: string; last_error: string; log_tail: string[] };
  /** Every node of the group, by name. */
  nodes: string[];
  /** When the newest of them failed (ms epoch), if recorded. */
  latest?: number;
}

const byName = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
const stageIndex = (s: string) => {
  const i = (Stages as readonly string[]).indexOf(s);
  return i < 0 ? Stages.length : i;
};

/** Lines of log an example carries. */
export const EXAMPLE_LOG_LINES = 8;

/** Failed records grouped by stage and normalised reason; the largest group first. */
export function groupFailures(records: Iterable<NodeRecord>): FailureGroup[] {
  const groups = new Map<string, { stage: string; reason: string; recs: NodeRecord[] }>();
  for (const r of records) {
    if (r.status !== "failed") continue;
    const stage = failedStage(r);
    const reason = normaliseReason(r.lastError, [r.identity, r.master]);
    const key = `${stage}\u0000${reason}`;
    let g = groups.get(key);
    if (!g) groups.set(key, (g = { stage, reason, recs: [] }));
    g.recs.push(r);
  }
  const out: FailureGroup[] = [];
  for (const g of groups.values()) {
    g.recs.sort((a, b) => byName(a.identity, b.identity));
    const masters = new Map<string, number>();
    let latest: number | undefined;
    for (const r of g.recs) {
      masters.set(r.master ?? "", (masters.get(r.master ?? "") ?? 0) + 1);
      const at = r.finishedAt ?? r.updatedAt;
      if (Number.isFinite(at) && (latest === undefined || at > latest)) latest = at;
    }
    const ex = g.recs[0]!;
    out.push({
      id: groupId(g.stage, g.reason),
      stage: g.stage,
      reason: g.reason,
      count: g.recs.length,
      masters: [...masters.entries()].map(([master, count]) => ({ master, count })).sort((a, b) => b.count - a.count || byName(a.master, b.master)),
      example: { identity: ex.identity, last_error: ex.lastError ?? "", log_tail: (ex.log ?? []).slice(-EXAMPLE_LOG_LINES) },
      nodes: g.recs.map((r) => r.identity),
      ...(latest !== undefined ? { latest } : {}),
    });
  }
  return out.sort((a, b) => b.count - a.count || stageIndex(a.stage) - stageIndex(b.stage) || byName(a.reason, b.reason));
}

export interface RetrySelection {
  /** A group's id (groupId). */
  group?: string;
  /** Only nodes provisioned against this master ("" for nodes without one). */
  master?: string;
}

/**
 * The failed records a group retry, or a master's retry, applies to: failed, in the group when one
 * is named, of the master when one is named. At least one of the two must be given.
 */
export function selectFailed(records: Iterable<NodeRecord>, sel: RetrySelection): NodeRecord[] {
  if (sel.group === undefined && sel.master === undefined) throw new Error("name a group or a master");
  const out: NodeRecord[] = [];
  for (const r of records) {
    if (r.status !== "failed") continue;
    if (sel.master !== undefined && (r.master ?? "") !== sel.master) continue;
    if (sel.group !== undefined && groupId(failedStage(r), normaliseReason(r.lastError, [r.identity, r.master])) !== sel.group) continue;
    out.push(r);
  }
  return out.sort((a, b) => byName(a.identity, b.identity));
}
