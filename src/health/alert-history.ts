import { randomUUID } from "node:crypto";
import type { StreamFollow, StreamPublisher, Streams, StreamSettings } from "../broker/stream.js";
import { alertEventSubject, encodeAlertEvent, parseAlertEvent, type AlertEvent } from "../protocol/alert-event.js";
import { AlertBook } from "./alert-book.js";

// The alerts' history, kept (docs/fleet.md#alerts): the one place that opens, writes and reads the
// stream `MUSTER_ALERTS`. The console's alerter writes what it decided and how each delivery went;
// the console and `muster alerts` write operators' acknowledgements, silences and test alerts.
// Events kept 90 days, at most 256 MiB; three copies on a three-broker site (store_replicas).

export const ALERT_STREAM: StreamSettings = { name: "MUSTER_ALERTS", subjects: ["muster.alerts.>"], maxAgeS: 90 * 86_400, maxBytes: 256 * 1024 ** 2 };

/** Events read back to fold the book (the newest this many): months of a fleet's alerts. */
const READ_BACK = 10_000;

export class AlertHistory {
  /** Events that did not parse (the stream is writable by every admin), skipped. */
  invalid = 0;

  private constructor(
    private readonly streams: Streams,
    private readonly publisher: StreamPublisher,
  ) {}

  /** The stream, created when missing (an admin's credential: the console, `muster broker stores`, `muster alerts`). */
  static async open(streams: Streams, o: { replicas?: number } = {}): Promise<AlertHistory> {
    const { publisher } = await streams.stream({ ...ALERT_STREAM, ...(o.replicas ? { replicas: o.replicas } : {}) });
    return new AlertHistory(streams, publisher);
  }

  /**
   * The book as the stream has it, without making the stream (a reader such as `muster health`);
   * undefined when there is no history yet.
   */
  static async read(streams: Streams, timeoutMs = 10_000): Promise<AlertBook | undefined> {
    const lines = await streams.tail(ALERT_STREAM.name, READ_BACK, timeoutMs);
    return lines && foldLines(lines).book;
  }

  /** Resolves with the event as kept (with its id) once the stream kept it. */
  async append(e: AlertEvent, timeoutMs = 5000): Promise<AlertEvent> {
    const kept = { ...e, id: e.id ?? randomUUID() };
    await this.publisher.publish(alertEventSubject(e.type), encodeAlertEvent(kept), { msgId: kept.id, timeoutMs });
    return kept;
  }

  private decode(data: Uint8Array | string): AlertEvent | undefined {
    const p = parseAlertEvent(data);
    if (!p.ok) this.invalid++;
    return p.ok ? p.event : undefined;
  }

  /** The book as the stream has it now (`muster alerts`). */
  async book(timeoutMs = 10_000): Promise<AlertBook> {
    const { book, invalid } = foldLines((await this.streams.tail(ALERT_STREAM.name, READ_BACK, timeoutMs)) ?? []);
    this.invalid += invalid;
    return book;
  }

  /** Every kept event, then each new one as it is kept (the console); undefined without the stream. */
  async follow(onEvent: (e: AlertEvent) => void, onCaughtUp: () => void = () => undefined): Promise<{ stop(): void; done: Promise<void> } | undefined> {
    const f: StreamFollow | undefined = await this.streams.follow(ALERT_STREAM.name);
    if (!f) return undefined;
    const done = (async () => {
      for await (const c of f) {
        if (c.kind === "caught-up") onCaughtUp();
        else {
          const e = this.decode(c.message.data);
          if (e) onEvent(e);
        }
      }
    })();
    return { stop: () => f.stop(), done };
  }
}

/** Kept events (text) folded into a book; the ones that do not parse are skipped and counted. */
function foldLines(lines: readonly string[]): { book: AlertBook; invalid: number } {
  const events: AlertEvent[] = [];
  let invalid = 0;
  for (const l of lines) {
    const p = parseAlertEvent(l);
    if (p.ok) events.push(p.event);
    else invalid++;
  }
  return { book: new AlertBook(events), invalid };
}
