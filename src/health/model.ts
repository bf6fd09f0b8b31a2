import type { Heartbeat } from "../protocol/heartbeat.js";
import type { NodeRecord } from "../protocol/provision-record.js";
import { DEFAULT_RUNINTERVAL_S, puppetRunFromStatus, type PuppetRunRecord, type PuppetRunStatus } from "../protocol/puppet-run.js";
import { failedStage } from "../provisioner/failures.js";
import type { PuppetDbNodeStatus } from "../protocol/puppetdb.js";
import { servicesHealth, summariseServices, type ServiceHealth, type ServiceInputs, type ServiceSummary } from "./services.js";
import { silentSeconds, span, viewState, watchedSeconds, type Blind, type ViewState } from "./view.js";

export { span };

// Fleet health: one model, three faces (`muster health`, the console's landing page and
// /api/health, the admins' alerts). Pure: what is known of each node (its latest heartbeat as the
// broker stored it, whether the registry knows it, its provisioning record, its recent Puppet runs)
// and the clock in, each node's health with the reasons for every problem out, unhealthy first;
// beside them the site's own services (services.ts), and how far the observer could see
// (view.ts: silence it could not watch is held against nobody). docs/fleet.md#health.

export interface HealthPolicy {
  /** Seconds without a heartbeat before a node counts as unreachable (at least 2.5 of its own intervals). */
  unreachableAfterS: number;
  /**
   * Seconds after its last run before Puppet counts as stale, for every node. Unset (the default):
   * twice the node's own runinterval, which its heartbeat carries, else twice Puppet's 30 minutes.
   */
  puppetStaleAfterS?: number;
}

export const DEFAULT_HEALTH_POLICY: HealthPolicy = { unreachableAfterS: 25 };

/** When a node's Puppet counts as stale: the policy's threshold, else twice its runinterval. */
export function staleAfterS(policy: HealthPolicy, puppet: Record<string, unknown> | undefined): number {
  if (policy.puppetStaleAfterS !== undefined) return policy.puppetStaleAfterS;
  const ri = puppet?.runinterval;
  return 2 * (typeof ri === "number" && Number.isFinite(ri) && ri > 0 ? ri : DEFAULT_RUNINTERVAL_S);
}

/**
 * What PuppetDB says of a node, where one is configured: then PuppetDB's reports are the record
 * of Puppet runs (docs/puppetdb.md#fleet-health). A node PuppetDB does not list is `{active: false,
 * report_at: null, status: null}`.
 */
export interface PuppetDbView {
  /** PuppetDB lists it active (not deactivated, not expired). */
  active: boolean;
  /** Its latest report: when it was made (ms epoch) and how the run went; null when none. */
  report_at: number | null;
  status: PuppetRunStatus | null;
  /** Its last runs from PuppetDB, newest first, when they were read (a failing node's, for its streak). */
  runs?: readonly PuppetRunRecord[];
}

/** What PuppetDB says of a node, from its active nodes' latest reports (undefined: no PuppetDB configured). */
export function puppetDbView(nodes: ReadonlyMap<string, PuppetDbNodeStatus> | undefined, id: string, runs?: readonly PuppetRunRecord[]): PuppetDbView | undefined {
  if (!nodes) return undefined;
  const n = nodes.get(id);
  return n ? { active: true, report_at: n.report_at, status: n.status, ...(runs ? { runs } : {}) } : { active: false, report_at: null, status: null };
}

/** What is known of one node. */
export interface HealthInputs {
  identity: string;
  /** Its latest heartbeat, and when the broker stored it (ms epoch, the broker's clock). */
  beat?: { heartbeat: Heartbeat; at: number };
  /** The registry knows it (it registered within the registry's max_age). */
  registered?: boolean;
  provisioning?: NodeRecord;
  /** Its recent Puppet runs, newest first (each run once). */
  runs?: readonly PuppetRunRecord[];
  /** What PuppetDB says of it; absent when no PuppetDB is configured (or it could not be read). */
  puppetdb?: PuppetDbView;
  /** The observer asked it (rpcutil ping) at `at` (ms epoch): whether it answered, and if the ask itself failed, why. */
  asked?: Asked;
}

