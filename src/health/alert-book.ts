import { MAX_SILENCE_MS, type AlertEvent } from "../protocol/alert-event.js";

// The alerts as everyone reads them (docs/fleet.md#alerts): the events of the history stream
// (protocol/alert-event.ts) folded, in the order the stream keeps them, into what is open (fired and
// not resolved, with who was told or why nobody was, and who acknowledged it), which nodes are
// silenced until when, how the last delivery went, and the history itself. The console folds them
// as they arrive, `muster alerts` once; both show the same. Pure.

export interface Acknowledgement {
  by: string;
  /** ISO. */
  at: string;
  note?: string;
}

export interface OpenAlert {
  alert: string;
  identity: string;
  kind: string;
  subject: string;
  /** When it fired (ISO). */
  fired: string;
  /** told: someone accepted it; held: nobody was told on purpose (a silence); failing: delivery has not worked yet. */
  delivery: "told" | "held" | "failing";
  told: string[];
  notifier: string | null;
  /** held: why; failing: the last error. */
  why: string | null;
  acknowledged: Acknowledgement | null;
}

export interface Silence {
  identity: string;
  /** ISO. */
  until: string;
  by: string;
  /** When it was set (ISO). */
  at: string;
  note?: string;
}

/** How telling the admins last went: what the notifier's health is (a service whose last delivery worked answers). */
export interface DeliveryState {
  ok: boolean;
  /** When (ISO). */
  at: string;
  /** The notifier that delivered or was tried; null when none answered. */
  notifier: string | null;
  /** ok: who was told; failed: nobody. */
  told: string[];
  /** failed: why. */
  error: string | null;
  /** failed: since when deliveries fail (ISO), the first failure after the last success. */
  failing_since: string | null;
  /** What it was about (`muster: node05.lab unreachable`). */
  subject: string | null;
}

export interface AlertBookView {
  open: OpenAlert[];
  silences: Silence[];
  last_delivery: DeliveryState | null;
  /** Newest first. */
  history: AlertEvent[];
}

const iso = (ms: number) => new Date(ms).toISOString();
/** Events the book keeps for its history view (the stream keeps every one for 90 days). */
const KEPT = 2000;

export class AlertBook {
  private readonly open = new Map<string, OpenAlert>();
  private readonly silences = new Map<string, Silence & { untilMs: number }>();
  private last: DeliveryState | null = null;
  private readonly events: AlertEvent[] = [];
  /** Ids of the events applied (as many as are kept): one read twice (kept here at once, then followed) counts once. */
  private readonly seen = new Set<string>();

  constructor(events: Iterable<AlertEvent> = []) {
    for (const e of events) this.apply(e);
  }

  apply(e: AlertEvent): void {
    if (e.id !== undefined) {
      if (this.seen.has(e.id)) return;
      this.seen.add(e.id);
    }
    this.events.push(e);
    if (this.events.length > KEPT) for (const gone of this.events.splice(0, this.events.length - KEPT)) if (gone.id !== undefined) this.seen.delete(gone.id);
    const key = e.alert;
    switch (e.type) {
      case "fired": {
        if (!key || !e.identity) break;
        const was = this.open.get(key);
        const told = e.told ?? [];
        this.open.set(key, {
          alert: key,
          identity: e.identity,
          kind: e.kind ?? "",
          subject: e.subject ?? was?.subject ?? "",
          fired: was?.fired ?? iso(e.time),
          delivery: told.length ? "told" : e.held ? "held" : "failing",
          told,
          notifier: e.notifier ?? null,
          why: e.held ?? null,
          acknowledged: was?.acknowledged ?? null,
        });
        break;
      }
      case "delivery_failed": {
        if (e.of === "fired" && key && e.identity) {
          const was = this.open.get(key);
          if (!was) this.open.set(key, { alert: key, identity: e.identity, kind: e.kind ?? "", subject: e.subject ?? "", fired: iso(e.time), delivery: "failing", told: [], notifier: e.notifier ?? null, why: e.error ?? null, acknowledged: null });
          else if (was.delivery !== "told") Object.assign(was, { delivery: "failing", why: e.error ?? null });
        }
        // a resolution that could not be told still ends the alert: the trouble is over
        if (e.of === "resolved" && key) this.open.delete(key);
        break;
      }
      case "resolved":
        if (key) this.open.delete(key);
        break;
      case "acknowledged": {
        const a = key ? this.open.get(key) : undefined;
        if (a) a.acknowledged = { by: e.by, at: iso(e.time), ...(e.note ? { note: e.note } : {}) };
        break;
      }
      case "silenced":
        if (e.identity && e.until !== undefined) this.silences.set(e.identity, { identity: e.identity, until: iso(e.until), untilMs: e.until, by: e.by, at: iso(e.time), ...(e.note ? { note: e.note } : {}) });
        break;
      case "unsilenced":
        if (e.identity) this.silences.delete(e.identity);
        break;
      case "test":
        break;
    }
    this.delivery(e);
  }

