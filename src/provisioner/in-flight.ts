import type { NodeRecord, Stage } from "../protocol/provision-record.js";
import { restartExpected } from "./stages.js";

// Each node's step while one is in flight, and what may end its wait early: the node restarting
// (its startup event), going away (its shutdown event, or the liveness watch), its master going
// away, or the node appearing in the fleet on its certificate. The driver (driver.ts) registers a
// step as it starts it and reads, when the step ends, why its wait was cut short; the engine
// decides what that means (engine.ts, stages.ts restartExpected).

/** A node's current step: aborted when the node restarts or goes away, or its master does, so its wait ends at once. */
export interface InStep {
  controller: AbortController;
  stage: Stage;
  rec: NodeRecord;
  /** Why the node counts as gone, when that ended the wait. */
  gone?: string;
  /** Why the node's master counts as away, when that ended the wait. */
  masterAway?: string;
  /** The node announced itself in the fleet, on its certificate, when that ended the wait. */
  inFleet?: boolean;
}

export class StepsInFlight {
  /** Per node once its steps began (the last step's entry stays until the run ends). */
  private readonly steps = new Map<string, InStep>();

  /** The step `stage` of `rec` begins: it replaces the node's last. */
  start(rec: NodeRecord, stage: Stage): InStep {
    const s: InStep = { controller: new AbortController(), stage, rec };
    this.steps.set(rec.identity, s);
    return s;
  }

  get(identity: string): InStep | undefined {
    return this.steps.get(identity);
  }

  /** The node's run is over. */
  delete(identity: string): void {
    this.steps.delete(identity);
  }

  /** The node restarted: the step waiting on it stops waiting (the engine asks again). False when none is in flight. */
  nodeRestarted(identity: string): boolean {
    const c = this.steps.get(identity);
    if (!c) return false;
    c.controller.abort();
    return true;
  }

  /**
   * The node announced it is stopping (`reason`): gone, and the step waiting on it stops waiting
   * (the engine parks it); or, during or after its disable step, the restart that disabling causes
   * (stages.ts restartExpected), and the step goes on. Undefined when no step is in flight.
   */
  nodeStopping(identity: string, reason: string): "gone" | "restart" | undefined {
    const c = this.steps.get(identity);
    if (!c) return undefined;
    if (restartExpected(c.stage, c.rec)) return "restart";
    return this.end(identity, { gone: reason }) ? "gone" : undefined;
  }

  /** The node announced itself in the fleet: while its disable step waits, that step took effect (the engine takes it as done); true when it ended one. */
  nodeInFleet(identity: string): boolean {
    return this.steps.get(identity)?.stage === "disable" && this.end(identity, { inFleet: true });
  }

  /** The step waiting on the node stops waiting, because the node (`gone`) or its master (`masterAway`) went away, or it is in the fleet; false when none is in flight. */
  end(identity: string, why: Pick<InStep, "gone"> | Pick<InStep, "masterAway"> | Pick<InStep, "inFleet">): boolean {
    const c = this.steps.get(identity);
    if (!c || c.controller.signal.aborted) return false;
    Object.assign(c, why);
    c.controller.abort();
    return true;
  }
}
