import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import type { AlertEvent } from "../protocol/alert-event.js";
import type { DeliveryState, Silence } from "./alert-book.js";
import { alertsFor, type Alert, type AlertPolicy, type AlertState } from "./alerts.js";
import type { HealthReport } from "./model.js";

// The console telling the admins about nodes' health (docs/fleet.md#alerts): the decisions are
// alerts.ts, the delivery the notify agent's (deduplicated in its KV by key). Sent one at a time,
// in order; one that could not be delivered is tried again 10 s later, then 20, 40 and every minute
// (retryDelay: a notifier just back from a broker's restart answers within seconds). Each decision and how
// its delivery went is recorded in the alerts' history (alert-history.ts); a silenced node's alerts
// are recorded and not sent, and told once its silence ends if the trouble lasts.

/** How long before an alert not delivered `failures` times in a row is tried again: 10 s, doubling to a minute. Pure. */
export function retryDelay(failures: number): number {
  return Math.min(60_000, 10_000 * 2 ** Math.max(0, failures - 1));
}

/** Who delivers an alert (the console's AdminNotifier, src/fleet/admins.ts): resolves once told, rejects saying why not. */
export interface AlertSender {
  send(subject: string, message: string, dedupeKey: string): Promise<{ notifier: string; duplicate: boolean; told: string[] }>;
}

/** What the alerter asks of the rest of the console; each optional. */
export interface AlertHooks {
  /** Who decides (`console:<host>`), in the history. */
  by?: string;
  /** Keeps an event in the alerts' history (rejects when it could not). */
  record?: (e: AlertEvent) => Promise<void>;
  /** The node's silence in force at `now` (from the history). */
  silenced?: (identity: string, now: number) => Silence | undefined;
  /**
   * Why alerts are held now (the console's own view of the fleet is degraded: a reconnect, a
   * failover), or undefined. While held, nothing is decided: the next whole view decides.
   */
  held?: () => string | undefined;
}

export class HealthAlerts {
  private readonly state: AlertState = new Map();
  /** Alerts whose delivery failed: when to try again, and how many failures in a row (the delay). */
  private readonly retry = new Map<string, { at: number; failures: number }>();
  /** Problems held by a silence, by alert: told when the silence ends while they last. */
  private readonly untold = new Map<string, Alert>();
  private queue: Promise<void> = Promise.resolve();
  /** Alerts handed to the notifier, and those it could not deliver (for tests and the log). */
  readonly sent: Alert[] = [];
  failed = 0;
  /** The last delivery tried, for the console's own health (its `alerts` check); undefined before the first. */
  lastDelivery: { at: number; ok: boolean; error?: string; notifier?: string } | undefined;
  /** Reports whose alerts were held because the view was degraded (view.ts), for tests and the log. */
  held = 0;
  /** How the last delivery this console tried went. */
  delivery: DeliveryState | null = null;
  /** Why decisions were held at the last report, if they were. */
  holding: string | undefined;

  constructor(
    private readonly policy: AlertPolicy,
    private readonly notifier: () => AlertSender | undefined,
    private readonly log: Logger,
    private readonly hooks: AlertHooks = {},
  ) {}

  /**
   * A fresh report: what it calls for is sent. A report made while the view is degraded calls for
   * nothing: its silences are not judged, and what changed is decided once the view is back.
   */
  onReport(report: HealthReport): void {
    // held while the view is degraded (its silences are not judged: view.ts) or the console says why
    this.holding = report.view.degraded ? `the health view is degraded: ${report.view.why ?? "it cannot see"}` : this.hooks.held?.();
    if (this.holding) {
      if (this.held++ === 0 || this.held % 60 === 0) this.log.warn({ why: this.holding }, "alerts held");
      return;
    }
    this.held = 0;
    const now = Date.now();
    for (const a of alertsFor(this.state, report, this.policy)) {
      if ((this.retry.get(a.dedupe_key)?.at ?? 0) > now) {
        this.forgetOpen(a); // decided again once its retry is due
        continue;
      }
      this.enqueue(a);
    }
    for (const [key, a] of this.untold) {
      const since = this.state.get(a.identity)?.get(a.kind);
      if (since === undefined || `health#${a.identity}#${a.kind}#${since}` !== key) this.untold.delete(key); // over, or another trouble now
      else if (!this.hooks.silenced?.(a.identity, now)) {
        this.untold.delete(key);
        this.enqueue(a);
      }
    }
  }

  private enqueue(a: Alert): void {
    this.queue = this.queue.then(() => this.deliver(a));
  }

  private forgetOpen(a: Alert): void {
    if (a.event === "problem") this.state.get(a.identity)?.delete(a.kind);
    else this.state.set(a.identity, (this.state.get(a.identity) ?? new Map()).set(a.kind, a.dedupe_key.split("#").at(-1)!));
  }

