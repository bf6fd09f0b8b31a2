// TTL, clock-skew and replay checks. Pure: callers pass the clock.

export interface FreshnessPolicy {
  /** Seconds a request's time may lie in the future (clock skew between hosts). */
  maxClockSkew: number;
}

export type FreshnessVerdict = "ok" | "expired" | "future";

export function checkFreshness(time: number, ttl: number, now: number, policy: FreshnessPolicy): FreshnessVerdict {
  const skewMs = policy.maxClockSkew * 1000;
  if (time > now + skewMs) return "future";
  if (time + ttl * 1000 < now - skewMs) return "expired";
  return "ok";
}

/**
 * Remembers request ids until they could no longer pass the freshness check, so a replayed
 * request is refused without keeping ids forever. Keys are caller-chosen (e.g. subject + id).
 */
export class ReplayCache {
  private readonly seen = new Map<string, number>(); // key -> forget-after (ms)
  private lastSweep = 0;
  constructor(private readonly policy: FreshnessPolicy, private readonly maxEntries = 1_000_000) {}

  /** Records the key; returns false when it was already seen (a replay). */
  admit(key: string, time: number, ttl: number, now: number): boolean {
    if (now - this.lastSweep > 10_000 || this.seen.size >= this.maxEntries) this.sweep(now);
    if (this.seen.has(key)) return false;
    this.seen.set(key, time + ttl * 1000 + 2 * this.policy.maxClockSkew * 1000);
    return true;
  }

  /** Whether the key was seen (and not yet forgotten), without recording it. */
  has(key: string): boolean {
    return this.seen.has(key);
  }

  get size(): number {
    return this.seen.size;
  }

  private sweep(now: number): void {
    this.lastSweep = now;
    for (const [k, until] of this.seen) if (until < now) this.seen.delete(k);
  }
}
