import type { Logger } from "pino";
import { alertsFor, type Alert, type AlertPolicy, type AlertState } from "./alerts.js";
import type { HealthReport } from "./model.js";

// The console telling the admins about nodes' health (docs/fleet.md#alerts): the decisions are
// alerts.ts, the delivery the notify agent's (deduplicated in its KV by key). Sent one at a time,
// in order; one that could not be delivered is tried again a minute later.

const RETRY_MS = 60_000;

/** Who delivers an alert (the console's AdminNotifier, src/fleet/admins.ts): resolves once told, rejects saying why not. */
export interface AlertSender {
  send(subject: string, message: string, dedupeKey: string): Promise<{ notifier: string; duplicate: boolean }>;
}

export class HealthAlerts {
  private readonly state: AlertState = new Map();
  private readonly retryAt = new Map<string, number>();
  private queue: Promise<void> = Promise.resolve();
  /** Alerts handed to the notifier, and those it could not deliver (for tests and the log). */
  readonly sent: Alert[] = [];
  failed = 0;
  /** The last delivery tried, for the console's own health (its `alerts` check); undefined before the first. */
  lastDelivery: { at: number; ok: boolean; error?: string; notifier?: string } | undefined;
  /** Reports whose alerts were held because the view was degraded (view.ts), for tests and the log. */
  held = 0;

  constructor(
    private readonly policy: AlertPolicy,
    private readonly notifier: () => AlertSender | undefined,
    private readonly log: Logger,
  ) {}

  /**
   * A fresh report: what it calls for is sent. A report made while the view is degraded calls for
   * nothing: its silences are not judged, and what changed is decided once the view is back.
   */
  onReport(report: HealthReport): void {
    if (report.view.degraded) {
      if (this.held++ === 0 || this.held % 60 === 0) this.log.warn({ why: report.view.why }, "alerts held: the health view is degraded");
      return;
    }
    this.held = 0;
    const now = Date.now();
    for (const a of alertsFor(this.state, report, this.policy)) {
      if ((this.retryAt.get(a.dedupe_key) ?? 0) > now) {
        this.forgetOpen(a); // decided again once its retry is due
        continue;
      }
      this.queue = this.queue.then(() => this.deliver(a));
    }
  }

  private forgetOpen(a: Alert): void {
    if (a.event === "problem") this.state.get(a.identity)?.delete(a.kind);
    else this.state.set(a.identity, (this.state.get(a.identity) ?? new Map()).set(a.kind, a.dedupe_key.split("#").at(-1)!));
  }

  private async deliver(a: Alert): Promise<void> {
    const n = this.notifier();
    try {
      if (!n) throw new Error("not connected to the broker");
      const r = await n.send(a.subject, a.message, a.dedupe_key);
      this.sent.push(a);
      this.lastDelivery = { at: Date.now(), ok: true, notifier: r.notifier };
      this.retryAt.delete(a.dedupe_key);
      this.log.info({ alert: { identity: a.identity, kind: a.kind, event: a.event }, notifier: r.notifier, duplicate: r.duplicate }, "admins told");
    } catch (e) {
      this.failed++;
      this.lastDelivery = { at: Date.now(), ok: false, error: (e as Error).message };
      this.retryAt.set(a.dedupe_key, Date.now() + RETRY_MS);
      this.forgetOpen(a);
      this.log.warn({ alert: { identity: a.identity, kind: a.kind, event: a.event }, err: (e as Error).message }, "could not tell the admins; trying again in a minute");
    }
  }
}
