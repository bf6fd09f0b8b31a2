import type { NatsConnection, Server } from "@nats-io/transport-node";
import type { Logger } from "pino";

// A broker that loses its power sends no reset: the daemon's socket stays open, what it publishes
// goes nowhere, and NATS's own pings (every 30 s, two unanswered) notice after 60-90 s. A node whose
// heartbeats stop that long reads as unreachable while it serves (the site's false alarm: a broker
// cut, the nodes on it "down"). So a persistent connection asks its broker for a PONG every few
// seconds; one that does not answer in time is dropped, and nats.js moves to another broker.

/**
 * How often a daemon's broker is asked to answer, and how long it has: a dead broker is left within
 * 8 s. A node's heartbeats stop for that long plus its move and up to an interval (10 s), all under
 * the 25 s after which health calls it unreachable; asked every 5 s, a move on a loaded site took a
 * node past it. 4 s to answer left a busy server's broker for nothing under the suite's fuzzing.
 */
export const LIVENESS_EVERY_MS = 3000;
export const LIVENESS_ANSWER_MS = 5000;

export interface LivenessOptions {
  everyMs?: number;
  answerWithinMs?: number;
  log?: Logger;
  /** Told the server (host:port) it leaves for not answering, before it moves. */
  onLeave?: (server: string) => void;
}

/** How long a broker left for not answering, or one a dial to failed, is passed over when choosing where to go. */
export const AVOID_MS = 30_000;

/**
 * Where to dial next (nats.js's reconnectToServer): its own pick (the pool's first), unless that is
 * a member left for not answering or one a dial to failed within AVOID_MS; then the first that is
 * neither. A power-cut member answers no SYN, so each dial to it waits out the connect timeout
 * (5 s): going back to it, or to its other address, made a node's move take 25-40 s instead of 10.
 * null: nats.js's own pick (every member is to be avoided, or there is nothing to choose).
 */
export function nextBroker(pool: ReadonlyArray<Pick<Server, "listen" | "reconnects" | "lastConnect">>, left: ReadonlyMap<string, number>, now: number): number | null {
  const avoid = (s: Pick<Server, "listen" | "reconnects" | "lastConnect">) => now - (left.get(s.listen) ?? -Infinity) < AVOID_MS || (s.reconnects > 0 && now - s.lastConnect < AVOID_MS);
  if (!pool.length || !avoid(pool[0]!)) return null;
  const i = pool.findIndex((s) => !avoid(s));
  return i < 0 ? null : i;
}

/**
 * Probes `nc` until it closes or the returned function is called. While nats.js is reconnecting
 * nothing is probed (it is already moving). Returns the stop function.
 */
export function watchBrokerLiveness(nc: NatsConnection, o: LivenessOptions = {}): () => void {
  const everyMs = o.everyMs ?? LIVENESS_EVERY_MS;
  const answerMs = o.answerWithinMs ?? LIVENESS_ANSWER_MS;
  let connected = true;
  let probing = false;
  let stopped = false;
  void (async () => {
    for await (const s of nc.status()) {
      if (s.type === "disconnect" || s.type === "reconnecting") connected = false;
      else if (s.type === "reconnect") connected = true;
    }
  })().catch(() => undefined);
  const timer = setInterval(() => {
    if (stopped || probing || !connected || nc.isClosed() || nc.isDraining()) return;
    probing = true;
    void probeBroker(nc, answerMs)
      .then((said) => {
        // busy: the broker is there and this process read its answer late (a node under a flood of
        // requests, on a loaded machine); leaving would drop its subscriptions for nothing
        if (said !== "silent" || stopped || !connected || nc.isClosed() || nc.isDraining()) return;
        o.log?.warn({ broker: nc.getServer(), answer_within_ms: answerMs }, `the broker at ${nc.getServer()} did not answer within ${answerMs / 1000} s: moving to another`);
        o.onLeave?.(nc.getServer());
        connected = false;
        return nc.reconnect();
      })
      .catch(() => undefined)
      .finally(() => (probing = false));
  }, everyMs);
  timer.unref();
  void nc.closed().then(() => {
    stopped = true;
    clearInterval(timer);
  });
  return () => {
    stopped = true;
    clearInterval(timer);
  };
}

/** A probe's timer firing this late means this process was held (a loaded machine): its answer may have had no time to come. */
export const LATE_MS = 1000;
/** After a late timer, how long a probe waits again, running on time, before judging. */
export const RECHECK_MS = 1000;
const MAX_RECHECKS = 5;

/**
 * One probe (pure of any decision to move): "answered" once the broker's PONG is read; "busy"
 * when this process received messages meanwhile (the broker is there); "silent" once `answerMs`
 * have passed without either, judged only when the timer fired on time. A timer that fired more
 * than LATE_MS late (the process was held: its PING may have left late, its answer may wait
 * unread) is followed by RECHECK_MS more, until one fires on time; "busy" only when MAX_RECHECKS
 * of those fired late too (a process that held most of every second). Calling lateness "busy" at once kept nodes on a power-cut member for a
 * probe or two more on a loaded site (8 s each), past health's threshold. Before judging, the I/O
 * already in is read (setImmediate runs after the loop's poll): an answer that arrived while the
 * process was blocked is not taken for silence.
 */
export function probeBroker(nc: NatsConnection, answerMs: number): Promise<"answered" | "busy" | "silent"> {
  const before = nc.stats().inMsgs;
  let rechecks = 0;
  return new Promise((resolve) => {
    let done = false;
    let t: NodeJS.Timeout | undefined;
    const finish = (said: "answered" | "busy" | "silent") => {
      if (done) return;
      done = true;
      clearTimeout(t);
      resolve(said);
    };
    const wait = (ms: number) => {
      const due = performance.now() + ms;
      t = setTimeout(() => {
        const late = performance.now() - due;
        setImmediate(() => {
          if (done) return;
          if (nc.stats().inMsgs > before) return finish("busy");
          if (late <= LATE_MS) return finish("silent");
          if (rechecks++ >= MAX_RECHECKS) return finish("busy");
          wait(RECHECK_MS);
        });
      }, ms);
    };
    wait(answerMs);
    nc.flush().then(
      () => finish("answered"),
      () => undefined, // closed or moving: the timer decides, and the watcher sees it is not connected
    );
  });
}

/** `nc.flush()` bounded by `graceMs` (false when it did not complete, e.g. the broker is down). */
export async function flushWithin(nc: NatsConnection, graceMs = 2000): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<boolean>((r) => (timer = setTimeout(() => r(false), graceMs)));
  const flushed = nc.flush().then(
    () => true,
    () => false,
  );
  const ok = await Promise.race([flushed, timedOut]);
  clearTimeout(timer);
  return ok;
}
