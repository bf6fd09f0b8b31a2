import { OPERATOR_AUDIT_AGENTS, type StoredAuditEntry } from "../security/audit.js";

// The audit page (operators): the console's own records (its actions, alerts and refusals), the
// CLI's (`muster alerts`), and every request the nodes handled, from the CLI or anyone else, all
// from the audit stream (and the console's file when it keeps one), docs/security.md "The audit
// trail". Reads (a node page asking a node's puppet agent, discovery, inventory: actions their
// DDL marks `readonly`) are left out unless asked for, so actions are not buried; refused or failed
// ones always show. Pure: the records in, the page's rows out, newest first, filtered.

export interface AuditRow {
  /** ISO time */
  time: string;
  /** console: the web console's own record; cli: a CLI command's (muster alerts); node: a node's record of a request it handled. */
  source: "console" | "cli" | "node";
  /** Who asked: `web:<name>` for the console's users, the caller's key name for the rest. */
  user: string;
  /** The console's or the CLI's action (retry, runall, alerts.ack), or agent.action for a node's record. */
  action: string;
  /** The node, or the action's target. */
  target: string;
  ok: boolean;
  /** The outcome in words: the status message. */
  outcome: string;
  /** A node's record of a request that only read (its DDL says `readonly`). */
  read: boolean;
  /** What was asked (the request's data; for the console, the role and how many nodes). */
  data: Record<string, unknown>;
}

/** `isRead(agent, action)`: whether the agent's DDL marks the action readonly (unknown agents: no). */
export function auditRow(e: StoredAuditEntry, isRead: (agent: string, action: string) => boolean = () => false): AuditRow {
  const { signature: _s, signer: _k, ...data } = (e.data ?? {}) as Record<string, unknown>;
  const source: AuditRow["source"] = e.agent === OPERATOR_AUDIT_AGENTS.console ? "console" : e.agent === OPERATOR_AUDIT_AGENTS.cli ? "cli" : "node";
  return {
    time: e.time,
    source,
    user: e.caller,
    action: source === "node" ? `${e.agent}.${e.action}` : e.action,
    target: e.identity,
    ok: e.statuscode === 0,
    outcome: e.statusmsg || (e.statuscode === 0 ? "ok" : `status ${e.statuscode}`),
    read: source === "node" && isRead(e.agent, e.action),
    data,
  };
}

/** Records from several places (the console's file and the stream hold the console's records twice) once each. */
export function distinctRecords(lists: readonly StoredAuditEntry[][]): StoredAuditEntry[] {
  const seen = new Set<string>();
  const out: StoredAuditEntry[] = [];
  for (const l of lists)
    for (const e of l) {
      const k = `${e.identity}\u0000${e.requestid}\u0000${e.statuscode}\u0000${e.time}`;
      if (seen.has(k)) continue;
      seen.add(k);
      out.push(e);
    }
  return out;
}

export interface AuditQuery {
  user?: string;
  action?: string;
  /** Only refusals and failures. */
  refused?: boolean;
  /** Reads too (left out by default). */
  reads?: boolean;
  limit?: number;
}

export interface AuditPage {
  rows: AuditRow[];
  /** Matching rows before the limit. */
  total: number;
  /** Reads that matched and were left out (`reads` shows them). */
  reads_hidden: number;
  /** Every user and action in the records read, for the filters' choices. */
  users: string[];
  actions: string[];
}

/** Newest first; `user` and `action` match exactly; reads left out unless `reads`; at most `limit` rows (default 500). */
export function auditPage(rows: readonly AuditRow[], q: AuditQuery = {}): AuditPage {
  const users = [...new Set(rows.map((r) => r.user))].sort();
  const actions = [...new Set(rows.map((r) => r.action))].sort();
  const matching = rows.filter((r) => (!q.user || r.user === q.user) && (!q.action || r.action === q.action) && (!q.refused || !r.ok));
  // a read that was refused or failed is not routine: it always shows
  const hit = q.reads ? matching : matching.filter((r) => !r.read || !r.ok);
  hit.sort((a, b) => (a.time < b.time ? 1 : a.time > b.time ? -1 : 0));
  return { rows: hit.slice(0, Math.max(1, Math.min(q.limit ?? 500, 5000))), total: hit.length, reads_hidden: matching.length - hit.length, users, actions };
}
