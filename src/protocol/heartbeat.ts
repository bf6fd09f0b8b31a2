import { bucketKey, DEFAULT_ALIVE_BUCKET, kvSubject } from "./buckets.js";
import { parseNodeValue } from "./node-value.js";
import { parseServiceStatus, type ServiceStatus } from "./service.js";

// Heartbeats: every `interval` seconds (default 10) a node writes its heartbeat to its own key of
// the alive bucket (DEFAULT_ALIVE_BUCKET), with a plain publish on the key's subject, and once
// more when it stops (state "stopping"). The bucket keeps the latest per node, stamped with the
// broker's clock: fleet health (src/health/model.ts) says a node is unreachable when its latest
// heartbeat is older than a threshold, from what nodes send anyway, without asking any node.
//
// A heartbeat also carries the values of the node's own data plugins named in its config (by
// default `puppet`: enabled, the last run and its status), so Puppet's health needs no request
// either. Broker permissions let a node write its own key only (src/broker/auth.ts), so a
// heartbeat is not signed: the key it is stored under is who sent it. The parser below is the
// gate for what readers take from the bucket (writable by admins): every field is checked.

export const DEFAULT_HEARTBEAT_INTERVAL_S = 10;
/** The largest heartbeat accepted (data plugin values included). */
export const MAX_HEARTBEAT_BYTES = 64 * 1024;

export const HeartbeatPhases = ["waiting", "serving"] as const;
/** waiting: in the provisioning collective, not provisioned yet; serving: in the fleet. */
export type HeartbeatPhase = (typeof HeartbeatPhases)[number];

export interface Heartbeat {
  identity: string;
  /** The node's clock when it sent it, ms epoch (informational: readers use the broker's). */
  time: number;
  /** Seconds until the next one. */
  interval: number;
  version: string;
  phase: HeartbeatPhase;
  /** "stopping": the node's last heartbeat before a clean shutdown. */
  state: "up" | "stopping";
  /** Data plugin values by plugin name (e.g. `puppet`). */
  status: Record<string, Record<string, unknown>>;
  /**
   * The site services this node is (protocol/service.ts), each with its checks: a master (the
   * puppetca agent), the notifier (notify). Absent on an ordinary node.
   */
  services?: ServiceStatus[];
}

/** Where a node writes its heartbeat. */
export function heartbeatSubject(identity: string, bucket = DEFAULT_ALIVE_BUCKET): string {
  return kvSubject(bucket, bucketKey(identity));
}

const enc = new TextEncoder();

export function encodeHeartbeat(h: Heartbeat): Uint8Array {
  return enc.encode(JSON.stringify(h));
}

export type HeartbeatParse = { ok: true; heartbeat: Heartbeat } | { ok: false; reason: string };

const isObject = (x: unknown): x is Record<string, unknown> => typeof x === "object" && x !== null && !Array.isArray(x);

/** One stored heartbeat, checked; with `key`, it must be stored under its own identity's key. */
export function parseHeartbeat(data: Uint8Array, key?: string): HeartbeatParse {
  const refuse = (reason: string): HeartbeatParse => ({ ok: false, reason });
  const p = parseNodeValue(data, MAX_HEARTBEAT_BYTES, key);
  if (!p.ok) return p;
  const v = p.value;
  if (typeof v.time !== "number" || !Number.isFinite(v.time)) return refuse("time must be a number of ms");
  if (typeof v.interval !== "number" || !Number.isFinite(v.interval) || v.interval <= 0 || v.interval > 86_400) return refuse("interval must be seconds, more than 0 and at most a day");
  if (typeof v.version !== "string" || v.version.length > 64) return refuse("version must be a string of at most 64 characters");
  if (!(HeartbeatPhases as readonly unknown[]).includes(v.phase)) return refuse(`phase must be ${HeartbeatPhases.join(" or ")}`);
  if (v.state !== "up" && v.state !== "stopping") return refuse("state must be up or stopping");
  if (!isObject(v.status) || !Object.values(v.status).every(isObject)) return refuse("status must map data plugin names to objects");
  const services: ServiceStatus[] = [];
  if (v.services !== undefined) {
    if (!Array.isArray(v.services) || v.services.length > 8) return refuse("services must be a list of at most 8");
    for (const x of v.services) {
      const p = parseServiceStatus(x);
      if (!p.ok) return refuse(`services: ${p.reason}`);
      services.push(p.status);
    }
  }
  return { ok: true, heartbeat: { identity: v.identity, time: v.time, interval: v.interval, version: v.version, phase: v.phase as HeartbeatPhase, state: v.state, status: v.status as Heartbeat["status"], ...(services.length ? { services } : {}) } };
}
