import type { Logger } from "pino";
import { provisionDDL } from "../agents/provision/ddl.js";
import { puppetcaDDL } from "../agents/puppetca/ddl.js";
import { rpcutilDDL } from "../agents/rpcutil/ddl.js";
import type { ActionName, ActionOutput, CallInput } from "../ddl/types.js";
import { appendLog, type Stage } from "../protocol/provision-record.js";
import { claimRecord, writeWindowMs } from "./claim.js";
import { callOne, type Collective } from "./collective.js";
import type { ProvisionerConfig } from "./config.js";
import { DeployLock } from "./deploy-lock.js";
import { decide, newRun, type EngineAction, type EngineEvent, type EnginePolicy, type NodeRun } from "./engine.js";
import { askAgain, type LivenessPolicy } from "./liveness.js";
import { MasterAway, sleep, stringFact, type Masters } from "./masters.js";
import type { ProvisionerMetrics } from "./metrics.js";
import type { Semaphore } from "../semaphore.js";
import { StepsInFlight } from "./in-flight.js";
import { MASTER_STAGES, NODE_STAGES, pastDisable } from "./stages.js";
import { watchStep, type StepProbes } from "./step-watch.js";
import type { ProvisionState, Versioned } from "./state.js";
import { StepError, steps, type MasterInfo, type StepContext } from "./steps.js";
import type { NodeTrust } from "./trust.js";

// One node, at the edge: claim its record, find its facts and master, then carry out what the
// engine (engine.ts) decides, action by action, feeding back what happened, until the engine says
// the run is over. Every decision is the engine's; this file only does I/O and times it.

export interface ProvisionerEvents {
  onStage?(identity: string, stage: Stage | "failed" | "done"): void;
}

export interface DriverDeps {
  cfg: ProvisionerConfig;
  policy: EnginePolicy;
  liveness: LivenessPolicy;
  collective: Collective;
  store: ProvisionState;
  trust: NodeTrust;
  masters: Masters;
  log: Logger;
  metrics?: ProvisionerMetrics;
  events: ProvisionerEvents;
  /** Aborted when the provisioner gives up its in-flight work (SIGTERM past the grace). */
  stopping: AbortSignal;
  /** The slot of a master (per_master_limit). */
  masterSlot(master: string): Semaphore;
}

/** The target agent: the provision DDL, under the name the config gives it. */
const provisionAgent = (cfg: ProvisionerConfig) => ({ ddl: provisionDDL, name: cfg.target.agent });

export class Driver {
  readonly lock: DeployLock;
  /** Each node's step in flight: what the scheduler's events end early (in-flight.ts). */
  readonly inFlight = new StepsInFlight();

  constructor(private readonly d: DriverDeps) {
    const { cfg } = d;
    this.lock = new DeployLock({ enabled: cfg.steps.lock, owner: cfg.id, lockLeaseS: cfg.lock_lease, puppetTimeoutS: cfg.puppet_timeout }, (id, action, input, o) => this.ask(id, action, input, o?.timeoutMs, o?.quiet));
  }

  /** One liveness check (rpcutil#ping, signed by the node's pinned key): resolves true when the node answered. */
  async answers(identity: string, timeoutMs: number): Promise<boolean> {
    const check = (r: { signedBy?: string }) => this.d.trust.authenticate(identity, r.signedBy, "rpcutil#ping reply");
    return callOne(this.d.collective, "target", { ddl: rpcutilDDL, name: "rpcutil" }, "ping", {}, identity, { timeoutMs, signal: this.d.stopping, check }).then(
      () => true,
      () => false,
    );
  }

