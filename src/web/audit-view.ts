import type { StoredAuditEntry } from "../security/audit.js";

// The audit page (operators): the console's own records (its audit file: retries, group retries,
// runalls, and the refusals) and, when the nodes publish theirs to the audit stream, every request
// the nodes handled, from the CLI or anyone else (docs/security.md, "The audit trail"). Pure: the
// records in, the page's rows out, newest first, filtered by user and action.

export interface AuditRow {
  /** ISO time */
  time: string;
  /** console: the web console's file; node: a node's record of a request it handled. */
  source: "console" | "node";
  /** Who asked: `web:<name>` for the console's users, the caller's key name for the rest. */
  user: string;
  /** The console's action (retry, retry_group, runall), or agent.action for a node's record. */
  action: string;
  /** The node, or the console action's target. */
  target: string;
  ok: boolean;
  /** The outcome in words: the status message. */
  outcome: string;
  /** What was asked (the request's data; for the console, the role and how many nodes). */
  data: Record<string, unknown>;
}

export function auditRow(e: StoredAuditEntry, source: AuditRow["source"]): AuditRow {
  const { signature: _s, signer: _k, ...data } = (e.data ?? {}) as Record<string, unknown>;
  return {
    time: e.time,
    source,
    user: e.caller,
    action: source === "console" ? e.action : `${e.agent}.${e.action}`,
    target: e.identity,
    ok: e.statuscode === 0,
    outcome: e.statusmsg || (e.statuscode === 0 ? "ok" : `status ${e.statuscode}`),
    data,
  };
}

export interface AuditQuery {
  user?: string;
  action?: string;
  /** Only refusals and failures. */
  refused?: boolean;
  limit?: number;
}

export interface AuditPage {
  rows: AuditRow[];
  /** Matching rows before the limit. */
  total: number;
  /** Every user and action in the records read, for the filters' choices. */
  users: string[];
  actions: string[];
}

/** Newest first; `user` and `action` match exactly; at most `limit` rows (default 500). */
export function auditPage(rows: readonly AuditRow[], q: AuditQuery = {}): AuditPage {
  const users = [...new Set(rows.map((r) => r.user))].sort();
  const actions = [...new Set(rows.map((r) => r.action))].sort();
  const hit = rows.filter((r) => (!q.user || r.user === q.user) && (!q.action || r.action === q.action) && (!q.refused || !r.ok));
  hit.sort((a, b) => (a.time < b.time ? 1 : a.time > b.time ? -1 : 0));
  return { rows: hit.slice(0, Math.max(1, Math.min(q.limit ?? 500, 5000))), total: hit.length, users, actions };
}
