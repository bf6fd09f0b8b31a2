import type { Logger } from "pino";
import { puppetcaDDL } from "../agents/puppetca/ddl.js";
import { notifyDDL } from "../agents/notify/ddl.js";
import { rpcutilDDL } from "../agents/rpcutil/ddl.js";
import { buildFilter } from "../filter/index.js";
import { Status } from "../protocol/status.js";
import type { Filter } from "../protocol/types.js";
import { callOne, type Collective } from "./collective.js";
import type { ProvisionerConfig } from "./config.js";
import { mergeSeen, type KnownMaster } from "../protocol/known-masters.js";
import { appendLog, type NodeRecord } from "../protocol/provision-record.js";
import { masterWaitReason, noteFallback, type MasterPick } from "./waits.js";
import { chooseMaster, type MasterCandidate, type MasterDecision } from "./pick-master.js";
import type { KnownMasterStore } from "./known-masters.js";
import { StepError, type MasterInfo } from "./steps.js";

// The Puppet masters and the notifiers, as the provisioner finds them: discovered (at most once a
// cycle, at most every 5 s, and afresh after any startup event: a master that appears is used
// without a restart), each master's address and port read from its facts, a node's master chosen
// by facts (pick-master.ts), and a notification sent to the first notifier found. A master "answers"
// when this discovery finds it; one that does not makes its nodes wait (MasterAway), never fail.
// The masters that answered are remembered in the state bucket (with the facts criteria match),
// and with the config's known_masters they are the known masters a node's criteria may pick
// while they do not answer.

type Cfg = Pick<ProvisionerConfig, "master" | "notify" | "sleeptime" | "discovery_timeout" | "step_timeout" | "known_master_wait" | "known_masters">;

/** Where the masters seen are kept across restarts and shared by the provisioners (ProvisionState's `masters`). */
export type MasterMemory = Pick<KnownMasterStore, "list" | "remember">;

/**
 * No master answers for a node: `master`, its own or (with `pick`) the known one its criteria
 * pick, or (undefined) none at all. The engine makes the node wait for it (its master-away event).
 */
export class MasterAway extends Error {
  constructor(
    readonly master: string | undefined,
    /** How masters are found (agent, filter), for the reason shown. */
    readonly looking: string,
    readonly pick?: MasterPick,
  ) {
    super(masterWaitReason(master, looking, pick));
  }
}

export class Masters {
  private masters?: { at: number; list: MasterInfo[] };
  /** The discovery under way, shared by everyone who asks meanwhile; `at`: when it began. */
  private inFlight?: { at: number; list: Promise<MasterInfo[]> };
  private notifiers?: { at: number; list: string[] };
  /** The masters remembered in the state bucket, as last read or written. */
  private remembered?: { at: number; list: KnownMaster[] };
  private readonly masterFilter: Filter;
  private readonly notifyFilter: Filter;

  constructor(
    private readonly cfg: Cfg,
    private readonly collective: Collective,
    private readonly log: Logger,
    private readonly signal: AbortSignal,
    private readonly memory?: MasterMemory,
  ) {
    // Parsed once at start: a bad filter stops the daemon with a clear message.
    this.masterFilter = buildFilter({ select: cfg.master.filter ? [cfg.master.filter] : [], agent: [cfg.master.agent] });
    this.notifyFilter = buildFilter({ select: cfg.notify.filter ? [cfg.notify.filter] : [], agent: [cfg.notify.agent] });
  }

  /** Look again before the next choice (every cycle, and whenever something started: it may be a new master). */
  forget(): void {
    this.masters = undefined;
  }

  private get cacheMs(): number {
    return Math.min(this.cfg.sleeptime, 5) * 1000;
  }

  /** How masters are found, as a waiting node's reason says it: "agent puppetca", plus the filter if any. */
  get looking(): string {
    return `agent ${this.cfg.master.agent}${this.cfg.master.filter ? `, filter ${JSON.stringify(this.cfg.master.filter)}` : ""}`;
  }

  /**
   * All masters that answer, with their facts; an empty answer (say, mid-failover) is not cached.
   * `fresh`: from a discovery begun now or later, not the cache (did a master just go away?).
   * Discoveries asked for meanwhile share the one under way.
   */
  async discover(o: { fresh?: boolean } = {}): Promise<MasterInfo[]> {
    const asked = Date.now();
    if (!o.fresh && this.masters && asked - this.masters.at < this.cacheMs) return this.masters.list;
    if (this.inFlight && (!o.fresh || this.inFlight.at >= asked)) return this.inFlight.list;
    const list = this.discoverNow();
    const mine = (this.inFlight = { at: asked, list });
    return list.finally(() => {
      if (this.inFlight === mine) this.inFlight = undefined;
    });
  }