export interface Asked {
  /** When it answered; when asked, if it did not (yet). */
  at: number;
  answered: boolean;
  error?: string;
  /** The ask is under way: not judged until it comes back (the console asks while it keeps reporting). */
  pending?: boolean;
}

// puppetdb_active: unreachable, yet PuppetDB lists it active; puppetdb_no_report: it answers, but
// PuppetDB has no report of it within the stale threshold (the two disagreements of the witnesses)
export const ProblemKinds = ["unreachable", "puppetdb_active", "gone", "provisioning_failed", "puppet_failed", "puppet_disabled", "puppetdb_no_report", "puppet_stale"] as const;
export type ProblemKind = (typeof ProblemKinds)[number];

export interface Problem {
  kind: ProblemKind;
  /** Why, in a line an operator acts on. */
  why: string;
  /** Since when (ISO), where known. */
  since?: string;
}

export interface PuppetHealth {
  /** Whose record of runs this is: PuppetDB's reports where one is configured, else what the node sends. */
  source: "puppetdb" | "node";
  /** How the last run went; null when Puppet has not run. */
  status: PuppetRunStatus | null;
  /** When the last run ended (ISO). */
  last_run: string | null;
  /** Seconds since then. */
  age_s: number | null;
  stale: boolean;
  /** Seconds since the last run past which it counts as stale (twice its runinterval, unless set). */
  stale_after_s: number;
  disabled: boolean;
  disabled_message: string | null;
  disabled_since: string | null;
  /** Failed runs in a row up to the last one (0 when it did not fail). */
  failures_in_a_row: number;
  /** When the first of those failed runs ended (ISO); null when the last run did not fail. */
  failing_since: string | null;
  resources: { total: number; changed: number; failed: number } | null;
}

export interface ProvisioningHealth {
  status: NodeRecord["status"];
  /** The stage it is on, or failed at (as the board and `muster provision status` say). */
  stage: string;
  master: string | null;
  rounds: number;
  last_error: string | null;
  gone: { since: string; reason: string } | null;
}

export interface NodeHealth {
  identity: string;
  reachable: boolean;
  /** When a heartbeat last arrived (ISO, the broker's clock); null when none ever did. */
  last_seen: string | null;
  /** Seconds since then. */
  seen_s_ago: number | null;
  /** waiting: in the provisioning collective; serving: in the fleet; null: no heartbeat. */
  phase: Heartbeat["phase"] | null;
  puppet: PuppetHealth | null;
  provisioning: ProvisioningHealth | null;
  /** Empty when healthy; the worst first. */
  problems: Problem[];
}

export type HealthSummary = { nodes: number; healthy: number; unhealthy: number } & Record<ProblemKind, number>;

export interface HealthReport {
  /** When it was computed (ISO). */
  time: string;
  /** Whether the observer could see: degraded, nobody is judged by silence (view.ts). */
  view: ViewState;
  /** The site's own services, brokers first (services.ts); empty for a report narrowed by a filter. */
  services: ServiceHealth[];
  service_summary: ServiceSummary;
  nodes: NodeHealth[];
  summary: HealthSummary;
}

const iso = (ms: number) => new Date(ms).toISOString();
const secondsSince = (ms: number, now: number) => Math.max(0, Math.round((now - ms) / 1000));
const str = (v: unknown) => (typeof v === "string" && v ? v : null);

/** The silence after which this node counts as unreachable, seconds: the policy's, or 2.5 of its own intervals if longer. */
export function unreachableAfter(policy: HealthPolicy, interval: number | undefined): number {
  return Math.max(policy.unreachableAfterS, 2.5 * (interval ?? 0));
}

