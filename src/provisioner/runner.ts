import { setMaxListeners } from "node:events";
import type { Logger } from "pino";
import { buildFilter } from "../filter/index.js";
import { Status } from "../protocol/status.js";
import type { Filter } from "../protocol/types.js";
import type { Collective, Role, StartupEvent } from "./collective.js";
import type { NodeKeySource } from "../protocol/node-keys.js";

/** A startup event further than this from our clock is refused (a replay of an old one). */
const STARTUP_EVENT_WINDOW_MS = 5 * 60_000;
import type { ProvisionerConfig } from "./config.js";
import { DeployLock } from "./deploy-lock.js";
import { decide, newRun, pastDisable, type EngineEvent, type EnginePolicy } from "./engine.js";
import type { ProvisionerMetrics } from "./metrics.js";
import { pickMaster } from "./pick-master.js";
import { Semaphore } from "./semaphore.js";
import { appendLog, type NodeRecord, type Stage } from "../protocol/provision-record.js";
import { claimRecord } from "./claim.js";
import { backoffMs, enabledStages } from "./stages.js";
import type { ProvisionState, Versioned } from "./state.js";
import { StepError, steps, type MasterInfo, type StepContext } from "./steps.js";

export { StepError };

// The provisioning daemon's edge: it finds nodes (discovery every `sleeptime`, startup events,
// its own unfinished records), holds the global and per-master slots, and carries out what the
// engine (engine.ts) decides for each node, through the Collective (collective.ts) and the
// state store. docs/provisioner.md#the-engine-map says which file decides what.

/** A node given up mid-way: we are stopping, or another provisioner took it over ("lost"). */
class Abandoned extends Error {
  constructor(message: string, readonly lost = false) {
    super(message);
  }
}

export interface ProvisionerEvents {
  onStage?(identity: string, stage: Stage | "failed" | "done"): void;
}

export class Provisioner {
  private readonly global: Semaphore;
  private readonly perMaster = new Map<string, Semaphore>();
  private readonly running = new Map<string, Promise<void>>();
  private readonly queued = new Set<string>();
  /** Per node being provisioned: aborted when the node restarts, so a request it lost is asked again at once. */
  private readonly nodeRestarts = new Map<string, AbortController>();
  private readonly abort = new AbortController();
  private stopping = false;
  private loopTimer?: NodeJS.Timeout;
  private wake?: () => void;
  private masters?: { at: number; list: MasterInfo[] };
  private notifiers?: { at: number; list: string[] };
  private lastResumeScan = 0;
  private readonly stages: Stage[];
  private readonly targetFilter: Filter;
  private readonly masterFilter: Filter;
  private readonly notifyFilter: Filter;
  private readonly policy: EnginePolicy;
  private readonly lock: DeployLock;

  constructor(
    private readonly cfg: ProvisionerConfig,
    private readonly collective: Collective,
    private readonly store: ProvisionState,
    private readonly log: Logger,
    private readonly metrics?: ProvisionerMetrics,
    private readonly events: ProvisionerEvents = {},
  ) {
    this.global = new Semaphore(cfg.concurrency);
    setMaxListeners(0, this.abort.signal); // every waiting node listens for shutdown
    this.stages = enabledStages(cfg.steps);
    this.policy = { stages: this.stages, attempts: cfg.retries.attempts, backoffS: cfg.retries.backoff, maxBackoffS: cfg.retries.max_backoff, puppetTimeoutS: cfg.puppet_timeout, lockLeaseS: cfg.lock_lease };
    this.lock = new DeployLock({ enabled: cfg.steps.lock, owner: cfg.id, lockLeaseS: cfg.lock_lease, puppetTimeoutS: cfg.puppet_timeout }, (id, action, data, o) => this.callNode(id, cfg.target.agent, action, data, o?.timeoutMs, o?.quiet));
    // Filters are parsed once at start: a bad one stops the daemon with a clear message.
    this.targetFilter = buildFilter({ select: cfg.target.filter ? [cfg.target.filter] : [], agent: [cfg.target.agent] });
    this.masterFilter = buildFilter({ select: cfg.master.filter ? [cfg.master.filter] : [], agent: [cfg.master.agent] });
    this.notifyFilter = buildFilter({ select: cfg.notify.filter ? [cfg.notify.filter] : [], agent: [cfg.notify.agent] });
  }

