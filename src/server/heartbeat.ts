import type { Logger } from "pino";
import { encodeHeartbeat, heartbeatSubject, type Heartbeat, type HeartbeatPhase } from "../protocol/heartbeat.js";
import { encodePuppetRun, puppetRunFromStatus, puppetRunSubject } from "../protocol/puppet-run.js";
import type { NodeRuntime } from "./runtime.js";

// A node's heartbeats (protocol/heartbeat.ts): one at once when the node starts serving, one every
// `interval` seconds, a last one saying "stopping" when it stops. Each carries the values of the
// data plugins named in `status` (config heartbeat.status, default puppet). When the puppet
// plugin reports a run not sent yet, the run is written to the node's runs key too
// (protocol/puppet-run.ts): history for every run, whoever started it. The host hands in its
// publish; nothing here knows the connection.

export interface HeartbeatOptions {
  /** Seconds between heartbeats; 0 turns them off. */
  interval: number;
  /** Data plugins whose values ride along. */
  status: string[];
  phase: HeartbeatPhase;
  /** Told of each Puppet run a beat carries as it is first written (after a start, the last run too). */
  onRun?: (identity: string, time: number) => void;
}

export class Heartbeats {
  private readonly timers: NodeJS.Timeout[] = [];
  /** Per identity, the time of the last Puppet run written (0: none yet). */
  private readonly runSent = new Map<string, number>();
  private stopped = false;

  constructor(
    private readonly runtimes: NodeRuntime[],
    private readonly publish: (subject: string, data: Uint8Array) => void,
    private readonly o: HeartbeatOptions & { version: string; log: Logger },
  ) {}

  start(): void {
    if (this.o.interval <= 0) return;
    const ms = this.o.interval * 1000;
    for (const rt of this.runtimes) {
      void this.beat(rt, "up");
      // Many nodes in one process (the emulator) spread their beats over the interval.
      const first = this.runtimes.length > 1 ? Math.random() * ms : ms;
      const t = setTimeout(() => {
        void this.beat(rt, "up");
        const iv = setInterval(() => void this.beat(rt, "up"), ms);
        iv.unref();
        this.timers.push(iv);
      }, first);
      t.unref();
      this.timers.push(t);
    }
  }

  /** A beat of every node now, off the schedule: after a move to another broker, so the gap is the move's, not the move's and an interval. */
  beatNow(): void {
    if (this.o.interval <= 0 || this.stopped) return;
    for (const rt of this.runtimes) void this.beat(rt, "up");
  }

  /** The last heartbeats: each node says it is stopping (readers then need not wait out the threshold). */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    for (const t of this.timers) clearTimeout(t);
    if (this.o.interval > 0) await Promise.all(this.runtimes.map((rt) => this.beat(rt, "stopping", true)));
  }

  private async beat(rt: NodeRuntime, state: Heartbeat["state"], last = false): Promise<void> {
    if (this.stopped && !last) return;
    const status: Heartbeat["status"] = {};
    for (const p of this.o.status) {
      try {
        const v = await rt.queryData(p, undefined);
        if (v) status[p] = v;
      } catch (e) {
        this.o.log.debug({ plugin: p, err: (e as Error).message }, "data plugin failed; the heartbeat goes without it");
      }
    }
    // a master or the notifier says how its service is (agent.service)
    const services = await rt.serviceStatuses().catch(() => []);
    if (this.stopped && !last) return;
    try {
      this.publish(heartbeatSubject(rt.identity), encodeHeartbeat({ identity: rt.identity, time: Date.now(), interval: this.o.interval, version: this.o.version, phase: this.o.phase, state, status, ...(services.length ? { services } : {}) }));
      const run = status.puppet && puppetRunFromStatus(rt.identity, status.puppet);
      // Sent again after a restart of the node (readers take a run once by its time).
      if (run && this.runSent.get(rt.identity) !== run.time) {
        this.publish(puppetRunSubject(rt.identity), encodePuppetRun(run));
        this.runSent.set(rt.identity, run.time);
        this.o.onRun?.(rt.identity, run.time);
      }
    } catch {
      // not connected right now; the next beat tries again
    }
  }
}