/** Failed runs in a row, newest first. */
export function failuresInARow(runs: readonly PuppetRunRecord[]): number {
  let n = 0;
  for (const r of runs) {
    if (r.status !== "failed") break;
    n++;
  }
  return n;
}

/** The last run by PuppetDB's record: its latest report, with the counts of its run when they were read. */
function puppetDbRuns(i: HealthInputs): PuppetRunRecord[] {
  const p = i.puppetdb!;
  if (p.report_at === null || p.status === null) return [];
  const runs = [...(p.runs ?? [])].sort((a, b) => b.time - a.time);
  if (runs[0]?.time === p.report_at) return runs;
  return [{ identity: i.identity, time: p.report_at, status: p.status, resources: { total: 0, changed: 0, failed: 0 }, duration_s: null, config_version: null }, ...runs.filter((r) => r.time < p.report_at!)];
}

function puppetHealth(i: HealthInputs, policy: HealthPolicy, now: number): PuppetHealth | null {
  const v = i.beat?.heartbeat.status.puppet;
  let runs: PuppetRunRecord[];
  if (i.puppetdb) runs = puppetDbRuns(i);
  else {
    const latest = v ? puppetRunFromStatus(i.identity, v) : i.runs?.[0];
    if (!v && !latest) return null;
    // the runs history may already hold a newer run than the heartbeat said (or the other way round)
    runs = (i.runs ?? []).filter((r) => r.time !== latest?.time);
    if (latest) runs.push(latest);
    runs.sort((a, b) => b.time - a.time);
  }
  const last = runs[0];
  const age = last ? secondsSince(last.time, now) : null;
  const disabled = v ? v.enabled === false || v.disabled === true : false;
  const since = v && typeof v.disabled_since === "number" && v.disabled_since > 0 ? iso(v.disabled_since) : null;
  const staleAfter = staleAfterS(policy, v);
  // PuppetDB's latest report says when and how; its counts only when its runs were read
  const known = !i.puppetdb || (last !== undefined && (i.puppetdb.runs ?? []).some((r) => r.time === last.time));
  return {
    source: i.puppetdb ? "puppetdb" : "node",
    status: last?.status ?? null,
    last_run: last ? iso(last.time) : null,
    age_s: age,
    stale: age !== null && age > staleAfter,
    stale_after_s: staleAfter,
    disabled,
    disabled_message: disabled ? (str(v?.disable_message) ?? str(v?.disabled_message)) : null,
    disabled_since: disabled ? since : null,
    failures_in_a_row: failuresInARow(runs),
    failing_since: failuresInARow(runs) > 0 ? iso(runs[failuresInARow(runs) - 1]!.time) : null,
    resources: last && known ? { ...last.resources } : null,
  };
}

function provisioningHealth(r: NodeRecord): ProvisioningHealth {
  const g = (r.status === "in_progress" || r.status === "pending") && r.gone && Number.isFinite(r.gone.since) ? r.gone : undefined;
  return {
    status: r.status,
    stage: r.status === "in_progress" || r.status === "failed" ? failedStage(r) : (r.stage ?? ""),
    master: r.master ?? null,
    rounds: r.rounds ?? 0,
    last_error: r.lastError ?? null,
    gone: g ? { since: iso(g.since), reason: g.reason } : null,
  };
}

/** Its heartbeat, last seen when it last answered an ask if that is later (an answer is as good as a beat). */
function seenAt(i: HealthInputs): HealthInputs["beat"] {
  const b = i.beat;
  return b && i.asked?.answered && !i.asked.pending && i.asked.at > b.at && b.heartbeat.state !== "stopping" ? { ...b, at: i.asked.at } : b;
}

/**
 * Quiet past its limit counting every second the observer watched, though not by the rule that
 * counts from the end of a stretch the store may have lost writes in (silentSeconds): a node that
 * died in a store's failover, or one whose beats the failover dropped. Only asking tells them apart.
 */
