import type { HealthReport, NodeHealth } from "./model.js";
import { span } from "./model.js";

// When the admins are told about a node's health (docs/fleet.md#alerts): once when it has been
// unreachable past a threshold, once when Puppet has failed N runs in a row, and once more when
// each recovers; and about the site's own services (a provisioner, a broker, the registry...) once
// when one is down past the same threshold, and once when it is back (`<role>/<name>` stands where a
// node's identity would). Pure: the open alerts and a health report in, the notifications to send out.
// Each carries a dedupe key made from the node and when its trouble began (its last heartbeat, its
// first failed run), the same for every console that computes it: the notifier sends a key once
// (notify#send dedupe_key, kept in KV), so two consoles, or one restarted, do not tell twice.

export interface AlertPolicy {
  /** Seconds since its last heartbeat before an unreachable node is reported (it is unreachable after 25 s anyway). */
  unreachableAfterS: number;
  /** Failed Puppet runs in a row that are reported; 0 turns Puppet alerts off. */
  puppetFailures: number;
}

export const DEFAULT_ALERT_POLICY: AlertPolicy = { unreachableAfterS: 0, puppetFailures: 3 };

/**
 * Seconds of silence before an unreachable node is reported whatever made it unreachable: a node
 * whose last heartbeat said it was stopping is unreachable at once, and a restart (its switch to
 * production when it is provisioned, an upgrade) is back within seconds; that is no outage to page
 * anyone about. A power cut is reported at the 25 s the silence takes anyway.
 */
export const RESTART_GRACE_S = 20;

export type AlertKind = "unreachable" | "puppet_failing" | "service_down" | "store_copy_stuck";

export interface Alert {
  identity: string;
  kind: AlertKind;
  event: "problem" | "recovered";
  /** The alert a problem opens and its recovery ends: `health#<node>#<kind>#<since>` (the problem's dedupe key). */
  alert: string;
  subject: string;
  message: string;
  dedupe_key: string;
}

/** Per node, per kind: when the reported trouble began (ISO), while its alert is open. */
export type AlertState = Map<string, Map<AlertKind, string>>;

function trouble(n: NodeHealth, kind: AlertKind, policy: AlertPolicy): { since: string; why: string } | undefined {
  if (kind === "unreachable") {
    const p = n.problems.find((x) => x.kind === "unreachable");
    if (!p || (n.seen_s_ago ?? Infinity) < Math.max(policy.unreachableAfterS, RESTART_GRACE_S)) return undefined;
    return { since: p.since ?? "never", why: p.why };
  }
  const pp = n.puppet;
  if (policy.puppetFailures <= 0 || !pp || pp.failures_in_a_row < policy.puppetFailures || !pp.failing_since) return undefined;
  return { since: pp.failing_since, why: `Puppet failed ${pp.failures_in_a_row} runs in a row, the last ${pp.last_run}` };
}

const KINDS: AlertKind[] = ["unreachable", "puppet_failing"];
const LABEL: Record<AlertKind, [string, string]> = { unreachable: ["unreachable", "reachable again"], puppet_failing: ["Puppet failing", "Puppet runs again"], service_down: ["down", "up again"], store_copy_stuck: ["store copy stuck", "store copies whole again"] };

/**
 * A broker's copies stuck apart from their leaders' (health/brokers.ts stuckCopies, in the beat's
 * details): the broker answers, but the copy is no spare, and its leader's next restart can lose
 * writes. Since the earliest copy's mark, as the watching console keeps it (one key per stuck spell).
 */
function stuckTrouble(svc: { role: string; details: Record<string, unknown>; checks: { name: string; status: string; why: string }[] }): { since: string; why: string } | undefined {
  if (svc.role !== "broker" || !Array.isArray(svc.details.stuck) || svc.details.stuck.length === 0) return undefined;
  const since = (svc.details.stuck as unknown[]).map((x) => (typeof x === "object" && x !== null ? (x as { since?: unknown }).since : undefined)).filter((x): x is string => typeof x === "string" && Number.isFinite(Date.parse(x))).sort()[0];
  const why = svc.checks.find((c) => c.name === "streams" && c.status === "fail")?.why ?? "a copy of a replicated stream stays apart from its leader's";
  return { since: since ?? "never", why };
}

/** One kind of alert closed for `id` (its other kinds stay open). */
function closeKind(state: AlertState, id: string, kind: AlertKind): void {
  const open = state.get(id);
  open?.delete(kind);
  if (open && open.size === 0) state.delete(id);
}

/**
 * The notifications `report` calls for, given the alerts already open (updated in place). A node
 * that left the report (decommissioned, forgotten) closes its alerts without a notification.
 */