  /** Provision one node (the caller holds a global slot); resolves with how the engine's run ended (undefined: not ours to run). */
  async provision(identity: string, why: string, o: { unanswered?: boolean } = {}): Promise<EngineAction | undefined> {
    const { store, trust, cfg, masters } = this.d;
    const existing = await store.get(identity);
    // mid-round (a resume, a parked node taken up again): its master is kept, waited for if away
    const midRound = existing?.record.status === "in_progress";
    const c = claimRecord(existing, identity, cfg.id, Date.now(), cfg.lock_lease);
    if (!c) return undefined;
    trust.fromRecord(identity, existing?.record);
    const claimed = await store.compareAndSet(c.v).catch((e: unknown) => e as Error);
    if (claimed instanceof Error) {
      // the bucket did not take the claim: taken up again from its record once it answers
      this.d.log.warn({ node: identity, err: claimed.message }, "could not claim the node: the state bucket did not take the write; trying again next cycle");
      return { type: "leave", reason: `the state bucket did not take the claim (${claimed.message})`, unwritten: true };
    }
    if (claimed === undefined) {
      this.d.log.debug({ node: identity }, "another provisioner claimed this node first");
      return undefined;
    }
    const v = c.v;
    const rec = v.record;
    let held: Semaphore | undefined;
    let master: MasterInfo = { identity: rec.master ?? "", address: rec.masterAddress ?? "", facts: {} };
    let first: EngineEvent = { type: "begin" };
    this.d.metrics?.inFlight.inc();
    try {
      appendLog(rec, `provisioning started (${why})`);
      if (o.unanswered && rec.gone) first = { type: "still-gone" }; // the engine decides: wait on, or fail
      else {
        try {
          // A node already disabled is provisioned: under isolation it has left the target collective,
          // and what remains (notify) needs nothing from it, so it is not asked.
          const disabled = pastDisable(rec);
          if (!disabled) {
            const facts = await this.inventory(identity);
            rec.nodeAddress = stringFact(facts, cfg.target.ipaddress_fact);
            if (!rec.nodeAddress) throw new StepError(`node has no '${cfg.target.ipaddress_fact}' fact (target.ipaddress_fact)`);
            master = await masters.choose(identity, facts, rec, midRound);
            rec.master = master.identity;
            rec.masterAddress = master.address;
          }
          const saved = await this.save(v, cfg.lock_lease).catch((e: unknown) => e as Error);
          // unwritten (the bucket did not answer): left for a resume, not failed and told to the admins
          if (saved !== true) first = saved === false ? { type: "lost" } : { type: "lost", error: saved.message };
          else {
            const slot = this.d.masterSlot(master.identity);
            await slot.acquire(this.d.stopping);
            held = slot; // only a slot actually held is released below
            if (c.takenOverFrom && this.lock.takeoverNeeded(rec, disabled)) await this.lock.takeover(rec);
          }
        } catch (e) {
          if (this.d.stopping.aborted) first = { type: "stopping" };
          else if (e instanceof MasterAway) first = { type: "master-away", ...(e.master ? { master: e.master } : {}), looking: e.looking, ...(e.pick ? { criterion: e.pick.criterion, value: e.pick.value } : {}) };
          else first = { type: "prepare-failed", error: (e as Error).message };
        }
      }
      return await this.drive(v, newRun(rec, this.d.policy), master, first);
    } finally {
      this.inFlight.delete(identity);
      held?.release();
      this.d.metrics?.inFlight.dec();
    }
  }

  /** Run the engine: perform each action it returns, feed back what happened, until it is over; resolves with the last. */
  private async drive(v: Versioned, run: NodeRun, master: MasterInfo, first: EngineEvent): Promise<EngineAction> {
    const { log, metrics, events, policy } = this.d;
    const rec = v.record;
    let action = decide(run, first, policy, Date.now());
    for (;;) {
      const ev = await this.perform(action, v, master);
      if (!ev) break;
      action = decide(run, ev, policy, Date.now());
    }
    switch (action.type) {
      case "done":
        metrics?.provisioned.inc();
        events.onStage?.(rec.identity, "done");
        log.info({ node: rec.identity, master: master.identity }, "node provisioned");
        break;
      case "fail":
        log.error({ node: rec.identity, stage: rec.current, err: action.error }, "provisioning failed; retry with `muster provision retry` or restart the node");
        metrics?.failed.inc();
        events.onStage?.(rec.identity, "failed");
        break;
      case "abandon":
        log.warn({ node: rec.identity, stage: rec.current }, `abandoned: ${action.reason}; its lock is released and a restart resumes it`);
        break;
      case "leave":
        log.warn({ node: rec.identity }, action.reason);
        break;
      case "park":
        if (action.awaiting === "master") log.warn({ node: rec.identity, stage: rec.current, master: action.master }, `${rec.masterWait?.reason}; ${Number.isFinite(action.until) ? `until ${new Date(action.until).toISOString()}` : "with no limit"}, holding no slot`);
        else log.warn({ node: rec.identity, stage: rec.current, gone: rec.gone }, `node gone (${rec.gone?.reason}); waiting for it until ${new Date(action.until).toISOString()}`);
        break;
    }
    return action;
  }

