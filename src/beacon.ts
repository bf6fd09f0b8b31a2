import type { Logger } from "pino";
import type { Bucket, Buckets } from "./broker/bucket.js";
import { DEFAULT_SERVICES_BUCKET } from "./protocol/buckets.js";
import { DEFAULT_HEARTBEAT_INTERVAL_S } from "./protocol/heartbeat.js";
import { encodeServiceBeat, serviceKey, type LostStretch, type ServiceBeat, type ServiceCheck, type ServiceRole } from "./protocol/service.js";

// A service of the site saying it is alive, and how it is (protocol/service.ts), as a node's
// heartbeat does (server/heartbeat.ts): a provisioner, the registry, the console each run one
// beacon, which writes their beat to their own key of the services bucket at once, every
// `intervalS` seconds after, and a last one saying "stopping". The console also writes, through
// the same writer, what it sees of each broker. The bucket is made by the console or `muster
// broker stores`: until it exists, beats are dropped and it is looked for again on the next one.
// A file of its own at the top of src/ (like semaphore.ts): the provisioner, the registry and the
// console each use it, and health (src/health/, which reads the beats) imports the provisioner.

export interface ServiceNow {
  checks: ServiceCheck[];
  details?: Record<string, unknown>;
  /** A console's stretches of writes the store refused (protocol/service.ts). */
  lost?: LostStretch[];
}

/** Writes service beats to the services bucket, opening it when it is first there. */
export class ServiceWriter {
  private bucket: Bucket | undefined;
  private warned = false;

  constructor(
    private readonly buckets: Buckets,
    private readonly log: Logger,
  ) {}

  /** Stores the beat; false when it could not (no bucket yet, the broker away), said once in the log. */
  async write(beat: ServiceBeat): Promise<boolean> {
    try {
      this.bucket ??= await this.buckets.bucketIfExists(DEFAULT_SERVICES_BUCKET);
      if (!this.bucket) throw new Error(`no ${DEFAULT_SERVICES_BUCKET} bucket yet (the console creates it, or \`muster broker stores\`)`);
      await this.bucket.put(serviceKey(beat.role, beat.name), encodeServiceBeat(beat));
      if (this.warned) this.log.info({ service: `${beat.role}.${beat.name}` }, "service heartbeats written again");
      this.warned = false;
      return true;
    } catch (e) {
      if (!this.warned) this.log.warn({ service: `${beat.role}.${beat.name}`, err: (e as Error).message }, "cannot write the service's heartbeat; trying again with the next");
      this.warned = true;
      return false;
    }
  }
}

export interface BeaconOptions {
  role: ServiceRole;
  /** The service's name: its host's identity, or its own id (a provisioner's). */
  name: string;
  version: string;
  intervalS?: number;
  /** How the service is now; a throw is written as a failed check. */
  status: () => ServiceNow | Promise<ServiceNow>;
  log: Logger;
}

export class ServiceBeacon {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private started = false;
  private busy = false;
  private again = false;
  private readonly writer: ServiceWriter;
  private readonly intervalS: number;
  private readonly name: string;

  constructor(
    buckets: Buckets,
    private readonly o: BeaconOptions,
  ) {
    this.writer = new ServiceWriter(buckets, o.log);
    this.intervalS = o.intervalS ?? DEFAULT_HEARTBEAT_INTERVAL_S;
    // a name readers accept (an identity's characters): a provisioner's id is the operator's to choose
    this.name = o.name.replace(/[^A-Za-z0-9_\-.:@]/g, "_").replace(/^\.+|\.+$/g, "").slice(0, 253) || "service";
  }

  start(): void {
    if (this.started) return;
    this.started = true;
    this.tick();
  }

  /**
   * Beats now rather than at the next interval: what it says has changed, and readers that read
   * once should know (a console's stretch of refused writes just closed). One in flight is followed
   * by another at once; the interval counts from the last.
   */
  beatNow(): void {
    if (!this.started || this.stopped) return;
    if (this.busy) {
      this.again = true;
      return;
    }
    clearTimeout(this.timer);
    this.tick();
  }

  private readonly tick = (): void => {
    if (this.stopped) return;
    this.busy = true;
    void this.beat("up").finally(() => {
      this.busy = false;
      if (this.stopped) return;
      if (this.again) {
        this.again = false;
        this.tick();
        return;
      }
      this.timer = setTimeout(this.tick, this.intervalS * 1000);
      this.timer.unref();
    });
  };

  /** The last beat, saying it stops (readers then need not wait out the silence); given up after 2 s (a broker away). */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    clearTimeout(this.timer);
    let t: NodeJS.Timeout | undefined;
    await Promise.race([this.beat("stopping"), new Promise<void>((r) => (t = setTimeout(r, 2000)))]);
    clearTimeout(t);
  }

  private async beat(state: ServiceBeat["state"]): Promise<void> {
    let now: ServiceNow;
    try {
      now = await this.o.status();
    } catch (e) {
      now = { checks: [{ name: "status", status: "fail", why: `it could not say how it is: ${(e as Error).message}` }] };
    }
    await this.writer.write({ name: this.name, role: this.o.role, time: Date.now(), interval: this.intervalS, version: this.o.version, state, checks: now.checks, details: now.details ?? {}, ...(now.lost?.length ? { lost: now.lost } : {}) });
  }
}
