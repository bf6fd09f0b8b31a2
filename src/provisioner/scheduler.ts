import { setMaxListeners } from "node:events";
import type { Logger } from "pino";
import { buildFilter } from "../filter/index.js";
import type { Filter } from "../protocol/types.js";
import { claimNeedsRenewal, renewedWaitClaim, resumeVerdict } from "./claim.js";
import type { Collective, NodeEvent } from "./collective.js";
import type { ProvisionerConfig } from "./config.js";
import { Driver, type ProvisionerEvents } from "./driver.js";
import type { EnginePolicy } from "./engine.js";
import { onNodeStarted, recheckMs, requeueRestarted, STOPPING_REASON, whileGone, whileMasterAway, type LivenessPolicy } from "./liveness.js";
import { logDiscovery, Masters } from "./masters.js";
import type { ProvisionerMetrics } from "./metrics.js";
import { Semaphore } from "../semaphore.js";
import { enabledStages } from "./stages.js";
import type { ProvisionState } from "./state.js";
import { NodeTrust } from "./trust.js";
import { masterWaitUntil } from "./waits.js";

export { StepError } from "./steps.js";
export type { ProvisionerEvents };

// The provisioning daemon's scheduler: it finds nodes (discovery every `sleeptime`, startup
// events, its own unfinished records), holds the global and per-master slots, and hands each node
// to the driver (driver.ts), which carries out what the engine (engine.ts) decides. Nodes the
// engine parked wait here without a slot: a gone node is pinged now and then; a node waiting for a
// master is taken up at the first master discovery that finds it (every cycle, and at once after
// any startup event), its claim renewed meanwhile.
// docs/provisioner.md#the-engine-map says which file decides what.

export class Provisioner {
  private readonly global: Semaphore;
  private readonly perMaster = new Map<string, Semaphore>();
  private readonly running = new Map<string, Promise<void>>();
  private readonly abort = new AbortController();
  private stopping = false;
  private loopTimer?: NodeJS.Timeout;
  private wake?: () => void;
  private lastResumeScan = 0;
  /** The last discovery cycle, for the provisioner's service heartbeat (src/health/). */
  lastCycle: { at: number; tookMs: number; found: number; error?: string } | undefined;
  private readonly targetFilter: Filter;
  /** Nodes parked while gone: when their wait ends, and the timer of their next check. */
  private readonly parked = new Map<string, { until: number; timer: NodeJS.Timeout }>();
  /** Nodes parked while no master answers for them: the master they wait for (none: any), when their wait ends, when our claim on them expires. */
  private readonly waitingForMaster = new Map<string, { master?: string; until: number; claimExpires: number }>();
  /** A look at the masters for the waiting nodes, while one runs; `again`: asked for meanwhile. */
  private masterCheck?: { again: boolean };
  private readonly policy: EnginePolicy;
  private readonly liveness: LivenessPolicy;
  private readonly trust: NodeTrust;
  private readonly masters: Masters;
  private readonly driver: Driver;

  constructor(
    private readonly cfg: ProvisionerConfig,
    private readonly collective: Collective,
    private readonly store: ProvisionState,
    private readonly log: Logger,
    private readonly metrics?: ProvisionerMetrics,
    events: ProvisionerEvents = {},
  ) {
    this.global = new Semaphore(cfg.concurrency);
    setMaxListeners(0, this.abort.signal); // every waiting node listens for shutdown
    const policy: EnginePolicy = { stages: enabledStages(cfg.steps), attempts: cfg.retries.attempts, backoffS: cfg.retries.backoff, maxBackoffS: cfg.retries.max_backoff, puppetTimeoutS: cfg.puppet_timeout, lockLeaseS: cfg.lock_lease, notifyFailures: cfg.steps.notify, goneTimeoutS: cfg.gone.timeout, masterWaitS: cfg.master_wait, knownMasterWaitS: cfg.known_master_wait };
    this.policy = policy;
    this.liveness = { checkS: cfg.gone.check_interval, checks: cfg.gone.checks };
    // Filters are parsed once at start: a bad one stops the daemon with a clear message.
    this.targetFilter = buildFilter({ select: cfg.target.filter ? [cfg.target.filter] : [], agent: [cfg.target.agent] });
    this.trust = new NodeTrust({ by: cfg.id, log, metrics, publish: collective.publishNodeKey?.bind(collective) });
    this.masters = new Masters(cfg, collective, log, this.abort.signal, store.masters);
    const masterSlot = (m: string) => {
      let s = this.perMaster.get(m);
      if (!s) this.perMaster.set(m, (s = new Semaphore(cfg.per_master_limit)));
      return s;
    };
    this.driver = new Driver({ cfg, policy, liveness: this.liveness, collective, store, trust: this.trust, masters: this.masters, log, metrics, events, stopping: this.abort.signal, masterSlot });
  }

