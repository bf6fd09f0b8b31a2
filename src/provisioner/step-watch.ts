import { goneAfter, masterAwayAfter, type LivenessPolicy } from "./liveness.js";
import { sleep } from "./masters.js";

// While a step waits, whether what it waits on is still there: the node (a liveness check,
// rpcutil#ping) and, for a step that needs it, the node's Puppet master (among the masters
// discovered). The rules that say when either counts as away are liveness.ts's; this is the timer.

export interface StepProbes {
  /** One liveness check of the node: true when it answered. */
  node?: () => Promise<boolean>;
  /** Whether the node's master is among the masters discovered now. */
  master?: { name: string; answers: () => Promise<boolean> };
}

/**
 * Every check_interval, each probe once; once the node counts as gone (goneAfter) or its master as
 * away (masterAwayAfter), `away` is told which and why, and when it answers true (the step's wait
 * was ended) the watch stops. Returns the stop function.
 */
export function watchStep(p: LivenessPolicy, probes: StepProbes, away: (what: "node" | "master", reason: string) => boolean): () => void {
  if (p.checkS <= 0 || (!probes.node && !probes.master)) return () => undefined;
  const stop = new AbortController();
  void (async () => {
    let misses = 0;
    let masterMisses = 0;
    // A check starts every check_interval: an unanswered one has already waited its interval
    // out, so the next starts at once (3 misses took 30 s instead of 15 when each also slept).
    let next = Date.now() + p.checkS * 1000;
    while (!stop.signal.aborted) {
      await sleep(Math.max(0, next - Date.now()), stop.signal);
      if (stop.signal.aborted) return;
      next = Date.now() + p.checkS * 1000;
      const [answered, masterAnswers] = await Promise.all([probes.node?.() ?? true, probes.master?.answers() ?? true]);
      if (stop.signal.aborted) return;
      misses = answered ? 0 : misses + 1;
      masterMisses = masterAnswers ? 0 : masterMisses + 1;
      const gone = goneAfter(misses, p);
      if (gone && away("node", gone)) return;
      const masterAway = probes.master ? masterAwayAfter(probes.master.name, masterMisses, p) : undefined;
      if (masterAway && away("master", masterAway)) return;
    }
  })();
  return () => stop.abort(STOPPED);
}

/** The watch's abort reason: one for all (abort() without one builds a DOMException and its stack, at every step of every node). */
const STOPPED = Object.freeze({ name: "StepWatchStopped", message: "the step's watch stopped" });
