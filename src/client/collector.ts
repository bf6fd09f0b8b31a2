import { createInbox, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import { decodeReply } from "../protocol/envelope.js";
import type { Reply } from "../protocol/types.js";

// Reply collection on a per-request inbox. Stops when every expected node answered (directed RPC),
// after an idle window following the last reply (broadcast discovery), or at the deadline. A
// broadcast that knows which nodes should answer (`anticipate`: the last discovery's answer, the
// registry's) stops as soon as they all did, without waiting out the idle window.
// The idle window stretches to the time the first reply took: a fleet (or a client) that is slow
// to answer at all is slow between answers too, and a fixed 250 ms then ends a discovery between
// two of them (a loaded CI machine dropped a node of three that way).

export interface CollectOptions {
  requestId: string;
  /** Identities we expect; collection completes as soon as all have replied. */
  expect?: Set<string>;
  timeoutMs: number;
  /** Stop once this long passes without a reply (after at least one), or as long as the first reply took, if longer. */
  idleMs?: number;
  /**
   * Broadcast: the nodes expected to answer. Until each has answered, no silence ends collection
   * (a late one is waited for, up to `timeoutMs`). Then it ends `settleMs` after the last reply if
   * no node outside them answered, else (the expectation was stale) after the idle window.
   */
  anticipate?: ReadonlySet<string>;
  /** Quiet time after the last anticipated reply before the end (default 20 ms; 0: at once). */
  settleMs?: number;
  onReply?: (r: Reply) => void;
  /**
   * Checks each reply before it counts (its signature, off the event loop): `keep` false drops it,
   * and a node whose reply was dropped may still answer validly. Collection ends only once every
   * check it started has come back.
   */
  check?: (raw: Uint8Array, r: Reply, done: (keep: boolean) => void) => void;
}

export interface Collector {
  inbox: string;
  /** Resolves with every reply, first per sender, in arrival order. */
  done: Promise<Reply[]>;
  /** Begin the deadline clocks (call after publishing). */
  start(): void;
  cancel(): void;
  /** Count of malformed or unrelated messages seen on the inbox. */
  readonly ignored: number;
}

export function collectReplies(nc: NatsConnection, opts: CollectOptions): Collector {
  const inbox = createInbox();
  const replies: Reply[] = [];
  const seen = new Set<string>();
  const judgedAgain = new Set<string>(); // senders whose one later answer was checked (below)
  let ignored = 0;
  let sub: Subscription | undefined;
  let deadline: NodeJS.Timeout | undefined;
  let idle: NodeJS.Timeout | undefined;
  let resolveDone!: (r: Reply[]) => void;
  const done = new Promise<Reply[]>((r) => (resolveDone = r));
  let finished = false;

  let checking = 0;
  const finish = () => {
    if (finished) return;
    finished = true;
    clearTimeout(deadline);
    clearTimeout(idle);
    sub?.unsubscribe();
    if (checking === 0) resolveDone(replies);
  };
  const anticipate = opts.anticipate?.size ? opts.anticipate : undefined;
  let missing = anticipate?.size ?? 0; // anticipated nodes not heard from yet
  let surprised = false; // a node outside `anticipate` answered
  const settleMs = opts.settleMs ?? 20;
  let startedAt: number | undefined; // when start() was called: the clocks run from then
  let firstReplyAfter = 0; // from start() to the first reply that counted
  /** How long a silence ends collection now: the idle window, the settle time, or never (Infinity). */
  const quietWindow = (): number => {
    const idleWindow = opts.idleMs ? Math.max(opts.idleMs, firstReplyAfter) : Infinity; // 0: no idle window
    if (!anticipate) return idleWindow;
    if (missing > 0) return Infinity;
    return surprised ? idleWindow : settleMs;
  };
  const accept = (r: Reply) => {
    if (seen.has(r.sender)) return; // a node answers once; duplicates (e.g. redelivery) are dropped
    seen.add(r.sender);
    replies.push(r);
    if (replies.length === 1 && startedAt !== undefined) firstReplyAfter = performance.now() - startedAt;
    opts.onReply?.(r);
    if (opts.expect && seen.size >= opts.expect.size) return finish();
    if (anticipate) {
      const before = quietWindow();
      if (anticipate.has(r.sender)) missing--;
      else surprised = true;
      // The window just shrank (the last anticipated node answered): a timer set for a longer one
      // must not hold collection open.
      if (quietWindow() < before && idle !== undefined) {
        clearTimeout(idle);
        idle = undefined;
      }
    }
    if (startedAt !== undefined) armIdle();
  };
  // One idle timer, pushed back lazily: each reply only records its arrival time, and the timer,
  // when it fires, sleeps again for what is left of the window. Re-arming a timer per reply cost
  // 10,000 timer insertions per 10,000-node discovery.
  let lastReply = 0;
  const onIdleTimer = () => {
    idle = undefined;
    const window = quietWindow();
    if (window === Infinity) return; // re-armed by the reply that makes the window finite
    const left = lastReply + window - performance.now();
    if (left > 0.5) idle = setTimeout(onIdleTimer, left);
    else finish();
  };
  const armIdle = () => {
    lastReply = performance.now();
    const window = quietWindow();
    if (window === Infinity) return;
    if (idle === undefined) idle = setTimeout(onIdleTimer, window);
  };

  sub = nc.subscribe(inbox, {
    callback: (err, msg) => {
      if (err || finished) return;
      let r: Reply;
      try {
        r = decodeReply(msg.data);
      } catch {
        ignored++;
        return;
      }
      if (r.requestid !== opts.requestId && r.requestid !== "") {
        ignored++;
        return;
      }
      if (seen.has(r.sender)) {
        // a second answer for a node already counted is never counted, but one that is forged is
        // still judged and reported: which of the two the pool checks first is chance. Only one
        // per node: a flood of copies costs no more checks than the call's own replies
        if (!opts.check || judgedAgain.has(r.sender)) return;
        judgedAgain.add(r.sender);
        checking++;
        opts.check(msg.data, r, () => {
          checking--;
          if (finished && checking === 0) resolveDone(replies);
        });
        return;
      }
      if (opts.expect && !opts.expect.has(r.sender)) {
        ignored++;
        return;
      }
      if (!opts.check) return accept(r);
      checking++;
      opts.check(msg.data, r, (keep) => {
        checking--;
        if (keep && !finished) accept(r);
        if (finished && checking === 0) resolveDone(replies);
      });
    },
  });
  return {
    inbox,
    done,
    start() {
      startedAt = performance.now();
      if (opts.expect && opts.expect.size === 0) return finish();
      deadline = setTimeout(finish, opts.timeoutMs);
      if (replies.length > 0) armIdle();
    },
    cancel: finish,
    get ignored() {
      return ignored;
    },
  };
}