  /** Subscribe to startup and shutdown events, resume our own unfinished work, then cycle until stopped. */
  async start(): Promise<void> {
    const stopListening = this.collective.onLifecycle((ev) => {
      if (ev.type === "shutdown") return this.onNodeShutdown(ev);
      this.masters.forget(); // whatever started may be a new master: look again before the next choice
      void this.checkMasterWaits(); // ... and nodes waiting for one need not wait for the next cycle
      // A provisioned node announcing itself in the fleet is not a restart of a waiting node.
      const inTargets = !ev.collectives || ev.collectives.includes(this.collective.collectiveOf("target"));
      if (inTargets) void this.onNodeStartup(ev);
      else this.onNodeInFleet(ev);
    });
    this.abort.signal.addEventListener("abort", () => stopListening(), { once: true });
    await this.resumeOwn();
    void this.loop();
  }

  /** --once: our unfinished nodes plus one discovery cycle, provisioned to the end. */
  async runOnce(): Promise<void> {
    await this.resumeOwn();
    await this.cycle();
    await this.checkMasterWaits(); // our nodes that waited for a master that answers now
    while (this.running.size) await Promise.allSettled([...this.running.values()]);
    // --once does not wait for masters: its waiting nodes stay claimed for the daemon to take up
  }

  /** One discovery cycle: enqueue every node waiting to be provisioned. */
  async cycle(): Promise<string[]> {
    const found = await this.collective.discover("target", this.targetFilter, this.cfg.discovery_timeout * 1000);
    logDiscovery(this.log, "nodes waiting to be provisioned", this.collective.collectiveOf("target"), this.cfg.target, found);
    // a node waiting for a master answers discovery: the master check takes it up, not this
    for (const id of found) if (!this.waitingForMaster.has(id)) this.enqueue(id, "discovery");
    return found;
  }