  /** One action carried out; its event, or undefined when the action ends the run. */
  private async perform(action: EngineAction, v: Versioned, master: MasterInfo): Promise<EngineEvent | undefined> {
    const { log, metrics, events, masters } = this.d;
    const rec = v.record;
    switch (action.type) {
      case "probe-cert":
        try {
          return { type: "cert-probed", hasCert: (await this.askAgain(() => this.ask(rec.identity, "has_cert", {}))).has_cert === true };
        } catch (e) {
          return this.d.stopping.aborted ? { type: "stopping" } : { type: "prepare-failed", error: (e as Error).message };
        }
      case "renew-lock":
        try {
          return { type: "lock-renewed", expires: await this.lock.renew(rec) };
        } catch (e) {
          return this.d.stopping.aborted ? { type: "stopping" } : { type: "prepare-failed", error: (e as Error).message };
        }
      case "persist":
        // not taken by the bucket (rejected): lost with the error, which the engine leaves for a resume
        return this.save(v, action.leaseS).then<EngineEvent, EngineEvent>((ok) => (ok ? { type: "persisted" } : { type: "lost" }), (e: unknown) => ({ type: "lost", error: (e as Error).message }));
      case "run":
        if (action.first) events.onStage?.(rec.identity, action.stage);
        return this.runStep(action.stage, v, master);
      case "wait":
        if (action.retry) {
          metrics?.retries.inc({ step: action.retry.stage });
          log.warn({ node: rec.identity, stage: action.retry.stage, attempt: action.retry.attempt, retryInMs: action.ms, err: action.retry.error }, "step failed; retrying");
        }
        await sleep(action.ms, this.d.stopping); // backoff, or the node's busy Puppet run ending on its own
        return this.d.stopping.aborted ? { type: "stopping" } : { type: "waited" };
      case "release-lock":
        await this.lock.release(rec, (e) => log.warn({ node: rec.identity, err: e.message }, "could not release the node's lock; it expires with its lease"));
        return { type: "lock-released" };
      case "notify":
        try {
          await masters.notify(action.subject, action.message, action.key);
          return { type: "notified" };
        } catch (e) {
          log.error({ err: (e as Error).message }, "could not notify the admins of a failure");
          return { type: "notified", error: (e as Error).message };
        }
      default:
        return undefined; // terminal
    }
  }

  /** One try of one step, as an engine event. */
  private async runStep(stage: Stage, v: Versioned, master: MasterInfo): Promise<EngineEvent> {
    const rec = v.record;
    if (this.d.stopping.aborted) return { type: "stopping" };
    const inStep = this.inFlight.start(rec, stage);
    const needsMaster = MASTER_STAGES.has(stage) && master.identity !== "";
    const probes: StepProbes = {
      ...(NODE_STAGES.has(stage) ? { node: () => this.answers(rec.identity, this.d.liveness.checkS * 1000) } : {}),
      // the provisioner's own questions to the master (clean, sign) stop waiting when it is away;
      // the node's Puppet, talking to it (CSR, runs), fails on its own, so a healthy run is never cut
      // short because the master's muster server alone stopped answering
      ...(needsMaster && !NODE_STAGES.has(stage) ? { master: { name: master.identity, answers: () => this.d.masters.answers(master.identity).catch(() => true) } } : {}),
    };
    const stopWatching = watchStep(this.d.liveness, probes, (what, reason) => this.inFlight.get(rec.identity) === inStep && this.inFlight.end(rec.identity, what === "node" ? { gone: reason } : { masterAway: reason }));
    const t0 = performance.now();
    try {
      const note = await steps[stage](this.stepContext(v, master));
      const ms = performance.now() - t0;
      if (stage === "sign_csr") this.d.trust.certified(rec.identity, rec.fingerprint);
      this.d.metrics?.stepDuration.observe({ step: stage }, ms / 1000);
      return { type: "step-ok", ms, note: note || undefined };
    } catch (e) {
      if (this.d.stopping.aborted) return { type: "stopping" };
      const busy = e instanceof StepError && e.data.retryable === true;
      const nodeRestarted = inStep.controller.signal.aborted && !inStep.gone && !inStep.masterAway && !inStep.inFleet;
      // A step that needs the master failed: the master's doing if it no longer answers discovery
      // right after (or the watch already found it away), else the node's, as before.
      const masterAway = needsMaster && !inStep.gone && !nodeRestarted && !busy && (inStep.masterAway !== undefined || !(await this.d.masters.answers(master.identity, { fresh: true }).catch(() => true)));
      const error = inStep.masterAway ?? (e as Error).message;
      return { type: "step-failed", error, busy, nodeRestarted, gone: inStep.gone, ...(masterAway ? { masterAway } : {}), ...(inStep.inFleet ? { inFleet: true } : {}) };
    } finally {
      stopWatching();
    }
  }

