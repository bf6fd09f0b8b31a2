import { isValidIdentity } from "./subjects.js";

// The alerts' history (docs/fleet.md#alerts): one event per thing that happened to an alert, kept
// in the JetStream stream `MUSTER_ALERTS` (`muster.alerts.<type>`). The console writes what its
// alerter decided and how each delivery went; the console and the CLI write what operators do
// (acknowledge, silence, a test alert). Everyone reads the same events back and folds them the same
// way (src/health/alert-book.ts). Pure: the record and its codec.

export const AlertEventTypes = ["fired", "resolved", "delivery_failed", "acknowledged", "silenced", "unsilenced", "test"] as const;
export type AlertEventType = (typeof AlertEventTypes)[number];

export interface AlertEvent {
  /** Unique per event (its message id in the stream): an event read twice is applied once. */
  id?: string;
  type: AlertEventType;
  /** ms epoch. */
  time: number;
  /** Who: the console (`console:<host>`) for what its alerter did, `web:<name>` for a console user, the caller's name for the CLI. */
  by: string;
  /** The node the alert is about (absent for a test alert). */
  identity?: string;
  /** unreachable, puppet_failing, service_down or store_copy_stuck (identity is then `<role>/<name>`); "test" for a test alert. */
  kind?: string;
  /** The alert: `health#<node>#<kind>#<when its trouble began>`, the same on every console (a resolution names the alert it ends). */
  alert?: string;
  subject?: string;
  message?: string;
  /** fired, resolved, test: the recipients that accepted it (empty: nobody was told, see `held`). */
  told?: string[];
  /** The notifier that delivered it, or tried to. */
  notifier?: string;
  /** Why nobody was told although it fired or resolved (a silence). */
  held?: string;
  /** delivery_failed: why; `of` says what could not be delivered. */
  error?: string;
  of?: "fired" | "resolved" | "test";
  /** silenced: until when (ms epoch). */
  until?: number;
  /** acknowledged, silenced: the operator's words. */
  note?: string;
}

export const MAX_ALERT_EVENT_BYTES = 64 * 1024;
/** How long a node may be silenced at most: the history keeps its events 90 days. */
export const MAX_SILENCE_MS = 30 * 86_400_000;

export function alertEventSubject(type: AlertEventType): string {
  return `muster.alerts.${type}`;
}

const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: true });

export function encodeAlertEvent(e: AlertEvent): Uint8Array {
  return enc.encode(JSON.stringify(e));
}

export type AlertEventParse = { ok: true; event: AlertEvent } | { ok: false; reason: string };

const text = (v: unknown, max: number) => typeof v === "string" && v.length <= max;

/** One stored event, checked (the stream is writable by every admin): anything malformed is refused whole. */
export function parseAlertEvent(data: Uint8Array | string): AlertEventParse {
  const refuse = (reason: string): AlertEventParse => ({ ok: false, reason });
  const size = typeof data === "string" ? enc.encode(data).length : data.length;
  if (size > MAX_ALERT_EVENT_BYTES) return refuse(`too large: ${size} bytes, at most ${MAX_ALERT_EVENT_BYTES}`);
  let v: unknown;
  try {
    v = JSON.parse(typeof data === "string" ? data : dec.decode(data));
  } catch (e) {
    return refuse(`not UTF-8 JSON: ${(e as Error).message.slice(0, 120)}`);
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) return refuse("not a JSON object");
  const o = v as Record<string, unknown>;
  if (!(AlertEventTypes as readonly unknown[]).includes(o.type)) return refuse(`type must be one of ${AlertEventTypes.join(", ")}`);
  if (typeof o.time !== "number" || !Number.isFinite(o.time) || o.time <= 0) return refuse("time must be ms since the epoch");
  if (!text(o.by, 300) || !o.by) return refuse("by must name who");
  if (o.identity !== undefined && (typeof o.identity !== "string" || !isValidIdentity(o.identity))) return refuse("identity must be a valid identity");
  if (o.id !== undefined && !text(o.id, 100)) return refuse("id must be text of at most 100 characters");
  for (const k of ["kind", "alert", "notifier", "held", "error", "note", "subject"] as const) if (o[k] !== undefined && !text(o[k], 2000)) return refuse(`${k} must be text of at most 2000 characters`);
  if (o.message !== undefined && !text(o.message, 32_768)) return refuse("message must be text");
  if (o.told !== undefined && (!Array.isArray(o.told) || o.told.length > 100 || !o.told.every((t) => text(t, 2000)))) return refuse("told must be a list of recipients");
  if (o.of !== undefined && !["fired", "resolved", "test"].includes(o.of as string)) return refuse("of must be fired, resolved or test");
  if (o.until !== undefined && (typeof o.until !== "number" || !Number.isFinite(o.until))) return refuse("until must be ms since the epoch");
  const type = o.type as AlertEventType;
  if ((type === "silenced" || type === "unsilenced") && o.identity === undefined) return refuse(`a ${type} event names its node`);
  if (type === "silenced" && o.until === undefined) return refuse("a silenced event says until when");
  if (type === "acknowledged" && o.alert === undefined) return refuse("an acknowledged event names its alert");
  const event: AlertEvent = { ...(o.id !== undefined ? { id: o.id as string } : {}), type, time: o.time, by: o.by as string };
  for (const k of ["identity", "kind", "alert", "subject", "message", "notifier", "held", "error", "note"] as const) if (o[k] !== undefined) event[k] = o[k] as string;
  if (o.told !== undefined) event.told = o.told as string[];
  if (o.of !== undefined) event.of = o.of as AlertEvent["of"];
  if (o.until !== undefined) event.until = o.until as number;
  return { ok: true, event };
}