  /** Does `master` answer discovery now? */
  async answers(master: string, o: { fresh?: boolean } = {}): Promise<boolean> {
    return (await this.discover(o)).some((m) => m.identity === master);
  }

  private async discoverNow(): Promise<MasterInfo[]> {
    const at = Date.now();
    const ids = await this.collective.discover("master", this.masterFilter, this.cfg.discovery_timeout * 1000);
    logDiscovery(this.log, "Puppet masters", this.collective.collectiveOf("master"), this.cfg.master, ids);
    const list: MasterInfo[] = [];
    if (ids.length) {
      const replies = await this.collective.call("master", { ddl: rpcutilDDL, name: "rpcutil" }, "inventory", {}, { nodes: ids, timeoutMs: 10_000 });
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
    // an empty answer is not kept: the next one asks again
    if (at >= (this.masters?.at ?? 0)) this.masters = list.length ? { at, list } : undefined;
    if (list.length) void this.remember(list);
    return list;
  }

  /** The masters that answered, remembered (a write only when one is new or its criterion facts changed); best effort. */
  private async remember(list: readonly MasterInfo[]): Promise<void> {
    if (!this.memory || this.cfg.master.criteria.length === 0) return;
    // nothing new against what was last read: no round trip to the bucket
    if (this.remembered && !mergeSeen(this.remembered.list, list, this.cfg.master.criteria, Date.now())) return;
    try {
      const written = await this.memory.remember(list, this.cfg.master.criteria);
      if (!written) return;
      this.remembered = { at: Date.now(), list: written };
      this.log.info({ masters: written.map((m) => m.identity) }, "known masters updated in the state bucket");
    } catch (e) {
      if (!this.signal.aborted) this.log.warn({ err: (e as Error).message }, "could not remember the masters that answered in the state bucket; trying again at the next discovery");
    }
  }

  /** The known masters: those remembered in the state bucket (read at most every few seconds), and the config's known_masters not among them. */
  async known(): Promise<MasterCandidate[]> {
    if (this.memory && (!this.remembered || Date.now() - this.remembered.at >= this.cacheMs)) {
      try {
        this.remembered = { at: Date.now(), list: await this.memory.list() };
      } catch (e) {
        // the bucket unreachable: what was read last (and the config) until it answers
        this.log.debug({ err: (e as Error).message }, "could not read the known masters; using the last read");
      }
    }
    const remembered = this.remembered?.list ?? [];
    return [...remembered, ...(this.cfg.known_masters ?? []).filter((k) => !remembered.some((r) => r.identity === k.identity))];
  }

  /**
   * The node's master (pick-master.ts chooseMaster): the one it had when it answers, else picked by
   * facts among the masters that answer and the known ones that do not. `bound`: the node is
   * mid-round with its record's master (its CSR or certificate may be there), so it is never moved:
   * it waits for it. A known master its criteria pick is waited for up to known_master_wait, then
   * the node falls back, said on its record (waits.ts noteFallback). Waiting is MasterAway, the
   * engine's to carry out.
   */
  async choose(id: string, facts: Record<string, unknown>, rec: NodeRecord, bound: boolean): Promise<MasterInfo> {
    const d = await this.decide(id, facts, rec, bound);
    if (d.type !== "wait" && d.fallback) noteFallback(rec, d.fallback, d.type === "use" ? d.master.identity : undefined, Date.now());
    else if (d.type === "use" && rec.masterFallback?.from === d.master.identity) {
      appendLog(rec, `${d.master.identity} answers after all: provisioned against it`);
      delete rec.masterFallback;
    }
    if (d.type === "wait-any") throw new MasterAway(undefined, this.looking);
    if (d.type === "wait") throw new MasterAway(d.master, this.looking, d.own ? undefined : { criterion: d.criterion, value: d.value });
    return d.master;
  }

  private async decide(id: string, facts: Record<string, unknown>, rec: NodeRecord, bound: boolean): Promise<MasterDecision<MasterInfo>> {
    const [answering, known] = await Promise.all([this.discover(), this.known()]);
    const w = rec.masterWait;
    const d = chooseMaster({
      criteria: this.cfg.master.criteria,
      facts,
      answering,
      known,
      previous: rec.master,
      bound,
      ...(w?.criterion && w.master ? { waiting: { master: w.master, since: w.since } } : {}),
      ...(rec.masterFallback ? { gaveUpOn: rec.masterFallback.from } : {}),
      now: Date.now(),
      waitMs: this.cfg.known_master_wait * 1000,
    });
    if (d.type === "use" && !d.kept) {
      if (d.fallback) this.log.warn({ node: id, master: d.master.identity, wanted: d.fallback.from, criterion: d.criterion ?? "first master", value: d.value }, `fell back to master ${d.master.identity}: ${d.fallback.reason}`);
      else this.log.info({ node: id, master: d.master.identity, criterion: d.criterion ?? "first master", value: d.value }, "picked master");
    } else if (d.type === "wait-any" && d.fallback) this.log.warn({ node: id, wanted: d.fallback.from }, `stopped waiting for ${d.fallback.from}: ${d.fallback.reason}; no other master answers either`);
    return d;
  }

  /**
   * Clean `certname` on every master at once; names those that did not answer OK. `own`, the node's
   * master, must be among them. Another master that failed and no longer answers discovery is
   * skipped rather than failing the step: a master away must not hold up other masters' nodes.
   */
  async onAll(certname: string, own: string, signal?: AbortSignal): Promise<{ masters: number; bad: string[]; skipped: string[]; firstError?: string }> {
    const masters = await this.discover();
    const replies = await this.collective.call("master", { ddl: puppetcaDDL, name: this.cfg.master.agent }, "clean", { certname }, { nodes: masters.map((m) => m.identity), timeoutMs: this.cfg.step_timeout * 1000, signal: signal ? AbortSignal.any([this.signal, signal]) : this.signal });
    let bad = masters.filter((m) => !replies.some((r) => r.sender === m.identity && r.statuscode === Status.OK)).map((m) => m.identity);
    if (!masters.some((m) => m.identity === own)) bad.unshift(own);
    let skipped: string[] = [];
    if (bad.some((m) => m !== own)) {
      const answering = new Set((await this.discover({ fresh: true })).map((m) => m.identity));
      skipped = bad.filter((m) => m !== own && !answering.has(m));
      bad = bad.filter((m) => !skipped.includes(m));
    }
    return { masters: masters.length - skipped.length, bad, skipped, firstError: replies.find((r) => r.statuscode !== Status.OK)?.statusmsg };
  }

  /** Send to exactly one notifier, the first (by identity) of those discovered; `key` makes it deliver once however often it is asked. */
  async notify(subject: string, message: string, key: string): Promise<void> {
    if (!this.notifiers || Date.now() - this.notifiers.at >= this.cacheMs) {
      this.notifiers = { at: Date.now(), list: await this.collective.discover("notify", this.notifyFilter, this.cfg.discovery_timeout * 1000) };
      logDiscovery(this.log, "notifiers", this.collective.collectiveOf("notify"), this.cfg.notify, this.notifiers.list);
    }
    const found = this.notifiers.list;
    const notifier = found[0];
    if (!notifier) throw new StepError(`no notifier found (agent ${this.cfg.notify.agent}${this.cfg.notify.filter ? `, filter ${this.cfg.notify.filter}` : ""})`);
    if (found.length > 1) this.log.debug({ using: notifier, found: found.length }, "several notifiers; using the first");
    const input = { subject, message, dedupe_key: key, ...(this.cfg.notify.targets.length ? { recipients: this.cfg.notify.targets } : {}) };
    await callOne(this.collective, "notify", { ddl: notifyDDL, name: this.cfg.notify.agent }, "send", input, notifier, { timeoutMs: this.cfg.step_timeout * 1000, signal: this.signal });
  }
}

/** Every discovery at debug, empty ones included: "found nothing" is what an operator debugs most. */
export function logDiscovery(log: Logger, what: string, collective: string, role: { filter?: string; agent: string }, found: readonly string[]): void {
  log.debug({ collective, filter: role.filter || undefined, agent: role.agent, found: found.length, nodes: found.slice(0, 20) }, `discovery of ${what} in collective ${collective} (agent ${role.agent}${role.filter ? `, filter ${JSON.stringify(role.filter)}` : ""}): ${found.length} found`);
}

export function stringFact(facts: Record<string, unknown>, name: string): string | undefined {
  const v = facts[name];
  return typeof v === "string" && v ? v : typeof v === "number" ? String(v) : undefined;
}

/** Resolves after `ms`, or at once when `signal` aborts. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
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