  /** Subscribe to startup events, resume our own unfinished work, then cycle until stopped. */
  async start(): Promise<void> {
    const stopListening = this.collective.onStartup((ev) => {
      this.masters = undefined; // whatever started may be a new master: look again before the next choice
      // A provisioned node announcing itself in the fleet is not a restart of a waiting node.
      const inTargets = !ev.collectives || ev.collectives.includes(this.collective.collectiveOf("target"));
      if (inTargets) void this.onNodeStartup(ev);
    });
    this.abort.signal.addEventListener("abort", () => stopListening(), { once: true });
    await this.resumeOwn();
    void this.loop();
  }

  /** --once: our unfinished nodes plus one discovery cycle, provisioned to the end. */
  async runOnce(): Promise<void> {
    await this.resumeOwn();
    await this.cycle();
    while (this.running.size) await Promise.allSettled([...this.running.values()]);
  }

  /** One discovery cycle: enqueue every node waiting to be provisioned. */
  async cycle(): Promise<string[]> {
    const found = await this.collective.discover("target", this.targetFilter, this.cfg.discovery_timeout * 1000);
    this.logDiscovery("nodes waiting to be provisioned", this.collective.collectiveOf("target"), this.cfg.target, found);
    for (const id of found) this.enqueue(id, "discovery");
    return found;
  }

  /** Every discovery at debug, empty ones included: "found nothing" is what an operator debugs most. */
  private logDiscovery(what: string, collective: string, role: { filter?: string; agent: string }, found: readonly string[]): void {
    this.log.debug({ collective, filter: role.filter || undefined, agent: role.agent, found: found.length, nodes: found.slice(0, 20) }, `discovery of ${what} in collective ${collective} (agent ${role.agent}${role.filter ? `, filter ${JSON.stringify(role.filter)}` : ""}): ${found.length} found`);
  }