  /** Deliveries: a success (someone told) or a failure; a held alert was not a delivery. */
  private delivery(e: AlertEvent): void {
    const told = (e.type === "fired" || e.type === "resolved" || e.type === "test") && (e.told?.length ?? 0) > 0;
    if (told) this.last = { ok: true, at: iso(e.time), notifier: e.notifier ?? null, told: e.told!, error: null, failing_since: null, subject: e.subject ?? null };
    else if (e.type === "delivery_failed")
      this.last = { ok: false, at: iso(e.time), notifier: e.notifier ?? null, told: [], error: e.error ?? "not delivered", failing_since: this.last && !this.last.ok ? this.last.failing_since : iso(e.time), subject: e.subject ?? null };
  }

  /** The node's silence in force at `now`, if any. */
  silenced(identity: string, now: number): Silence | undefined {
    const s = this.silences.get(identity);
    if (!s || s.untilMs <= now) return undefined;
    const { untilMs: _u, ...rest } = s;
    return rest;
  }

  /** The open alerts of a node (of one kind), oldest first. */
  openOf(identity: string, kind?: string): OpenAlert[] {
    return [...this.open.values()].filter((a) => a.identity === identity && (kind === undefined || a.kind === kind));
  }

  isOpen(alert: string): boolean {
    return this.open.has(alert);
  }

  lastDelivery(): DeliveryState | null {
    return this.last;
  }

  view(now: number, historyLimit = 200): AlertBookView {
    return {
      open: [...this.open.values()].sort((a, b) => (a.fired < b.fired ? 1 : a.fired > b.fired ? -1 : 0)),
      silences: [...this.silences.values()].filter((s) => s.untilMs > now).map(({ untilMs: _u, ...s }) => s),
      last_delivery: this.last,
      history: this.events.slice(-Math.max(0, historyLimit)).reverse(),
    };
  }
}

/** "90s", "45m", "2h", "1d", "1h30m": a silence's length in ms; throws saying what it takes. */
export function parseSilenceLength(text: string): number {
  const t = text.trim();
  const parts = [...t.matchAll(/(\d+(?:\.\d+)?)\s*(d|h|m|s)/g)];
  const whole = parts.map((p) => p[0]).join("");
  if (!parts.length || whole.replace(/\s/g, "") !== t.replace(/\s/g, "")) throw new Error(`a length such as 30m, 2h or 1d (units d, h, m, s), not ${JSON.stringify(t.slice(0, 40))}`);
  const unit = { d: 86_400_000, h: 3_600_000, m: 60_000, s: 1000 } as const;
  const ms = parts.reduce((sum, p) => sum + Number(p[1]) * unit[p[2] as keyof typeof unit], 0);
  return checkSilenceLength(ms);
}

/** A silence's length in ms, within bounds (a minute to 30 days); throws saying which. */
export function checkSilenceLength(ms: number): number {
  if (!Number.isFinite(ms) || ms < 60_000) throw new Error("a silence lasts at least a minute");
  if (ms > MAX_SILENCE_MS) throw new Error(`a silence lasts at most ${MAX_SILENCE_MS / 86_400_000} days (the history keeps its events 90 days); silence it again when it ends`);
  return Math.round(ms);
}

/**
 * The open alerts an acknowledgement names: one by its id, or a node's (of one kind). Throws
 * saying why none: an operator acknowledges what is open.
 */
export function ackTargets(book: AlertBook, t: { alert?: string; identity?: string; kind?: string }): OpenAlert[] {
  if (t.alert) {
    const a = book.view(Date.now(), 0).open.find((x) => x.alert === t.alert);
    if (!a) throw new Error(`no open alert ${JSON.stringify(t.alert.slice(0, 300))}: it was resolved, or never fired`);
    return [a];
  }
  if (!t.identity) throw new Error("name the alert, or its node");
  const found = book.openOf(t.identity, t.kind);
  if (!found.length) throw new Error(`${t.identity} has no open alert${t.kind ? ` of kind ${t.kind}` : ""}`);
  return found;
}