export function alertsFor(state: AlertState, report: HealthReport, policy: AlertPolicy): Alert[] {
  const out: Alert[] = [];
  const now = Date.parse(report.time);
  const present = new Set<string>();
  for (const n of report.nodes) {
    present.add(n.identity);
    const open = state.get(n.identity);
    for (const kind of KINDS) {
      const t = trouble(n, kind, policy);
      const was = open?.get(kind);
      if (t && was === undefined) {
        if (!state.has(n.identity)) state.set(n.identity, new Map());
        state.get(n.identity)!.set(kind, t.since);
        out.push({ identity: n.identity, kind, event: "problem", subject: `muster: ${n.identity} ${LABEL[kind][0]}`, message: `${n.identity}: ${t.why}${t.since !== "never" ? ` (since ${t.since})` : ""}.\n`, alert: `health#${n.identity}#${kind}#${t.since}`, dedupe_key: `health#${n.identity}#${kind}#${t.since}` });
      } else if (!t && was !== undefined) {
        // still unreachable but below a raised threshold is not a recovery: only a node heard again is
        if (kind === "unreachable" && !n.reachable) continue;
        open!.delete(kind);
        if (open!.size === 0) state.delete(n.identity);
        const lasted = was !== "never" && Number.isFinite(Date.parse(was)) ? ` after ${span(Math.max(0, (now - Date.parse(was)) / 1000))}` : "";
        out.push({ identity: n.identity, kind, event: "recovered", subject: `muster: ${n.identity} ${LABEL[kind][1]}`, message: `${n.identity} is ${LABEL[kind][1]}${lasted}.\n`, alert: `health#${n.identity}#${kind}#${was}`, dedupe_key: `health#${n.identity}#${kind}-recovered#${was}` });
      }
    }
  }
  // the site's services: one that does not answer past the threshold is down (a restart is not)
  for (const svc of report.services ?? []) {
    const id = `${svc.role}/${svc.name}`;
    present.add(id);
    const open = state.get(id);
    const p = svc.problems.find((x) => x.kind === "down");
    const t = p && (svc.seen_s_ago ?? Infinity) >= Math.max(policy.unreachableAfterS, RESTART_GRACE_S) ? { since: p.since ?? svc.last_seen ?? "never", why: p.why } : undefined;
    const was = open?.get("service_down");
    const key = (since: string) => `health#${id}#service_down#${since}`;
    if (t && was === undefined) {
      state.set(id, (open ?? new Map()).set("service_down", t.since));
      out.push({ identity: id, kind: "service_down", event: "problem", subject: `muster: ${id} down`, message: `The site's ${svc.role} ${svc.name}: ${t.why}${t.since !== "never" ? ` (since ${t.since})` : ""}.\n`, alert: key(t.since), dedupe_key: key(t.since) });
    } else if (!p && was !== undefined) {
      closeKind(state, id, "service_down");
      out.push({ identity: id, kind: "service_down", event: "recovered", subject: `muster: ${id} up again`, message: `The site's ${svc.role} ${svc.name} is up again.\n`, alert: key(was), dedupe_key: `health#${id}#service_down-recovered#${was}` });
    }
    // a broker that answers but holds a stuck copy: told once, and once when its copies are whole
    // (a broker that stops answering is service_down; its stuck copy, from its last look, stays open)
    const st = p ? undefined : stuckTrouble(svc);
    const wasStuck = state.get(id)?.get("store_copy_stuck");
    const stuckKey = (since: string) => `health#${id}#store_copy_stuck#${since}`;
    if (st && wasStuck === undefined) {
      state.set(id, (state.get(id) ?? new Map()).set("store_copy_stuck", st.since));
      out.push({ identity: id, kind: "store_copy_stuck", event: "problem", subject: `muster: ${id} store copy stuck`, message: `The site's broker ${svc.name}: ${st.why}${st.since !== "never" ? ` (since ${st.since})` : ""}.\n`, alert: stuckKey(st.since), dedupe_key: stuckKey(st.since) });
    } else if (!st && !p && wasStuck !== undefined) {
      closeKind(state, id, "store_copy_stuck");
      out.push({ identity: id, kind: "store_copy_stuck", event: "recovered", subject: `muster: ${id} store copies whole again`, message: `The site's broker ${svc.name} holds whole copies again.\n`, alert: stuckKey(wasStuck), dedupe_key: `health#${id}#store_copy_stuck-recovered#${wasStuck}` });
    }
  }
  for (const id of [...state.keys()]) if (!present.has(id)) state.delete(id);
  return out;
}