  private async loop(): Promise<void> {
    while (!this.stopping) {
      try {
        this.masters.forget(); // masters are discovered afresh every cycle
        // Records whose owner died after disabling a node are invisible to discovery: take them over
        // here. Claims expire only after lock_lease, so scanning every record more often is waste.
        const t0 = Date.now();
        if (t0 - this.lastResumeScan >= (this.cfg.lock_lease * 1000) / 2) await this.resumeOwn();
        const found = await this.cycle();
        await this.checkMasterWaits();
        this.lastCycle = { at: Date.now(), tookMs: Date.now() - t0, found: found.length };
      } catch (e) {
        this.lastCycle = { at: Date.now(), tookMs: 0, found: 0, error: (e as Error).message };
        this.log.warn({ err: (e as Error).message }, "discovery cycle failed; trying again next cycle");
      }
      if (this.stopping) break;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        this.loopTimer = setTimeout(resolve, this.cfg.sleeptime * 1000);
      });
    }
  }

  /** A node we are provisioning says it is stopping (signed by its pinned key, fresh): its step waits for nothing, unless it is the restart disabling causes. */
  private onNodeShutdown(ev: NodeEvent): void {
    if (this.stopping || !this.running.has(ev.identity) || !this.trust.has(ev.identity)) return;
    if (!this.trust.takeStartup(ev, Date.now())) return;
    const means = this.driver.inFlight.nodeStopping(ev.identity, STOPPING_REASON);
    if (means === "gone") this.log.warn({ node: ev.identity }, "node stopping while being provisioned; its step is abandoned until it is back");
    else if (means === "restart") this.log.info({ node: ev.identity }, "node restarting onto its Puppet certificate after disabling provisioning, as expected; provisioning goes on");
  }

  /** A node we are provisioning announced itself in the fleet (on its certificate): a disable step waiting on it took effect. */
  private onNodeInFleet(ev: NodeEvent): void {
    if (this.stopping || !this.running.has(ev.identity) || !this.trust.has(ev.identity)) return;
    if (this.driver.inFlight.get(ev.identity)?.stage !== "disable" || !this.trust.takeStartup(ev, Date.now())) return;
    if (this.driver.inFlight.nodeInFleet(ev.identity)) this.log.info({ node: ev.identity }, "node back in the fleet while its disable step waited: provisioning is off");
  }

  private async onNodeStartup(ev: NodeEvent): Promise<void> {
    if (this.stopping) return;
    const identity = ev.identity;
    // A startup event makes us act (abort a wait, retry a failed node): only a fresh one, signed by
    // the node's pinned key, newer than the last we took from it (a replayed event is refused).
    const stored = await this.store.get(identity).then((v) => ({ v }), () => undefined);
    if (stored) this.trust.fromRecord(identity, stored.v?.record);
    if (!this.trust.takeStartup(ev, Date.now())) return;
    const v = stored?.v;
    let verdict = onNodeStarted(v?.record, this.running.has(identity));
    if (verdict === "repeat-step") {
      // whatever the node was doing for us died with it (or, a Puppet run, carries on without it)
      if (this.driver.inFlight.nodeRestarted(identity)) return void this.log.warn({ node: identity }, "node restarted while being provisioned; repeating its current step");
      // no step waits on it: a discovery only looking at its record (a failed node: a CI run lost
      // its restart that way), or a run still preparing. Acted on as if nothing were in flight.
      verdict = onNodeStarted(v?.record, false);
    }
    switch (verdict) {
      case "repeat-step":
      case "ignore":
        return;
      case "requeue":
        requeueRestarted(v!.record, Date.now());
        if ((await this.store.compareAndSet(v!)) === undefined) return;
        break;
      case "provision":
        if (this.running.has(identity)) return; // a run still preparing carries on
        break;
    }
    this.log.info({ node: identity }, "node started; provisioning it now");
    this.enqueue(identity, "startup");
  }

  /** Records we own that were in progress when we stopped (crash or SIGKILL), and expired claims: take them up again. */
  private async resumeOwn(): Promise<void> {
    const now = Date.now();
    const records = await this.store.list(); // unreadable: scanned again next cycle
    this.lastResumeScan = now;
    for (const rec of records) {
      if (this.running.has(rec.identity) || this.parked.has(rec.identity) || this.waitingForMaster.has(rec.identity)) continue;
      const verdict = resumeVerdict(rec, this.cfg.id, now);
      if (verdict === "resume") {
        this.log.info({ node: rec.identity, stage: rec.stage ?? "none" }, "resuming unfinished provisioning");
        this.enqueue(rec.identity, "resume");
      } else if (verdict === "wait-for-master") this.parkForMaster(rec.identity, masterWaitUntil(rec, this.policy), rec.masterWait?.master, rec.claimExpires ?? 0);
      else if (verdict) this.park(rec.identity, verdict.waitUntil);
    }
  }

  /** A node waiting for a master (`master`, or any): taken up by checkMasterWaits, with no slot and no timer of its own. */
  private parkForMaster(identity: string, until: number, master: string | undefined, claimExpires: number): void {
    if (this.stopping) return;
    this.waitingForMaster.set(identity, { ...(master ? { master } : {}), until, claimExpires });
  }

  /**
   * One master discovery for every node waiting for a master: those whose master (or any, for
   * those with none) answers are taken up, those past their wait are taken up to be failed, and
   * the others' claims are renewed when half run out. Asked for while it runs, it runs once more.
   */
  private async checkMasterWaits(): Promise<void> {
    if (this.stopping || this.waitingForMaster.size === 0) return;
    if (this.masterCheck) {
      this.masterCheck.again = true;
      return;
    }
    const check = (this.masterCheck = { again: false });
    try {
      do {
        check.again = false;
        const answering = (await this.masters.discover()).map((m) => m.identity);
        const now = Date.now();
        const renew: string[] = [];
        for (const [identity, w] of [...this.waitingForMaster]) {
          if (this.stopping) return;
          switch (whileMasterAway(w.master, answering, now, w.until)) {
            case "back":
              this.log.info({ node: identity, master: w.master }, `${w.master ? `its master ${w.master}` : "a Puppet master"} answers; provisioning it on`);
              this.enqueue(identity, w.master ? `its master ${w.master} answers again` : "a Puppet master answers");
              break;
            case "give-up":
              this.enqueue(identity, "its wait for a master ended");
              break;
            case "keep-waiting":
              if (claimNeedsRenewal(w.claimExpires, now, this.cfg.lock_lease)) renew.push(identity);
          }
        }
        // nodes that began waiting together are renewed together: 64 writes at a time
        for (let i = 0; i < renew.length && !this.stopping; i += 64) await Promise.all(renew.slice(i, i + 64).map((id) => this.renewWaitClaim(id)));
      } while (check.again && !this.stopping);
    } catch (e) {
      this.log.warn({ err: (e as Error).message }, "could not look at the masters for the nodes waiting for one; next cycle");
    } finally {
      this.masterCheck = undefined;
    }
  }

  /** Our claim on a node waiting for a master, renewed (one compare-and-set; claim.ts says whether it still waits here). */
  private async renewWaitClaim(identity: string): Promise<void> {
    const w = this.waitingForMaster.get(identity);
    const v = w && !this.running.has(identity) ? await this.store.get(identity).catch(() => null) : null;
    if (v === null) return; // not waiting here, running, or the bucket unreachable: next cycle
    const next = renewedWaitClaim(v, this.cfg.id, Date.now(), this.cfg.lock_lease);
    const written = next ? await this.store.compareAndSet(next).catch(() => null) : undefined; // null: the bucket unreachable, next cycle
    if (written === undefined) this.waitingForMaster.delete(identity);
    else if (written !== null) w!.claimExpires = next!.record.claimExpires!;
  }

  /** A gone node: checked again now and then without holding a slot, provisioned on once it answers, failed when its wait ends. */
  private park(identity: string, until: number): void {
    clearTimeout(this.parked.get(identity)?.timer);
    if (this.stopping) return;
    const timer = setTimeout(() => void this.checkParked(identity, until), Math.max(0, Math.min(recheckMs(this.liveness), until - Date.now())));
    timer.unref();
    this.parked.set(identity, { until, timer });
  }

  private async checkParked(identity: string, until: number): Promise<void> {
    if (this.stopping || this.parked.get(identity)?.until !== until) return;
    // decommissioned, retried or taken up meanwhile: nothing to wait for
    const rec = await this.store.get(identity).then((v) => v?.record, () => undefined);
    if (!rec || rec.status !== "in_progress" || !rec.gone) {
      this.parked.delete(identity);
      return;
    }
    this.trust.fromRecord(identity, rec); // its answer must be signed by the key its record pinned
    const answered = await this.driver.answers(identity, Math.max(2000, this.liveness.checkS * 1000));
    switch (whileGone(answered, Date.now(), until)) {
      case "back":
        this.log.info({ node: identity }, "gone node answers again; provisioning it on");
        this.enqueue(identity, "back");
        break;
      case "give-up":
        this.enqueue(identity, "its wait for a gone node ended", { unanswered: true });
        break;
      case "keep-waiting":
        this.park(identity, until);
    }
  }

  enqueue(identity: string, why: string, o: { unanswered?: boolean } = {}): void {
    if (this.stopping || this.running.has(identity)) return;
    clearTimeout(this.parked.get(identity)?.timer);
    this.parked.delete(identity);
    this.waitingForMaster.delete(identity);
    this.metrics?.discovered.inc();
    const p = this.provision(identity, why, o)
      .catch((e) => this.log.error({ node: identity, err: (e as Error).message }, "provisioning crashed"))
      .finally(() => this.running.delete(identity));
    this.running.set(identity, p);
  }

  private async provision(identity: string, why: string, o: { unanswered?: boolean }): Promise<void> {
    try {
      await this.global.acquire(this.abort.signal);
    } catch {
      return; // stopping while queued: never held a slot
    }
    let end;
    try {
      end = await this.driver.provision(identity, why, o);
    } finally {
      this.global.release();
    }
    // its record could not be written: the next cycle's resume scan takes it up from the last one written
    if (end?.type === "leave" && end.unwritten) this.lastResumeScan = 0;
    else if (end?.type === "park" && end.awaiting === "master") this.parkForMaster(identity, end.until, end.master, Date.now() + this.cfg.lock_lease * 1000);
    else if (end?.type === "park") this.park(identity, end.until);
  }

  /** The nodes it holds a claim on (provisioning, parked while gone, waiting for a master) and how many wait for a slot. */
  claims(): { provisioning: string[]; queued: number; parked: string[]; waitingForMaster: string[] } {
    return { provisioning: [...this.running.keys()], queued: this.global.waiting, parked: [...this.parked.keys()], waitingForMaster: [...this.waitingForMaster.keys()] };
  }

  /** Stop taking nodes; let current steps finish within the grace period, then abandon them safely. */
  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    clearTimeout(this.loopTimer);
    for (const p of this.parked.values()) clearTimeout(p.timer);
    this.parked.clear();
    this.waitingForMaster.clear();
    this.wake?.();
    const all = Promise.allSettled([...this.running.values()]);
    const graceMs = this.cfg.shutdown_grace * 1000;
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([all.then(() => false), new Promise<boolean>((r) => (timer = setTimeout(() => r(true), graceMs)))]);
    clearTimeout(timer);
    if (timedOut) {
      this.log.warn({ nodes: [...this.running.keys()] }, "abandoning in-flight nodes; their locks are released and a restart resumes them");
      this.abort.abort(new Error("provisioner stopping"));
      await all;
    }
  }
}