function doubted(at: number, now: number, blind: readonly Blind[], limitS: number): boolean {
  return watchedSeconds(at, now, blind.filter((b) => !b.lost)) > limitS;
}

/**
 * The nodes an observer should ask (rpcutil ping) before it judges them: quiet past their limit,
 * whether the silence already counts (unreachable) or counts only if no store lost their beats
 * (doubted), not stopped, and not asked since their last beat within `againMs`; `leadS` seconds
 * before that (a number: at most a fifth of the limit), so the ask has come back when the silence
 * reaches the limit: the console asks 4 s ahead; `muster health`, which judges as of its ask's end,
 * asks every node whose limit falls before that end. An unanswered ask judges nobody before the limit.
 * Pure: the feed and `muster health` ask them and put the answers in `asked`.
 */
export function nodesToAsk(inputs: Iterable<HealthInputs>, policy: HealthPolicy, now: number, x: Pick<ReportExtras, "blind" | "judgeUntil"> = {}, againMs = 10_000, leadS: number | ((limitS: number) => number) = 0): string[] {
  const blind = x.blind ?? [];
  if (blind.some((b) => b.to === undefined)) return []; // it cannot see now: nobody is judged, nobody asked
  const unseen = unseenOf(blind, now, x.judgeUntil);
  const out: string[] = [];
  for (const i of inputs) {
    const beat = seenAt(i);
    if (!beat || beat.heartbeat.state === "stopping") continue;
    if (i.asked && i.asked.at >= beat.at && now - i.asked.at < againMs) continue;
    const limit = unreachableAfter(policy, beat.heartbeat.interval);
    // a number: ahead by at most a fifth of the limit (a short limit, 3 s as in the tests, would
    // otherwise have a watching console ask every node all the time); a function: the caller's own
    const lead = typeof leadS === "function" ? leadS(limit) : Math.min(leadS, limit / 5);
    if (doubted(beat.at, now, unseen, limit - lead)) out.push(i.identity);
  }
  return out.sort();
}

/**
 * One node's health at `now`; silence during `blind` stretches (the observer could not see) does
 * not count, and while `blindNow` (the observer cannot see now) a node never heard from is not
 * called unreachable either: its heartbeats may be what cannot be read.
 */
