import type { ServiceCheck, ServiceRole } from "../protocol/service.js";
import { ServiceRoles } from "../protocol/service.js";
import type { Beat, ServiceSeen } from "./stores.js";
import { silentSeconds, span, type Blind } from "./view.js";

// The site's own services in health (docs/fleet.md#the-sites-services), beside the nodes: each
// broker member, master, provisioner, the registry, the console and the notifier, with its role,
// whether it answers (alive by what it sends: its own beat, or its node's heartbeat; a broker by
// what the console watching it wrote) and every check with why. Pure: the beats and the clock
// in, the entries with their problems out, in role order (brokers first, as the site is built).

export const ServiceProblemKinds = ["down", "unobserved", "failing"] as const;
/** down: it does not answer; unobserved: whoever watches it has not said for too long; failing: a check fails. */
export type ServiceProblemKind = (typeof ServiceProblemKinds)[number];

export interface ServiceProblem {
  kind: ServiceProblemKind;
  why: string;
  since?: string;
}

export interface ServiceHealth {
  name: string;
  role: ServiceRole;
  /** It answers: its heartbeat is current (for a broker: the console watching it got an answer). */
  up: boolean;
  /** When its last beat (or its node's heartbeat, or its observer's report) arrived (ISO, the broker's clock). */
  last_seen: string | null;
  seen_s_ago: number | null;
  /** Who reports on it when it cannot itself (a broker: the console); null when it speaks for itself. */
  observer: string | null;
  version: string | null;
  checks: ServiceCheck[];
  details: Record<string, unknown>;
  /** Empty when healthy. */
  problems: ServiceProblem[];
}

export type ServiceSummary = { services: number; healthy: number; unhealthy: number } & Record<ServiceProblemKind, number>;

export interface ServiceInputs {
  /** The services bucket's beats. */
  beats: Iterable<ServiceSeen>;
  /** Nodes' heartbeats: a master's and the notifier's carry their service's status. */
  nodes: Iterable<{ identity: string; beat?: Beat }>;
}

const iso = (ms: number) => new Date(ms).toISOString();
const ago = (ms: number, now: number) => Math.max(0, Math.round((now - ms) / 1000));

/** The checks that fail, as one line. */
const failing = (checks: readonly ServiceCheck[]) =>
  checks
    .filter((c) => c.status === "fail")
    .map((c) => `${c.name}: ${c.why}`)
    .join("; ");

interface Seen {
  name: string;
  role: ServiceRole;
  at: number;
  interval: number;
  stopping: boolean;
  version: string;
  observer?: { name: string; answers: boolean };
  checks: ServiceCheck[];
  details: Record<string, unknown>;
}

function entry(s: Seen, unreachableAfterS: number, now: number, blind: readonly Blind[]): ServiceHealth {
  const limit = Math.max(unreachableAfterS, 2.5 * s.interval);
  const silent = silentSeconds(s.at, now, blind, limit);
  const problems: ServiceProblem[] = [];
  let up = true;
  if (s.observer) {
    if (silent > limit) {
      up = false;
      problems.push({ kind: "unobserved", why: `not observed for ${span(ago(s.at, now))}: ${s.observer.name}, which watches it, has not reported (is it running?)`, since: iso(s.at) });
    } else if (!s.observer.answers) {
      up = false;
      problems.push({ kind: "down", why: `does not answer ${s.observer.name}: ${failing(s.checks) || "no answer"}` });
    }
  } else if (s.stopping) {
    up = false;
    problems.push({ kind: "down", why: `stopped ${span(ago(s.at, now))} ago (its last heartbeat said it was stopping)`, since: iso(s.at) });
  } else if (silent > limit) {
    up = false;
    problems.push({ kind: "down", why: `no heartbeat for ${span(ago(s.at, now))} (one is due every ${span(s.interval)}; down after ${span(limit)})`, since: iso(s.at) });
  }
  // a service that does not answer: its last checks are history, not a second problem
  if (up && s.checks.some((c) => c.status === "fail")) problems.push({ kind: "failing", why: failing(s.checks) });
  return { name: s.name, role: s.role, up, last_seen: iso(s.at), seen_s_ago: ago(s.at, now), observer: s.observer?.name ?? null, version: s.version || null, checks: s.checks, details: s.details, problems };
}

/** Role order (brokers first), then name. */
export function serviceOrder(a: ServiceHealth, b: ServiceHealth): number {
  return ServiceRoles.indexOf(a.role) - ServiceRoles.indexOf(b.role) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
}

/** Every service's health at `now`; a service both beats and a node's heartbeat name is taken from its own beat. */
export function servicesHealth(inputs: ServiceInputs, unreachableAfterS: number, now: number, blind: readonly Blind[] = []): ServiceHealth[] {
  const seen = new Map<string, Seen>();
  for (const n of inputs.nodes) {
    const hb = n.beat?.heartbeat;
    for (const s of hb?.services ?? []) {
      seen.set(`${s.role}\u0000${n.identity}`, { name: n.identity, role: s.role, at: n.beat!.at, interval: hb!.interval, stopping: hb!.state === "stopping", version: hb!.version, checks: s.checks, details: s.details });
    }
  }
  for (const { beat: b, at } of inputs.beats) {
    seen.set(`${b.role}\u0000${b.name}`, { name: b.name, role: b.role, at, interval: b.interval, stopping: b.state === "stopping", version: b.version, ...(b.observer ? { observer: b.observer } : {}), checks: b.checks, details: b.details });
  }
  return [...seen.values()].map((s) => entry(s, unreachableAfterS, now, blind)).sort(serviceOrder);
}

export function summariseServices(list: readonly ServiceHealth[]): ServiceSummary {
  const s = { services: list.length, healthy: 0, unhealthy: 0, ...Object.fromEntries(ServiceProblemKinds.map((k) => [k, 0])) } as ServiceSummary;
  for (const x of list) {
    if (x.problems.length) s.unhealthy++;
    else s.healthy++;
    for (const k of new Set(x.problems.map((p) => p.kind))) s[k]++;
  }
  return s;
}