  private async record(e: AlertEvent): Promise<void> {
    if (!this.hooks.record) return;
    await this.hooks.record(e).catch((err: unknown) => this.log.warn({ err: (err as Error).message, alert: e.alert, type: e.type }, "could not keep the alert in its history"));
  }

  private async deliver(a: Alert): Promise<void> {
    const type = a.event === "problem" ? "fired" : "resolved";
    const base = { time: Date.now(), by: this.hooks.by ?? "console", identity: a.identity, kind: a.kind, alert: a.alert, subject: a.subject, message: a.message };
    const silence = this.hooks.silenced?.(a.identity, Date.now());
    if (silence) {
      if (a.event === "problem") this.untold.set(a.alert, a);
      else this.untold.delete(a.alert);
      this.log.info({ alert: { identity: a.identity, kind: a.kind, event: a.event }, silence }, "silenced: the admins were not told");
      return this.record({ ...base, type, told: [], held: `${a.identity} is silenced until ${silence.until} by ${silence.by}${silence.note ? ` (${silence.note})` : ""}` });
    }
    const n = this.notifier();
    try {
      if (!n) throw new Error("not connected to the broker");
      const r = await n.send(a.subject, a.message, a.dedupe_key);
      this.sent.push(a);
      this.lastDelivery = { at: Date.now(), ok: true, notifier: r.notifier };
      this.retry.delete(a.dedupe_key);
      this.delivery = { ok: true, at: new Date().toISOString(), notifier: r.notifier, told: r.told, error: null, failing_since: null, subject: a.subject };
      this.log.info({ alert: { identity: a.identity, kind: a.kind, event: a.event }, notifier: r.notifier, duplicate: r.duplicate, told: r.told }, "admins told");
      // a duplicate was told (and recorded) by another console, or by this one before a restart
      if (!r.duplicate) await this.record({ ...base, type, told: r.told, notifier: r.notifier });
    } catch (e) {
      const error = (e as Error).message;
      this.failed++;
      this.lastDelivery = { at: Date.now(), ok: false, error: (e as Error).message };
      const failures = (this.retry.get(a.dedupe_key)?.failures ?? 0) + 1;
      const delay = retryDelay(failures);
      this.retry.set(a.dedupe_key, { at: Date.now() + delay, failures });
      this.forgetOpen(a);
      this.delivery = { ok: false, at: new Date().toISOString(), notifier: null, told: [], error, failing_since: this.delivery && !this.delivery.ok ? this.delivery.failing_since : new Date().toISOString(), subject: a.subject };
      this.log.warn({ alert: { identity: a.identity, kind: a.kind, event: a.event }, err: error, retry_in_ms: delay }, `could not tell the admins; trying again in ${delay / 1000} s`);
      await this.record({ ...base, type: "delivery_failed", of: type, error });
    }
  }

  /** A test alert from an operator, through the same notifier, recorded as the others are. */
  async test(by: string, note?: string): Promise<{ notifier: string; told: string[] }> {
    const r = await sendTestAlert(this.notifier(), (e) => this.record(e), by, note);
    this.delivery = r.delivery;
    if (r.error) throw r.error;
    return { notifier: r.delivery.notifier!, told: r.delivery.told };
  }
}

/**
 * A test alert (`muster alerts test`, the console's Alerts page): sent through `sender` under a key
 * of its own (so never deduplicated), recorded as `test` with who was told, or as a failed delivery.
 */
export async function sendTestAlert(sender: AlertSender | undefined, record: (e: AlertEvent) => Promise<void>, by: string, note?: string): Promise<{ delivery: DeliveryState; error?: Error }> {
  const subject = `muster: test alert from ${by}`;
  const message = `A test of the admins' alerts, sent by ${by}${note ? `: ${note}` : ""}. Nothing is wrong.\n`;
  const base = { time: Date.now(), by, kind: "test", subject, message, ...(note ? { note } : {}) };
  let r: Awaited<ReturnType<AlertSender["send"]>>;
  try {
    if (!sender) throw new Error("not connected to the broker");
    r = await sender.send(subject, message, `test#${randomUUID()}`);
  } catch (e) {
    const error = e as Error;
    await record({ ...base, type: "delivery_failed", of: "test", error: error.message });
    return { delivery: { ok: false, at: new Date().toISOString(), notifier: null, told: [], error: error.message, failing_since: new Date().toISOString(), subject }, error };
  }
  await record({ ...base, type: "test", told: r.told, notifier: r.notifier });
  return { delivery: { ok: true, at: new Date().toISOString(), notifier: r.notifier, told: r.told, error: null, failing_since: null, subject } };
}