export function nodeHealth(i: HealthInputs, policy: HealthPolicy, now: number, blind: readonly Blind[] = [], blindNow = false): NodeHealth {
  const problems: Problem[] = [];
  const beat = seenAt(i);
  let reachable: boolean;
  if (beat) {
    const silent = secondsSince(beat.at, now);
    const limit = unreachableAfter(policy, beat.heartbeat.interval);
    const quiet = () => `no heartbeat for ${span(silent)} (one is due every ${span(beat.heartbeat.interval)}; unreachable after ${span(limit)})`;
    const lastAsk = i.asked && i.asked.at >= beat.at ? i.asked : undefined;
    const unanswered = lastAsk && !lastAsk.answered && !lastAsk.pending ? (lastAsk.error ? `; asking it failed: ${lastAsk.error}` : "; it did not answer a ping") : undefined;
    if (beat.heartbeat.state === "stopping") {
      reachable = false;
      problems.push({ kind: "unreachable", why: `stopped ${span(silent)} ago (its last heartbeat said it was stopping)`, since: iso(beat.at) });
    } else if (lastAsk?.pending) {
      reachable = true; // being asked: its answer, or the lack of one, judges it in a moment
    } else if (silentSeconds(beat.at, now, blind, limit) > limit) {
      reachable = false;
      problems.push({ kind: "unreachable", why: `${quiet()}${unanswered ?? ""}`, since: iso(beat.at) });
    } else if (unanswered && !lastAsk!.error && doubted(beat.at, now, blind, limit)) {
      // quiet past its limit but for a stretch the store may have lost its beats in, and asked since: no answer settles it
      reachable = false;
      problems.push({ kind: "unreachable", why: `${quiet()}${unanswered}`, since: iso(beat.at) });
    } else reachable = true;
  } else if (i.registered) {
    reachable = true; // no heartbeats (an older muster, or heartbeat.interval 0): its registration vouches for it
  } else if (blindNow) {
    reachable = true; // not judged: what this view cannot see may be its heartbeats
  } else {
    reachable = false;
    problems.push({ kind: "unreachable", why: "never heard from: no heartbeat, and the registry does not know it" });
  }

  const pdb = i.puppetdb;
  if (pdb?.active && !reachable) {
    const last = pdb.report_at !== null ? `, its last report ${span(secondsSince(pdb.report_at, now))} ago` : "";
    problems.push({ kind: "puppetdb_active", why: `PuppetDB still lists it active${last}: if it is gone for good, \`muster decommission ${i.identity}\` deactivates it there` });
  }

  const prov = i.provisioning ? provisioningHealth(i.provisioning) : null;
  if (prov?.gone) problems.push({ kind: "gone", why: `the provisioner found it gone: ${prov.gone.reason}`, since: prov.gone.since });
  if (prov?.status === "failed") problems.push({ kind: "provisioning_failed", why: `provisioning failed at ${prov.stage || "its first stage"}${prov.last_error ? `: ${prov.last_error.replace(/\s+/g, " ").slice(0, 300)}` : ""}`, ...(i.provisioning!.finishedAt ? { since: iso(i.provisioning!.finishedAt) } : {}) });

  const puppet = puppetHealth(i, policy, now);
  if (puppet) {
    if (puppet.status === "failed") {
      const res = puppet.resources && puppet.resources.failed > 0 ? `${puppet.resources.failed} failed resource${puppet.resources.failed === 1 ? "" : "s"}` : "no catalog applied";
      const streak = puppet.failures_in_a_row > 1 ? `, ${puppet.failures_in_a_row} runs in a row` : "";
      problems.push({ kind: "puppet_failed", why: `the last Puppet run failed ${span(puppet.age_s ?? 0)} ago (${res}${streak})`, ...(puppet.last_run ? { since: puppet.last_run } : {}) });
    }
    if (puppet.disabled) problems.push({ kind: "puppet_disabled", why: `Puppet is disabled${puppet.disabled_since ? ` since ${puppet.disabled_since}` : ""}: ${puppet.disabled_message ?? "no message given"}`, ...(puppet.disabled_since ? { since: puppet.disabled_since } : {}) });
    // a node that is not heard from is the problem; its Puppet going stale follows from it
    if (puppet.source === "node" && puppet.stale && reachable && !puppet.disabled) problems.push({ kind: "puppet_stale", why: `Puppet has not run for ${span(puppet.age_s ?? 0)} (stale after ${span(puppet.stale_after_s)})`, ...(puppet.last_run ? { since: puppet.last_run } : {}) });
    // PuppetDB's record: a node in the fleet that answers, with no report there within the threshold.
    // One PuppetDB does not know and whose Puppet never ran (a site machine Puppet does not manage)
    // has nothing to report: the two witnesses agree, as with the node's own record alone
    const own = i.beat?.heartbeat.status.puppet ? puppetRunFromStatus(i.identity, i.beat.heartbeat.status.puppet) : undefined;
    const managed = i.puppetdb?.active === true || own !== undefined || puppet.age_s !== null;
    if (puppet.source === "puppetdb" && (puppet.age_s === null || puppet.stale) && managed && reachable && !puppet.disabled && beat?.heartbeat.phase !== "waiting") {
      const ownAge = own ? secondsSince(own.time, now) : null;
      const said = ownAge !== null && ownAge <= puppet.stale_after_s ? `, though the node says its Puppet ran ${span(ownAge)} ago: its reports do not reach PuppetDB (its master's reports setting, puppetdb.conf)` : "";
      const report = puppet.age_s === null ? "PuppetDB holds no report of it" : `PuppetDB's last report of it is ${span(puppet.age_s)} old`;
      problems.push({ kind: "puppetdb_no_report", why: `${report} (stale after ${span(puppet.stale_after_s)})${said}`, ...(puppet.last_run ? { since: puppet.last_run } : {}) });
    }
  }
  problems.sort((a, b) => ProblemKinds.indexOf(a.kind) - ProblemKinds.indexOf(b.kind));
  return {
    identity: i.identity,
    reachable,
    last_seen: beat ? iso(beat.at) : null,
    seen_s_ago: beat ? secondsSince(beat.at, now) : null,
    phase: beat?.heartbeat.phase ?? null,
    puppet,
    provisioning: prov,
    problems,
  };
}