  private async loop(): Promise<void> {
    while (!this.stopping) {
      try {
        this.masters = undefined; // masters are discovered afresh every cycle
        // Records whose owner died after disabling a node are invisible to discovery: take them over
        // here. Claims expire only after lock_lease, so scanning every record more often is waste.
        if (Date.now() - this.lastResumeScan >= (this.cfg.lock_lease * 1000) / 2) await this.resumeOwn();
        await this.cycle();
      } catch (e) {
        this.log.warn({ err: (e as Error).message }, "discovery cycle failed; trying again next cycle");
      }
      if (this.stopping) break;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        this.loopTimer = setTimeout(resolve, this.cfg.sleeptime * 1000);
      });
    }
  }

  private async onNodeStartup(ev: StartupEvent): Promise<void> {
    if (this.stopping) return;
    const identity = ev.identity;
    // A startup event makes us act (abort a wait, retry a failed node): only a fresh one, signed by
    // the node's pinned key, newer than the last we took from it (a replayed event is refused).
    // The record is the pin's source of truth: none (decommissioned) drops a pin held in memory.
    const stored = await this.store.get(identity).then((v) => ({ v }), () => undefined);
    if (stored && !stored.v) this.pins.delete(identity);
    else if (stored?.v?.record.nodeKey) this.pins.set(identity, stored.v.record.nodeKey);
    const now = Date.now();
    let stale: string | undefined;
    if (ev.time !== undefined && Math.abs(now - ev.time) > STARTUP_EVENT_WINDOW_MS) stale = `its time is more than ${STARTUP_EVENT_WINDOW_MS / 1000}s from ours (stale or replayed)`;
    else if (ev.time !== undefined && ev.time <= (this.lastStartup.get(identity) ?? -1)) stale = "it is not newer than the last one taken (replayed)";
    if (stale) {
      this.metrics?.refused.inc({ kind: "event" });
      this.log.warn({ node: identity, time: ev.time }, `refused a startup event claiming to be from ${identity}: ${stale}`);
      return;
    }
    try {
      // an unpinned node's signed event only brings it forward, as discovery would; it pins nothing
      if (this.pins.has(identity) || !ev.signedBy) this.authenticate(identity, ev.signedBy, "startup event");
    } catch {
      return; // logged and counted
    }
    if (ev.time !== undefined) this.lastStartup.set(identity, ev.time);
    const inFlight = this.nodeRestarts.get(identity);
    if (inFlight) {
      // The node restarted mid-step: whatever it was doing for us died with it (or, a Puppet run,
      // carries on without it). Stop waiting for that reply and ask again.
      this.log.warn({ node: identity }, "node restarted while being provisioned; repeating its current step");
      inFlight.abort();
      return;
    }
    const v = await this.store.get(identity).catch(() => undefined);
    if (v?.record.status === "failed") {
      // A restarted node gets a fresh round: operators fix the cause, then reboot or `provision retry`.
      v.record.status = "pending";
      v.record.attempts = 0;
      v.record.stage = undefined;
      appendLog(v.record, "node restarted; provisioning will be retried");
      if ((await this.store.compareAndSet(v)) === undefined) return;
    } else if (v?.record.status === "done") return;
    this.log.info({ node: identity }, "node started; provisioning it now");
    this.enqueue(identity, "startup");
  }

  /** Public keys pinned per node (also in each record's nodeKey). */
  private readonly pins = new Map<string, string>();
  /** The time of the last startup event taken per node: an older or equal one is a replay. */
  private readonly lastStartup = new Map<string, number>();

  /** Records we own that were in progress when we stopped (crash or SIGKILL): take them up again. */
  private async resumeOwn(): Promise<void> {
    const now = Date.now();
    this.lastResumeScan = now;
    for (const rec of await this.store.list()) {
      if (this.running.has(rec.identity) || this.queued.has(rec.identity)) continue;
      if (rec.status === "in_progress" && (rec.owner === this.cfg.id || (rec.claimExpires ?? 0) < now)) {
        this.log.info({ node: rec.identity, stage: rec.stage ?? "none" }, "resuming unfinished provisioning");
        this.enqueue(rec.identity, "resume");
      }
    }
  }

  enqueue(identity: string, why: string): void {
    if (this.stopping || this.running.has(identity) || this.queued.has(identity)) return;
    this.queued.add(identity);
    this.metrics?.discovered.inc();
    const p = this.provision(identity, why)
      .catch((e) => this.log.error({ node: identity, err: (e as Error).message }, "provisioning crashed"))
      .finally(() => {
        this.running.delete(identity);
        this.queued.delete(identity);
      });
    this.running.set(identity, p);
  }

  get inFlight(): number {
    return this.running.size;
  }

  /** Stop taking nodes; let current steps finish within the grace period, then abandon them safely. */
  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    clearTimeout(this.loopTimer);
    this.wake?.();
    const all = Promise.allSettled([...this.running.values()]);
    const graceMs = this.cfg.shutdown_grace * 1000;
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([all.then(() => false), new Promise<boolean>((r) => (timer = setTimeout(() => r(true), graceMs)))]);
    clearTimeout(timer);
    if (timedOut) {
      this.log.warn({ nodes: [...this.running.keys()] }, "abandoning in-flight nodes; their locks are released and a restart resumes them");
      this.abort.abort(new Abandoned("provisioner stopping"));
      await all;
    }
  }

  // ---- one node: the edge carrying out the engine's actions ----

  private async provision(identity: string, why: string): Promise<void> {
    try {
      await this.global.acquire(this.abort.signal);
    } catch {
      return; // stopping while queued: never held a slot
    }
    let heldMaster: Semaphore | undefined;
    let v: Versioned | undefined;
    try {
      const claimed = await this.claim(identity);
      if (!claimed) return;
      v = claimed.v;
      const rec = v.record;
      this.metrics?.inFlight.inc();
      appendLog(rec, `provisioning started (${why})`);
      // A node already disabled is provisioned: under isolation it has left the target collective,
      // and what remains (notify) needs nothing from it, so it is not asked.
      const disabled = pastDisable(rec);
      let master: MasterInfo;
      if (disabled) master = { identity: rec.master!, address: rec.masterAddress!, facts: {} };
      else {
        const facts = await this.inventory(identity);
        rec.nodeAddress = stringFact(facts, this.cfg.target.ipaddress_fact);
        if (!rec.nodeAddress) throw new StepError(`node has no '${this.cfg.target.ipaddress_fact}' fact (target.ipaddress_fact)`);
        master = await this.chooseMaster(identity, facts, rec.master);
        rec.master = master.identity;
        rec.masterAddress = master.address;
      }
      await this.persist(v);
      const masterSlot = this.masterSemaphore(master.identity);
      await masterSlot.acquire(this.abort.signal);
      heldMaster = masterSlot; // only a slot actually held is released below

      if (claimed.takenOverFrom && this.lock.takeoverNeeded(rec, disabled)) await this.lock.takeover(rec);
      await this.drive(v, master);
    } catch (e) {
      if (!v) throw e;
      await this.handleFailure(v, e as Error);
    } finally {
      this.nodeRestarts.delete(identity);
      heldMaster?.release();
      this.global.release();
      if (v) this.metrics?.inFlight.dec();
    }
  }

  /** Run the engine for one node: perform each action it returns, feed back what happened. */
  private async drive(v: Versioned, master: MasterInfo): Promise<void> {
    const rec = v.record;
    const run = newRun(rec, this.policy);
    let action = decide(run, { type: "begin" }, this.policy, Date.now());
    for (;;) {
      let ev: EngineEvent;
      switch (action.type) {
        case "probe-cert":
          ev = { type: "cert-probed", hasCert: await this.hasCert(rec.identity) };
          break;
        case "renew-lock":
          ev = { type: "lock-renewed", expires: await this.lock.renew(rec) };
          break;
        case "persist":
          ev = (await this.save(v, action.leaseS)) ? { type: "persisted" } : { type: "lost" };
          break;
        case "run":
          if (action.first) this.events.onStage?.(rec.identity, action.stage);
          ev = await this.runStep(action.stage, v, master);
          break;
        case "wait":
          if (action.retry) {
            this.metrics?.retries.inc({ step: action.retry.stage });
            this.log.warn({ node: rec.identity, stage: action.retry.stage, attempt: action.retry.attempt, retryInMs: action.ms, err: action.retry.error }, "step failed; retrying");
          }
          await sleep(action.ms, this.abort.signal); // backoff, or the node's busy Puppet run ending on its own
          ev = this.abort.signal.aborted ? { type: "stopping" } : { type: "waited" };
          break;
        case "done":
          appendLog(rec, `provisioned against ${master.identity} in ${((rec.finishedAt! - (rec.startedAt ?? rec.finishedAt!)) / 1000).toFixed(1)}s`);
          await this.persist(v);
          this.metrics?.provisioned.inc();
          this.events.onStage?.(rec.identity, "done");
          this.log.info({ node: rec.identity, master: master.identity }, "node provisioned");
          return;
        case "fail":
          throw new StepError(action.error);
        case "abandon":
          throw new Abandoned(action.reason);
        case "leave":
          throw new Abandoned(action.reason, true);
      }
      action = decide(run, ev, this.policy, Date.now());
    }
  }

  /** One try of one step, as an engine event. */
  private async runStep(stage: Stage, v: Versioned, master: MasterInfo): Promise<EngineEvent> {
    const rec = v.record;
    if (this.abort.signal.aborted) return { type: "stopping" };
    const restart = new AbortController();
    this.nodeRestarts.set(rec.identity, restart);
    const t0 = performance.now();
    try {
      const note = await steps[stage](this.stepContext(rec, master));
      const ms = performance.now() - t0;
      // The certificate now signed belongs to the holder of the pinned key: say so in the directory.
      const pin = this.pins.get(rec.identity);
      if (stage === "sign_csr" && pin) this.publishKey(rec.identity, pin, "certified", rec.fingerprint);
      this.metrics?.stepDuration.observe({ step: stage }, ms / 1000);
      return { type: "step-ok", ms, note: note || undefined };
    } catch (e) {
      if (e instanceof Abandoned || this.abort.signal.aborted) return { type: "stopping" };
      return { type: "step-failed", error: (e as Error).message, busy: e instanceof StepError && e.data.retryable === true, nodeRestarted: restart.signal.aborted };
    }
  }

  private stepContext(rec: NodeRecord, master: MasterInfo): StepContext {
    const id = rec.identity;
    return {
      rec,
      master,
      lock: this.lock,
      puppetTimeoutMs: this.cfg.puppet_timeout * 1000,
      node: (action, data, timeoutMs) => this.callNode(id, this.cfg.target.agent, action, data, timeoutMs),
      onMaster: (m, action, data) => this.callNode(m, this.cfg.master.agent, action, data, undefined, false, "master"),
      onAllMasters: async (action, data) => {
        const masters = await this.discoverMasters();
        const replies = await this.collective.call("master", this.cfg.master.agent, action, data, { nodes: masters.map((m) => m.identity), timeoutMs: this.cfg.step_timeout * 1000, signal: this.abort.signal });
        const bad = masters.filter((m) => !replies.some((r) => r.sender === m.identity && r.statuscode === Status.OK)).map((m) => m.identity);
        return { masters: masters.length, bad, firstError: replies.find((r) => r.statuscode !== Status.OK)?.statusmsg };
      },
      notify: (subject, message, key) => this.notify(subject, message, key),
    };
  }

  /** Take ownership in KV with compare-and-set; false when done, failed or owned by a live provisioner. */
  private async claim(identity: string): Promise<{ v: Versioned; takenOverFrom?: string } | undefined> {
    const now = Date.now();
    const existing = await this.store.get(identity);
    const c = claimRecord(existing, identity, this.cfg.id, now, this.cfg.lock_lease);
    if (!c) return undefined;
    // No record: never provisioned, or decommissioned since (a new machine may carry a new key).
    if (!existing) this.pins.delete(identity);
    if (c.v.record.nodeKey) this.pins.set(identity, c.v.record.nodeKey);
    else c.v.record.nodeKey = this.pins.get(identity);
    if ((await this.store.compareAndSet(c.v)) === undefined) {
      this.log.debug({ node: identity }, "another provisioner claimed this node first");
      return undefined;
    }
    return c;
  }

  /** Write the record, renewing our claim for `leaseSeconds`; false when someone else wrote first. */
  private async save(v: Versioned, leaseSeconds = this.cfg.lock_lease): Promise<boolean> {
    v.record.nodeKey ??= this.pins.get(v.record.identity);
    v.record.claimExpires = v.record.status === "in_progress" ? Date.now() + leaseSeconds * 1000 : undefined;
    return (await this.store.compareAndSet(v)) !== undefined;
  }

  private async persist(v: Versioned, leaseSeconds = this.cfg.lock_lease): Promise<void> {
    if (!(await this.save(v, leaseSeconds))) throw new Abandoned(`state of ${v.record.identity} was changed by someone else; leaving the node to them`, true);
  }

  private async hasCert(id: string): Promise<boolean> {
    const d = await this.askAgain(() => this.callNode(id, this.cfg.target.agent, "has_cert", {}));
    return d.has_cert === true;
  }

  private async handleFailure(v: Versioned, e: Error): Promise<void> {
    const rec = v.record;
    if (e instanceof Abandoned && e.lost) {
      // Another provisioner owns the node now: its record and its lock are not ours to touch.
      this.log.warn({ node: rec.identity }, e.message);
      return;
    }
    if (e instanceof Abandoned || this.abort.signal.aborted) {
      // Leave the record in progress (a restart resumes it) but release the node's lock now.
      appendLog(rec, `abandoned at ${rec.current ?? "start"}: ${e.message}`);
      rec.claimExpires = 0;
      await this.store.compareAndSet(v).catch(() => undefined);
      await this.releaseLock(rec);
      return;
    }
    // Release the lock and tell the admins first, then record the failure: a node that reads
    // "failed" is unlocked and its admins have been told (or the log says why not).
    rec.lastError = rec.lastError ?? e.message;
    this.log.error({ node: rec.identity, stage: rec.current, err: e.message }, "provisioning failed; retry with `muster provision retry` or restart the node");
    await this.releaseLock(rec);
    if (this.cfg.steps.notify) {
      const body = `muster could not provision ${rec.identity}.\nStep: ${rec.current ?? "start"}\nError: ${rec.lastError}\n\nRecent log:\n${rec.log.slice(-10).join("\n")}`;
      await this.notify(`Provisioning ${rec.identity} FAILED`, body, `${rec.identity}#${rec.rounds}#failed`).catch((ne) => {
        appendLog(rec, `could not notify the admins: ${(ne as Error).message}`);
        this.log.error({ err: (ne as Error).message }, "could not notify the admins of a failure");
      });
    }
    rec.status = "failed";
    rec.finishedAt = Date.now();
    rec.claimExpires = undefined;
    appendLog(rec, `failed: ${e.message}`);
    await this.store.compareAndSet(v).catch(() => undefined);
    this.metrics?.failed.inc();
    this.events.onStage?.(rec.identity, "failed");
  }

  private async releaseLock(rec: NodeRecord): Promise<void> {
    await this.lock.release(rec, (e) => this.log.warn({ node: rec.identity, err: e.message }, "could not release the node's lock; it expires with its lease"));
  }

  // ---- collective helpers ----

  /**
   * A request published while a broker fails over is simply lost (core NATS is at-most-once). For
   * a question that changes nothing on the node (inventory, has_cert), ask again, up to
   * retries.attempts times, rather than failing the node.
   */
  private async askAgain<T>(ask: () => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await ask();
      } catch (e) {
        if (attempt >= this.cfg.retries.attempts || this.abort.signal.aborted || !/no reply/.test((e as Error).message)) throw e;
      }
    }
  }

  private async inventory(id: string): Promise<Record<string, unknown>> {
    const d = await this.askAgain(() => this.callNode(id, "rpcutil", "inventory", {}, Math.min(10_000, this.cfg.step_timeout * 1000)));
    return (d.facts as Record<string, unknown>) ?? {};
  }

  private masterSemaphore(master: string): Semaphore {
    let s = this.perMaster.get(master);
    if (!s) this.perMaster.set(master, (s = new Semaphore(this.cfg.per_master_limit)));
    return s;
  }

  /**
   * All masters with their facts. Cached briefly (at most one cycle, at most 5 s) and dropped on
   * any startup event, so a master that appears is used without a restart.
   */
  async discoverMasters(): Promise<MasterInfo[]> {
    if (this.masters && Date.now() - this.masters.at < Math.min(this.cfg.sleeptime, 5) * 1000) return this.masters.list;
    const ids = await this.collective.discover("master", this.masterFilter, this.cfg.discovery_timeout * 1000);
    this.logDiscovery("Puppet masters", this.collective.collectiveOf("master"), this.cfg.master, ids);
    const list: MasterInfo[] = [];
    if (ids.length) {
      const replies = await this.collective.call("master", "rpcutil", "inventory", {}, { nodes: ids, timeoutMs: 10_000 });
      for (const r of replies) {
        if (r.statuscode !== Status.OK) continue;
        const facts = (r.data.facts as Record<string, unknown>) ?? {};
        const address = stringFact(facts, this.cfg.master.ipaddress_fact);
        if (!address) {
          this.log.warn({ master: r.sender, fact: this.cfg.master.ipaddress_fact }, "master has no address fact; not used");
          continue;
        }
        const port = Number(facts.puppetserver_port);
        list.push({ identity: r.sender, facts, address, port: Number.isInteger(port) && port > 0 ? port : undefined });
      }
    }
    if (list.length) this.masters = { at: Date.now(), list }; // an empty answer (say, mid-failover) is asked again next time
    return list;
  }

  private async chooseMaster(id: string, facts: Record<string, unknown>, previous: string | undefined): Promise<MasterInfo> {
    let masters = await this.discoverMasters();
    // No master at all is more likely a discovery lost in a broker failover than a fleet without
    // masters: ask again with backoff before failing the node.
    for (let attempt = 1; masters.length === 0 && attempt < this.cfg.retries.attempts && !this.abort.signal.aborted; attempt++) {
      await sleep(backoffMs(attempt, this.cfg.retries.backoff, this.cfg.retries.max_backoff), this.abort.signal);
      masters = await this.discoverMasters();
    }
    // A node resumed after a restart keeps its master: its certificate may already be signed there.
    const kept = previous ? masters.find((m) => m.identity === previous) : undefined;
    if (kept) return kept;
    const choice = pickMaster(this.cfg.master.criteria, facts, masters);
    if (!choice) throw new StepError(`no Puppet master found (filter: agent ${this.cfg.master.agent}${this.cfg.master.filter ? ` and ${this.cfg.master.filter}` : ""})`);
    this.log.info({ node: id, master: choice.master.identity, criterion: choice.criterion ?? "first master", value: choice.value }, "picked master");
    return choice.master as MasterInfo;
  }

  /** One action on one node. Steps stop waiting when the provisioner abandons them; lock releases do not. */
  private async callNode(id: string, agent: string, action: string, data: Record<string, unknown>, timeoutMs = this.cfg.step_timeout * 1000, quiet = false, role: Role = "target"): Promise<Record<string, unknown>> {
    let replies;
    const restart = role === "target" ? this.nodeRestarts.get(id)?.signal : undefined;
    const signal = quiet ? undefined : restart ? AbortSignal.any([this.abort.signal, restart]) : this.abort.signal;
    try {
      replies = await this.collective.call(role, agent, action, data, { nodes: [id], timeoutMs, signal });
    } catch (e) {
      throw new StepError(`${agent}#${action} on ${id}: ${(e as Error).message}`);
    }
    const r = replies[0];
    if (!r) throw new StepError(`${agent}#${action}: no reply from ${id} within ${Math.round(timeoutMs / 1000)}s`);
    if (role === "target") this.authenticate(id, r.signedBy, `${agent}#${action} reply`);
    if (r.statuscode !== Status.OK) {
      const detail = Array.isArray(r.data.failed_resources) && r.data.failed_resources.length ? ` (failed: ${(r.data.failed_resources as unknown[]).slice(0, 5).map(String).join(", ")})` : "";
      if (!quiet) this.log.debug({ node: id, agent, action, status: r.statuscode, msg: r.statusmsg }, "action failed");
      throw new StepError(`${agent}#${action} on ${id}: ${r.statusmsg}${detail}`, r.data);
    }
    return r.data;
  }

  /**
   * A waiting node's reply or event is acted on only when it is signed, and by the key pinned for
   * that node. The first signed reply to a directed request pins the key (only the node can read
   * its own subject under per-node bootstrap credentials); the record keeps it. Throws StepError.
   */
  private authenticate(id: string, signedBy: string | undefined, what: string): void {
    const pinned = this.pins.get(id);
    let why: string | undefined;
    if (!signedBy) why = "it is unsigned or its signature does not verify";
    else if (pinned && signedBy !== pinned) why = `it is signed by ${signedBy}, not by the key pinned for ${id} (${pinned})`;
    if (why) {
      this.metrics?.refused.inc({ kind: what.endsWith("event") ? "event" : "reply" });
      this.log.warn({ node: id, what, signedBy, pinned }, `refused a ${what} claiming to be from ${id}: ${why}`);
      throw new StepError(`${what} from ${id} refused: ${why}`);
    }
    if (!pinned) {
      this.pins.set(id, signedBy!);
      this.log.info({ node: id, pubkey: signedBy }, "pinned the node's key");
      this.publishKey(id, signedBy!, "pinned");
    }
  }

  /** Vouch for the node's key in the directory clients check replies against; a failure only delays that. */
  private publishKey(identity: string, pubkey: string, source: NodeKeySource, fingerprint?: string): void {
    if (!this.collective.publishNodeKey) return;
    this.collective.publishNodeKey({ identity, pubkey, source, time: Date.now(), by: this.cfg.id, ...(fingerprint ? { fingerprint } : {}) }).then(
      () => this.log.debug({ node: identity, pubkey, source }, "published the node's key"),
      (e: unknown) => this.log.warn({ node: identity, err: (e as Error).message }, "could not publish the node's key to the key directory"),
    );
  }

  /** Send to exactly one notifier: the first (by identity) of those discovered. */
  /** `key` makes the notifier deliver once however often it is asked (retries, a second provisioner). */
  private async notify(subject: string, message: string, key: string): Promise<void> {
    // Discovered like the masters: at most once per cycle (5 s), not once per node.
    if (!this.notifiers || Date.now() - this.notifiers.at >= Math.min(this.cfg.sleeptime, 5) * 1000) {
      this.notifiers = { at: Date.now(), list: await this.collective.discover("notify", this.notifyFilter, this.cfg.discovery_timeout * 1000) };
      this.logDiscovery("notifiers", this.collective.collectiveOf("notify"), this.cfg.notify, this.notifiers.list);
    }
    const found = this.notifiers.list;
    const notifier = found[0];
    if (!notifier) throw new StepError(`no notifier found (agent ${this.cfg.notify.agent}${this.cfg.notify.filter ? `, filter ${this.cfg.notify.filter}` : ""})`);
    if (found.length > 1) this.log.debug({ using: notifier, found: found.length }, "several notifiers; using the first");
    await this.callNode(notifier, this.cfg.notify.agent, "send", { subject, message, dedupe_key: key, ...(this.cfg.notify.targets.length ? { recipients: this.cfg.notify.targets } : {}) }, undefined, false, "notify");
  }
}

function stringFact(facts: Record<string, unknown>, name: string): string | undefined {
  const v = facts[name];
  return typeof v === "string" && v ? v : typeof v === "number" ? String(v) : undefined;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(t);
      resolve();
    };
    const t = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
