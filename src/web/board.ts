import { Stages, type NodeRecord, type Stage } from "../protocol/provision-record.js";
import { failedStage } from "../provisioner/failures.js";

// The provisioning board: the provisioner's per-node records (protocol/provision-record.ts) as the
// console shows them. Pure: the record and the clock in, the row out (what `muster provision
// status` prints, plus a timeline of stages and the log tail).

export interface TimelineEntry {
  stage: Stage;
  /** ISO time the stage's first try started. */
  start: string;
  /** ISO time it completed; absent while it runs (or when it failed). */
  end?: string;
}

export interface BoardNode {
  identity: string;
  /** pending | in_progress | done | failed, as the provisioner records it. */
  status: NodeRecord["status"];
  /** The stage being worked on while in progress, the one that failed when failed, else the last completed one; "" before any. */
  stage: string;
  master: string | null;
  started: string | null;
  updated: string;
  finished: string | null;
  elapsed_s: number | null;
  /** Failed attempts of the current stage (the CLI's TRIES). */
  tries: number;
  /** Provisioning rounds (1 + retries and restarts). */
  rounds: number;
  last_error: string | null;
  timeline: TimelineEntry[];
  log_tail: string[];
  /** The provisioner found the node gone (its record's `gone`): since when (ISO) and why; null otherwise. */
  gone: { since: string; reason: string } | null;
  /** Its rounds: each start, how it ended, who retried (the record's history, times ISO), oldest first. */
  history: { at: string; round: number; event: string; stage?: string; detail?: string; by?: string }[];
  /** The node waits for a Puppet master that does not answer (its record's `masterWait`): since when (ISO), why, and which master (null: any); null otherwise. */
  waiting: { since: string; reason: string; master: string | null } | null;
}

/** What the provisioner records when it learns a node went away (deleted when the node is back). */
export interface GoneMark {
  /** ms epoch the provisioner learned it. */
  since: number;
  reason: string;
}

/** The record's `gone` mark when it is well-formed (the bucket is writable by others), else undefined. */
export function goneMark(rec: NodeRecord): GoneMark | undefined {
  const g = rec.gone as Partial<GoneMark> | undefined;
  if (typeof g !== "object" || g === null || typeof g.since !== "number" || !Number.isFinite(g.since)) return undefined;
  return { since: g.since, reason: typeof g.reason === "string" && g.reason ? g.reason.slice(0, 500) : "gone" };
}

const iso = (ms: number | undefined) => (ms === undefined || !Number.isFinite(ms) ? null : new Date(ms).toISOString());

/** Lines the board carries per node; the record keeps up to 30. */
export const BOARD_LOG_LINES = 10;

const LOG_OK = /^(\S+) (\S+) ok(?:: .*)? \((\d+) ms\)$/;

/**
 * The stages of the current round with their times. From `stageTimes` when the provisioner wrote
 * them; for older records, from the log lines "<iso> <stage> ok ... (<ms> ms)" (end at the line,
 * start that many ms before: the successful try only).
 */
export function timeline(rec: NodeRecord): TimelineEntry[] {
  const out: TimelineEntry[] = [];
  if (rec.stageTimes && Object.keys(rec.stageTimes).length) {
    for (const s of Stages) {
      const t = rec.stageTimes[s];
      if (!t || !Number.isFinite(t.start)) continue;
      const e: TimelineEntry = { stage: s, start: new Date(t.start).toISOString() };
      if (t.end !== undefined && Number.isFinite(t.end)) e.end = new Date(t.end).toISOString();
      // a node no longer in progress has no open stage: the one it failed on ended when it failed
      else if (rec.status !== "in_progress" && rec.finishedAt !== undefined && Number.isFinite(rec.finishedAt)) e.end = new Date(Math.max(rec.finishedAt, t.start)).toISOString();
      out.push(e);
    }
    return out;
  }
  const since = rec.startedAt ?? 0;
  const seen = new Set<string>();
  for (const line of rec.log ?? []) {
    const m = LOG_OK.exec(line);
    if (!m || !(Stages as readonly string[]).includes(m[2]!)) continue;
    const end = Date.parse(m[1]!);
    if (!Number.isFinite(end) || end < since) continue;
    seen.add(m[2]!);
    out.push({ stage: m[2] as Stage, start: new Date(end - Number(m[3])).toISOString(), end: new Date(end).toISOString() });
  }
  if (rec.status === "in_progress" && rec.current && !seen.has(rec.current)) {
    const last = out.at(-1)?.end ?? iso(rec.startedAt);
    if (last) out.push({ stage: rec.current, start: last });
  }
  return out;
}

export function boardNode(rec: NodeRecord, now = Date.now()): BoardNode {
  const started = rec.startedAt;
  const stop = rec.status === "in_progress" ? now : (rec.finishedAt ?? rec.updatedAt);
  // a node done or failed is not "gone" whatever a stale mark says: it is not waited on
  const gone = rec.status === "in_progress" || rec.status === "pending" ? goneMark(rec) : undefined;
  const wait = rec.status === "in_progress" && !gone ? rec.masterWait : undefined;
  return {
    identity: rec.identity,
    status: rec.status,
    // while working, and when failed, the step it is (or was) on: a failed bootstrap says bootstrap,
    // not the sign_csr before it; the same rule as `muster provision status`
    stage: rec.status === "in_progress" || rec.status === "failed" ? failedStage(rec) : (rec.stage ?? ""),
    master: rec.master ?? null,
    started: iso(started),
    updated: iso(rec.updatedAt) ?? new Date(now).toISOString(),
    finished: iso(rec.finishedAt),
    elapsed_s: started === undefined ? null : Math.max(0, Math.round((stop - started) / 100) / 10),
    tries: rec.attempts ?? 0,
    rounds: rec.rounds ?? 0,
    last_error: rec.lastError ?? null,
    timeline: timeline(rec),
    log_tail: (rec.log ?? []).slice(-BOARD_LOG_LINES),
    gone: gone ? { since: new Date(gone.since).toISOString(), reason: gone.reason } : null,
    history: (rec.history ?? []).map((h) => ({ ...h, at: new Date(h.at).toISOString() })),
    waiting: wait ? { since: new Date(wait.since).toISOString(), reason: wait.reason.slice(0, 500), master: wait.master ?? null } : null,
  };
}

const ORDER: Record<NodeRecord["status"], number> = { failed: 0, in_progress: 2, pending: 3, done: 4 };
/** Gone nodes come right after failed ones: both need someone. */
const rank = (n: BoardNode) => (n.gone ? 1 : (ORDER[n.status] ?? 9));

/** Failed nodes first, then gone ones, in progress, pending, done; by identity within each. */
export function boardOrder(a: BoardNode, b: BoardNode): number {
  return rank(a) - rank(b) || (a.identity < b.identity ? -1 : a.identity > b.identity ? 1 : 0);
}