  private stepContext(v: Versioned, master: MasterInfo): StepContext {
    const { cfg, collective, masters, stopping } = this.d;
    const rec = v.record;
    const ca = { ddl: puppetcaDDL, name: cfg.master.agent };
    // the master's answers are waited for until the node restarts or goes away, or the master does
    const inStep = this.inFlight.get(rec.identity)?.controller.signal;
    const signal = inStep ? AbortSignal.any([stopping, inStep]) : stopping;
    return {
      rec,
      master,
      lock: this.lock,
      puppetTimeoutMs: cfg.puppet_timeout * 1000,
      node: (action, input, o) => this.ask(rec.identity, action, input, o?.timeoutMs),
      ca: (m) => (action, input, o) => callOne(collective, "master", ca, action, input, m, { timeoutMs: o?.timeoutMs ?? cfg.step_timeout * 1000, signal }),
      cleanEverywhere: (certname) => masters.onAll(certname, master.identity, inStep),
      notify: (subject, message, key) => masters.notify(subject, message, key),
    };
  }

  /**
   * One action of the provision agent on a waiting node: the reply must be signed by the node's
   * pinned key (trust.ts). A step stops waiting when the node restarts or we stop; `quiet` calls
   * (lock releases) do not, and their failures are not logged.
   */
  private ask<A extends ActionName<typeof provisionDDL>>(id: string, action: A, input: CallInput<typeof provisionDDL, A>, timeoutMs = this.d.cfg.step_timeout * 1000, quiet = false): Promise<ActionOutput<typeof provisionDDL, A>> {
    const restart = this.inFlight.get(id)?.controller.signal;
    const signal = quiet ? undefined : restart ? AbortSignal.any([this.d.stopping, restart]) : this.d.stopping;
    return callOne(this.d.collective, "target", provisionAgent(this.d.cfg), action, input, id, {
      timeoutMs,
      signal,
      check: (r) => this.d.trust.authenticate(id, r.signedBy, `${this.d.cfg.target.agent}#${action} reply`),
      onFailed: (r) => !quiet && this.d.log.debug({ node: id, action, status: r.statuscode, msg: r.statusmsg }, "action failed"),
    });
  }

  /** A question that changes nothing on the node, asked again while its reply is lost (the engine's askAgain). */
  private async askAgain<T>(ask: () => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await ask();
      } catch (e) {
        if (this.d.stopping.aborted || !askAgain(attempt, (e as Error).message, this.d.policy)) throw e;
      }
    }
  }

  private async inventory(id: string): Promise<Record<string, unknown>> {
    const { collective, cfg } = this.d;
    const d = await this.askAgain(() =>
      callOne(collective, "target", { ddl: rpcutilDDL, name: "rpcutil" }, "inventory", {}, id, {
        timeoutMs: Math.min(10_000, cfg.step_timeout * 1000),
        signal: this.d.stopping,
        check: (r) => this.d.trust.authenticate(id, r.signedBy, "rpcutil#inventory reply"),
      }),
    );
    return (d.facts as Record<string, unknown>) ?? {};
  }

  /** Write the record, our claim renewed for `leaseS` (0: given up); false when someone else wrote first, rejects when the bucket did not take it (writeWindowMs). */
  private async save(v: Versioned, leaseS: number): Promise<boolean> {
    const rec = v.record;
    const held = rec.claimExpires ?? 0;
    const stopping = this.d.stopping;
    rec.nodeKey ??= this.d.trust.pinOf(rec.identity);
    rec.claimExpires = rec.status === "in_progress" ? (leaseS > 0 ? Date.now() + leaseS * 1000 : 0) : undefined;
    return (await this.d.store.compareAndSet(v, { withinMs: writeWindowMs(held, Date.now(), stopping.aborted), ...(stopping.aborted ? {} : { signal: stopping }) })) !== undefined;
  }
}
