import type { ServiceStatus } from "../../protocol/service.js";
import type { DeliveryResult } from "./actions/send.js";

// The notifier as one of the site's services (docs/fleet.md#the-sites-services): for a notifier,
// "answers" means its last delivery worked. Every delivery the agent makes is recorded here
// (`record`), and the node's heartbeat carries the verdict (`status`), so a webhook that refuses
// or an SMTP server that is down shows in `muster health` and on the console, not only in a log.

export interface DeliveryOutcome {
  /** When it ended, ms epoch. */
  at: number;
  subject: string;
  results: DeliveryResult[];
}

export class DeliveryHealth {
  private last: DeliveryOutcome | undefined;
  private lastFailure: DeliveryOutcome | undefined;
  private counts = { delivered: 0, failed: 0 };

  /** One send's outcome (every recipient's result). */
  record(o: DeliveryOutcome): void {
    this.last = o;
    const failed = o.results.filter((r) => !r.ok).length;
    this.counts.failed += failed;
    this.counts.delivered += o.results.length - failed;
    if (failed > 0) this.lastFailure = o;
  }

  status(now = Date.now()): ServiceStatus {
    const l = this.last;
    const iso = (ms: number) => new Date(ms).toISOString();
    const ago = (ms: number) => `${Math.max(0, Math.round((now - ms) / 1000))} s ago`;
    const failed = l?.results.filter((r) => !r.ok) ?? [];
    const check = !l
      ? { name: "delivery", status: "ok" as const, why: "nothing delivered yet since it started" }
      : failed.length
        ? { name: "delivery", status: "fail" as const, why: `the last delivery (${ago(l.at)}) failed for ${failed.map((r) => `${r.recipient}: ${r.error ?? "failed"}`).join("; ").slice(0, 600)}` }
        : { name: "delivery", status: "ok" as const, why: `the last delivery (${ago(l.at)}) reached ${l.results.length} recipient${l.results.length === 1 ? "" : "s"}` };
    return {
      role: "notifier",
      checks: [check],
      details: {
        last_delivery: l ? { at: iso(l.at), subject: l.subject.slice(0, 200), ok: failed.length === 0, results: l.results } : null,
        last_failure: this.lastFailure ? { at: iso(this.lastFailure.at), subject: this.lastFailure.subject.slice(0, 200) } : null,
        delivered: this.counts.delivered,
        failed: this.counts.failed,
      },
    };
  }
}
