import { bucketKey, DEFAULT_SERVICES_BUCKET, kvSubject } from "./buckets.js";
import { isValidIdentity } from "./subjects.js";

// The site's own services in health (docs/fleet.md#the-sites-services): each one says, every few
// seconds, that it is alive and how it is, check by check, as nodes do with their heartbeats. Two
// ways in, one record:
// - a daemon that is no node (a provisioner, the registry, the console) writes a ServiceBeat to
//   its own key `<role>.<name>` of the services bucket (DEFAULT_SERVICES_BUCKET). A broker cannot
//   write one (nats-server runs no muster), so the console writes what it sees of each member,
//   saying so (`observer`);
// - a node whose agent makes it a service (the puppetca agent: a master; notify: the notifier)
//   carries a ServiceStatus per service on its own heartbeat (protocol/heartbeat.ts `services`).
// Pure: the records, their keys and the parser, which is the gate for what readers take from a
// bucket admins can write: every field is checked, and a value stored under another's key is refused.

export const ServiceRoles = ["broker", "master", "provisioner", "registry", "console", "notifier"] as const;
export type ServiceRole = (typeof ServiceRoles)[number];

export const CheckStatuses = ["ok", "warn", "fail"] as const;
/** ok; warn: works, but look (a CA certificate expiring within a month); fail: does not work. */
export type CheckStatus = (typeof CheckStatuses)[number];

export interface ServiceCheck {
  /** What is checked, short: "puppetserver", "ca", "routes", "stream KV_muster_alive". */
  name: string;
  status: CheckStatus;
  /** Why, in a line an operator acts on: said when ok too ("answers: running", "3 copies current"). */
  why: string;
}

/** How a service is, as a node's heartbeat carries it for the agent that makes the node that service. */
export interface ServiceStatus {
  role: ServiceRole;
  checks: ServiceCheck[];
  /** What the service is doing, for the page and --json (a provisioner's claims, a notifier's last delivery). */
  details: Record<string, unknown>;
}

export interface ServiceBeat extends ServiceStatus {
  /** The service's name: its host's identity, a provisioner's id, a broker's server_name. */
  name: string;
  /** Its clock when written, ms epoch (informational: readers use the broker's). */
  time: number;
  /** Seconds until the next one. */
  interval: number;
  version: string;
  /** up, or its last beat before a clean stop. */
  state: "up" | "stopping";
  /** Set when another wrote it (a broker, by the console watching it): who, and whether the service answered them. */
  observer?: { name: string; answers: boolean };
  /**
   * A console's: the recent stretches during which the store refused its probes while it was
   * connected (heartbeats sent then may be lost), so that readers who read once (`muster health`)
   * do not count them as anyone's silence either.
   */
  lost?: LostStretch[];
}

/** A stretch (ms epoch, the observer's clock) the store took no writes in; `to` absent: it still takes none. */
export interface LostStretch {
  from: number;
  to?: number;
  why: string;
}

export const MAX_LOST_STRETCHES = 16;

export const MAX_SERVICE_BEAT_BYTES = 64 * 1024;
const MAX_CHECKS = 64;

/** The key a service's beat is stored under: its role, then its name. */
export function serviceKey(role: ServiceRole, name: string): string {
  return `${role}.${bucketKey(name)}`;
}

/** Where a service writes its beat (what its broker user may publish to). */
export function serviceSubject(role: ServiceRole, name: string, bucket = DEFAULT_SERVICES_BUCKET): string {
  return kvSubject(bucket, serviceKey(role, name));
}

/** Every key of a role: what a role's credential is allowed (`$KV.muster_services.provisioner.>`). */
export function serviceRoleSubjects(role: ServiceRole, bucket = DEFAULT_SERVICES_BUCKET): string {
  return `${kvSubject(bucket, role)}.>`;
}

const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: true });

export function encodeServiceBeat(b: ServiceBeat): Uint8Array {
  return enc.encode(JSON.stringify(b));
}

const isObject = (x: unknown): x is Record<string, unknown> => typeof x === "object" && x !== null && !Array.isArray(x);
const text = (v: unknown, max: number): v is string => typeof v === "string" && v.length > 0 && v.length <= max;

