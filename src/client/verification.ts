import { KeyDirectory } from "./key-directory.js";
import { VerifyPool } from "./verify.js";

// A client's reply verification (docs/security.md): one worker pool for the signatures, and the
// node-key directory they are judged against, shared by the client and its collective views.

/** Once this many replies are awaited (one call's, or many calls' together) they verify on the worker pool; fewer on the event loop. */
const POOL_FROM = 64;
/** A call to this many nodes or more waits for the key directory before asking them (Verification.settled). */
export const SETTLE_FROM = 64;
/** How soon a key-directory read that was given up is tried again. */
const RETRY_TIMED_OUT_MS = 5_000;

/** Verification state shared by a client and its collective views: one worker pool, one directory. */
export class Verification {
  readonly pool = new VerifyPool();
  /** Replies awaited across every call in flight: many small calls (a provisioner's) warm the pool as one large one does. */
  private awaited = 0;
  private dir?: KeyDirectory;
  private loading?: Promise<KeyDirectory>;
  private loadedAt = 0;
  private closed = false;
  constructor(
    readonly enabled: boolean,
    private readonly load: () => Promise<KeyDirectory>,
    private readonly retryUnavailableMs = 60_000,
  ) {}
  /**
   * The directory once loaded (started on first use, read once, then kept current by its watch).
   * One that was unavailable (no bucket yet) is looked for again after a minute: daemons live long;
   * one whose read was given up (a busy broker), after RETRY_TIMED_OUT_MS.
   * One load at a time: every reply verified while a look is under way gets the directory there is
   * (a 10,000-node call asks thousands of times a second; each asking anew left a watch behind).
   */
  directory(): KeyDirectory | Promise<KeyDirectory> {
    const wait = this.dir?.timedOut ? Math.min(RETRY_TIMED_OUT_MS, this.retryUnavailableMs) : this.retryUnavailableMs;
    const stale = this.dir?.unavailable !== undefined && performance.now() - this.loadedAt > wait;
    if (this.dir && !stale) return this.dir;
    const loading = this.reload();
    return this.dir ?? loading; // a stale one still answers while it is looked for again
  }
  private reload(): Promise<KeyDirectory> {
    this.loading ??= this.load().then((d) => {
      this.loadedAt = performance.now();
      this.loading = undefined;
      if (this.closed) d.close(); // the client closed while it loaded: no watch outlives it
      return (this.dir = d);
    });
    return this.loading;
  }
  /**
   * The directory, waited for; a read given up (it was started while another call's replies
   * flooded the connection, and its answers waited behind them) is tried once more now. A call
   * about to ask many nodes waits for this first: its own replies would otherwise starve the read
   * they all wait on (a 50,000-node ping had every reply unverified).
   */
  async settled(): Promise<KeyDirectory> {
    const dir = await this.directory();
    if (!dir.timedOut) return dir;
    return this.loading ?? this.reload();
  }
  /** A call now awaits `n` more replies (negative: fewer); the pool starts once POOL_FROM are awaited at once. */
  awaiting(n: number): void {
    this.awaited += n;
    if (this.enabled && this.awaited >= POOL_FROM) this.pool.warm();
  }
  async close(): Promise<void> {
    this.closed = true;
    this.dir?.close();
    await this.pool.close();
  }
}