const rank = (n: NodeHealth) => (n.problems.length ? ProblemKinds.indexOf(n.problems[0]!.kind) : ProblemKinds.length);

/** Unhealthy nodes first (the worst problem first), then by name. */
export function healthOrder(a: NodeHealth, b: NodeHealth): number {
  return rank(a) - rank(b) || (a.identity < b.identity ? -1 : a.identity > b.identity ? 1 : 0);
}

export function summarise(nodes: readonly NodeHealth[]): HealthSummary {
  const s = { nodes: nodes.length, healthy: 0, unhealthy: 0, ...Object.fromEntries(ProblemKinds.map((k) => [k, 0])) } as HealthSummary;
  for (const n of nodes) {
    if (n.problems.length === 0) s.healthy++;
    else s.unhealthy++;
    for (const k of new Set(n.problems.map((p) => p.kind))) s[k]++;
  }
  return s;
}

export interface ReportExtras {
  /** The site's services (omitted: none listed, as for a report narrowed by a filter). */
  services?: ServiceInputs;
  /** Stretches the observer could not see (view.ts), the one it is in now included. */
  blind?: readonly Blind[];
  /** Up to when the observer's data is known current, ms epoch. */
  freshAsOf?: number;
  /** Silence is judged up to this moment (default `now`): the last one the observer knows it saw. */
  judgeUntil?: number;
}

/**
 * The stretches whose silence does not count as a node's: those the store may have lost writes in,
 * and everything after the moment silence is judged up to (judgeUntil, and not past the start of a
 * blind stretch still open). A closed stretch the observer alone was blind in counts: what the
 * store kept meanwhile has come in (view.ts).
 */
function unseenOf(blind: readonly Blind[], now: number, judgeUntil: number | undefined): Blind[] {
  const until = Math.min(judgeUntil ?? now, ...blind.filter((b) => b.to === undefined).map((b) => b.from));
  return [...blind.filter((b) => b.lost), ...(until < now ? [{ from: until, to: now, why: "" }] : [])];
}

export function healthReport(inputs: Iterable<HealthInputs>, policy: HealthPolicy, now: number, x: ReportExtras = {}): HealthReport {
  const blind = x.blind ?? [];
  // Silence is judged up to the last moment seen (judgeUntil), and not past the start of a blind
  // stretch still open; stretches when the store may have lost writes never count (view.ts).
  const unseen = unseenOf(blind, now, x.judgeUntil);
  const nodes: NodeHealth[] = [];
  const blindNow = blind.some((b) => b.to === undefined);
  for (const i of inputs) nodes.push(nodeHealth(i, policy, now, unseen, blindNow));
  nodes.sort(healthOrder);
  const services = x.services ? servicesHealth(x.services, policy.unreachableAfterS, now, unseen) : [];
  return { time: iso(now), view: viewState(blind, x.freshAsOf, now), services, service_summary: summariseServices(services), nodes, summary: summarise(nodes) };
}

/** `muster health`'s exit code: 1 when nothing is known (or matched), 2 when any node or service is unhealthy, else 0. */
export function healthExitCode(r: HealthReport): 0 | 1 | 2 {
  if (r.nodes.length === 0 && r.services.length === 0) return 1;
  return r.summary.unhealthy + r.service_summary.unhealthy > 0 ? 2 : 0;
}