/** A status's role, checks and details, checked; a reason when they are not what they must be. */
export function parseServiceStatus(v: unknown): { ok: true; status: ServiceStatus } | { ok: false; reason: string } {
  if (!isObject(v)) return { ok: false, reason: "a service status must be an object" };
  if (!(ServiceRoles as readonly unknown[]).includes(v.role)) return { ok: false, reason: `role must be one of ${ServiceRoles.join(", ")}` };
  if (!Array.isArray(v.checks) || v.checks.length > MAX_CHECKS) return { ok: false, reason: `checks must be a list of at most ${MAX_CHECKS}` };
  const checks: ServiceCheck[] = [];
  for (const c of v.checks) {
    if (!isObject(c) || !text(c.name, 120) || !(CheckStatuses as readonly unknown[]).includes(c.status) || typeof c.why !== "string" || c.why.length > 2000) return { ok: false, reason: "each check must be {name, status: ok|warn|fail, why}" };
    checks.push({ name: c.name, status: c.status as CheckStatus, why: c.why });
  }
  const details = v.details === undefined ? {} : v.details;
  if (!isObject(details)) return { ok: false, reason: "details must be an object" };
  return { ok: true, status: { role: v.role as ServiceRole, checks, details } };
}

export type ServiceBeatParse = { ok: true; beat: ServiceBeat } | { ok: false; reason: string };

/** One stored service beat, checked; with `key`, it must be stored under its own role and name. */
export function parseServiceBeat(data: Uint8Array, key?: string): ServiceBeatParse {
  const refuse = (reason: string): ServiceBeatParse => ({ ok: false, reason });
  if (data.length > MAX_SERVICE_BEAT_BYTES) return refuse(`too large: ${data.length} bytes, at most ${MAX_SERVICE_BEAT_BYTES}`);
  let v: unknown;
  try {
    v = JSON.parse(dec.decode(data));
  } catch (e) {
    return refuse(`not UTF-8 JSON: ${(e as Error).message.slice(0, 120)}`);
  }
  if (!isObject(v)) return refuse("not a JSON object");
  if (typeof v.name !== "string" || !isValidIdentity(v.name)) return refuse("name must be a valid identity");
  const st = parseServiceStatus(v);
  if (!st.ok) return st;
  if (key !== undefined && serviceKey(st.status.role, v.name) !== key) return refuse(`stored under ${key}, names ${st.status.role} ${v.name}`);
  if (typeof v.time !== "number" || !Number.isFinite(v.time)) return refuse("time must be a number of ms");
  if (typeof v.interval !== "number" || !Number.isFinite(v.interval) || v.interval <= 0 || v.interval > 86_400) return refuse("interval must be seconds, more than 0 and at most a day");
  if (typeof v.version !== "string" || v.version.length > 64) return refuse("version must be a string of at most 64 characters");
  if (v.state !== "up" && v.state !== "stopping") return refuse("state must be up or stopping");
  let observer: ServiceBeat["observer"];
  if (v.observer !== undefined) {
    const o = v.observer;
    if (!isObject(o) || typeof o.name !== "string" || !isValidIdentity(o.name) || typeof o.answers !== "boolean") return refuse("observer must be {name, answers}");
    observer = { name: o.name, answers: o.answers };
  }
  let lost: LostStretch[] | undefined;
  if (v.lost !== undefined) {
    if (!Array.isArray(v.lost) || v.lost.length > MAX_LOST_STRETCHES) return refuse(`lost must be a list of at most ${MAX_LOST_STRETCHES} stretches`);
    lost = [];
    const num = (x: unknown): x is number => typeof x === "number" && Number.isFinite(x) && x > 0;
    for (const l of v.lost) {
      if (!isObject(l) || !num(l.from) || (l.to !== undefined && (!num(l.to) || l.to < l.from)) || typeof l.why !== "string" || l.why.length > 2000) return refuse("each lost stretch must be {from, to?, why}: ms, to not before from");
      lost.push({ from: l.from, ...(l.to !== undefined ? { to: l.to as number } : {}), why: l.why });
    }
  }
  return { ok: true, beat: { name: v.name, ...st.status, time: v.time, interval: v.interval, version: v.version, state: v.state, ...(observer ? { observer } : {}), ...(lost?.length ? { lost } : {}) } };
}
