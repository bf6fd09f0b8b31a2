import type { LostStretch, ServiceBeat } from "../protocol/service.js";

// "I cannot see" is not "the node is gone" (docs/fleet.md#a-view-that-cannot-see). An observer
// (the console, kept live; `muster health`, read once) knows stretches of time during which it
// could not see what nodes and services send: its connection was down or its watch fell behind
// the store (its own probe did not come back through it), or the store took no writes. While it
// is blind, the report says so (degraded, why, since when), silence is judged only up to the
// moment it went blind (nobody turns unreachable meanwhile), and alerts are held. Once it sees
// again, what the store kept meanwhile has come in, and silence counts in full: a node that died
// in the window is reported at once. Only a stretch during which the store itself may not have
// taken writes (`lost`: heartbeats sent then are gone) is taken out of everyone's silence, which
// counts again only from its end (silentSeconds). Pure.

/** "27 s", "4 min", "3.5 h", "2 days": how long, for reasons. */
export function span(seconds: number): string {
  if (seconds < 120) return `${Math.round(seconds)} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  if (seconds < 48 * 3600) return `${Math.round(seconds / 360) / 10} h`;
  return `${Math.round(seconds / 86400)} days`;
}

/** A stretch during which this observer could not see (ms epoch; `to` absent: it still cannot). */
export interface Blind {
  from: number;
  to?: number;
  why: string;
  /** The store may not have taken writes meanwhile: heartbeats sent then may be lost, so this stretch never counts as silence. */
  lost?: boolean;
}

/** How far the report can be trusted, as the page and --json show it. */
export interface ViewState {
  /** The observer cannot see now: silence is not judged, and alerts are held. */
  degraded: boolean;
  /** Why, when degraded. */
  why: string | null;
  /** Since when (ISO), when degraded. */
  since: string | null;
  /** Up to when what it shows is known to be current (ISO): the last probe that came back, or the read. */
  fresh_as_of: string | null;
  /** Seconds since then. */
  fresh_s_ago: number | null;
}

/** Seconds of [from, now] that were watched: the stretches given taken out. */
export function watchedSeconds(from: number, now: number, blind: readonly Blind[]): number {
  // the stretches clipped to [from, now], merged where they overlap, then taken out
  const parts = blind
    .map((b) => [Math.max(from, b.from), Math.min(now, b.to ?? now)] as const)
    .filter(([a, z]) => z > a)
    .sort((x, y) => x[0] - y[0]);
  let unseen = 0;
  let end = from;
  for (const [a, z] of parts) {
    if (z <= end) continue;
    unseen += z - Math.max(a, end);
    end = z;
  }
  return Math.max(0, (now - from - unseen) / 1000);
}

/**
 * Seconds of silence since `from` that count against a node or service whose limit is `limitS`:
 * stretches taken out as watchedSeconds does, and where a stretch the store may have lost writes in
 * (`lost`) ends after `from`, counted from its end instead. A beat sent just before that end may be
 * among the lost, and the next is due an interval later: taking out only the stretch's length
 * called a node quiet through a store's failover unreachable (its beat lost in the election, the
 * next 10 s on). One already past its limit when the stretch began sent nothing then: it stays so.
 */
export function silentSeconds(from: number, now: number, blind: readonly Blind[], limitS: number): number {
  let since = from;
  for (const b of blind.filter((x) => x.lost && x.from < now).sort((x, y) => x.from - y.from)) {
    const end = Math.min(now, b.to ?? now);
    if (end <= since) continue;
    if (watchedSeconds(since, Math.max(since, b.from), blind) > limitS) break;
    since = end;
  }
  return watchedSeconds(since, now, blind);
}

/** The stretch it is blind in now, if any. */
export function blindNow(blind: readonly Blind[]): Blind | undefined {
  return blind.find((b) => b.to === undefined);
}

/** Keeps the stretches that can still matter (those ending within `keepMs`), oldest first. */
export function pruneBlind(blind: readonly Blind[], now: number, keepMs: number): Blind[] {
  return blind.filter((b) => b.to === undefined || now - b.to < keepMs);
}

export function viewState(blind: readonly Blind[], freshAsOf: number | undefined, now: number): ViewState {
  const b = blindNow(blind);
  return {
    degraded: b !== undefined,
    why: b?.why ?? null,
    since: b ? new Date(b.from).toISOString() : null,
    fresh_as_of: freshAsOf !== undefined ? new Date(freshAsOf).toISOString() : null,
    fresh_s_ago: freshAsOf !== undefined ? Math.max(0, Math.round((now - freshAsOf) / 1000)) : null,
  };
}

/** How far back a console publishes its lost stretches (longer than any node's threshold is useful for). */
export const PUBLISH_LOST_MS = 30 * 60_000;

/** The lost stretches to publish in a console's service beat: those that end within PUBLISH_LOST_MS, newest last, at most `max`. */
export function lostToPublish(blind: readonly Blind[], now: number, max: number): LostStretch[] {
  return blind
    .filter((b) => b.lost && now - (b.to ?? now) < PUBLISH_LOST_MS)
    .slice(-max)
    .map((b) => ({ from: b.from, ...(b.to !== undefined ? { to: b.to } : {}), why: b.why }));
}

/**
 * What a reader that reads once (`muster health`) takes from the consoles' service beats: their
 * stretches of writes the store refused, as its own lost stretches (never anyone's silence). Only
 * from a console heard from within three of its intervals (one that stopped vouches for nothing
 * now), and a stretch it still called open ends now, which this reader's own probe has just proved
 * (the store takes writes again).
 */
export function lostFromConsoles(beats: Iterable<{ beat: Pick<ServiceBeat, "role" | "name" | "interval" | "state" | "lost">; at: number }>, now: number): Blind[] {
  const out: Blind[] = [];
  for (const { beat, at } of beats) {
    if (beat.role !== "console" || beat.state !== "up" || now - at > 3 * beat.interval * 1000) continue;
    for (const l of beat.lost ?? []) {
      const to = Math.min(l.to ?? now, now);
      if (to > l.from) out.push({ from: l.from, to, lost: true, why: `${beat.name} saw the store refuse writes: ${l.why}` });
    }
  }
  return out;
}

/**
 * What an observer that probes (the console) knows of its own view, kept from events: on each
 * watched bucket (a channel: heartbeats, service heartbeats), its probes stored or not, and come
 * back through its watch or not; and its connection. The view is current up to the oldest of the
 * channels' last probes back. Each tick opens a blind stretch when that is older than `lagMs`
 * (from that time: the view was current up to it), and closes it at the time the probes are back.
 * A channel whose probes were never stored (a credential that may not write them) is left out; an
 * observer with none falls back on its connection alone.
 */
export class ViewKeeper {
  private readonly fresh = new Map<string, number>();
  private readonly stored = new Set<string>();
  private readonly putError = new Map<string, string>();
  private blind: Blind[] = [];

  constructor(private readonly o: { lagMs: number; keepMs: number }) {}

  /** The stretches as of the last tick. */
  stretches(): readonly Blind[] {
    return this.blind;
  }

  /** A probe written at `time` (this process's clock) came back through the watch of `channel`. */
  seen(channel: string, time: number): void {
    this.fresh.set(channel, Math.max(this.fresh.get(channel) ?? 0, time));
  }

  /** The store took a probe on `channel` (`error` undefined), or refused it. */
  put(channel: string, error?: string): void {
    if (error === undefined) {
      this.stored.add(channel);
      this.putError.delete(channel);
    } else this.putError.set(channel, error);
  }

  /** Up to when the view is known current: the oldest channel's last probe back; undefined before every stored channel has one back. */
  get freshAsOf(): number | undefined {
    const times = [...this.stored].map((c) => this.fresh.get(c));
    return times.length && times.every((t) => t !== undefined) ? Math.min(...(times as number[])) : undefined;
  }

  /** The stretches to report at `now`, and up to when silence may be judged. */
  tick(now: number, connected: boolean): { blind: Blind[]; freshAsOf?: number; judgeUntil: number } {
    const open = blindNow(this.blind);
    const fresh = this.freshAsOf;
    if (fresh === undefined) {
      if (!connected && !open) this.blind.push({ from: now, why: "not connected to the broker: reconnecting" });
      else if (connected && open) open.to = now;
      this.blind = pruneBlind(this.blind, now, this.o.keepMs);
      return { blind: this.blind, judgeUntil: now };
    }
    const lag = now - fresh;
    if (lag > this.o.lagMs) {
      const behind = [...this.stored].filter((c) => now - (this.fresh.get(c) ?? 0) > this.o.lagMs);
      const refused = behind.map((c) => [c, this.putError.get(c)] as const).find(([, e]) => e !== undefined);
      const why = !connected
        ? "not connected to the broker: reconnecting"
        : refused
          ? `the ${refused[0]} store does not take writes: ${refused[1]}`
          : `the watch on ${behind.join(" and ") || "the stores"} is ${Math.round(lag / 1000)} s behind (its probe has not come back)`;
      // a probe refused while connected: the store, not this view, is behind, and heartbeats may be lost
      const lost = connected && refused !== undefined;
      if (open) {
        open.why = why;
        open.lost ||= lost;
      } else this.blind.push({ from: fresh, why, ...(lost ? { lost } : {}) });
    } else if (open) open.to = Math.max(open.from, fresh);
    this.blind = pruneBlind(this.blind, now, this.o.keepMs);
    return { blind: this.blind, freshAsOf: fresh, judgeUntil: Math.min(now, fresh) };
  }
}
