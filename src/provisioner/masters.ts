import type { Logger } from "pino";
import { puppetcaDDL } from "../agents/puppetca/ddl.js";
import { notifyDDL } from "../agents/notify/ddl.js";
import { rpcutilDDL } from "../agents/rpcutil/ddl.js";
import { buildFilter } from "../filter/index.js";
import { Status } from "../protocol/status.js";
import type { Filter } from "../protocol/types.js";
import { callOne, type Collective } from "./collective.js";
import type { ProvisionerConfig } from "./config.js";
import { lookAgainForMasters, type EnginePolicy } from "./engine.js";
import { pickMaster } from "./pick-master.js";
import { StepError, type MasterInfo } from "./steps.js";

// The Puppet masters and the notifiers, as the provisioner finds them: discovered (at most once a
// cycle, at most every 5 s, and afresh after any startup event: a master that appears is used
// without a restart), each master's address and port read from its facts, a node's master chosen
// by facts (pick-master.ts), and a notification sent to the first notifier found.

type Cfg = Pick<ProvisionerConfig, "master" | "notify" | "sleeptime" | "discovery_timeout" | "step_timeout">;

export class Masters {
  private masters?: { at: number; list: MasterInfo[] };
  private notifiers?: { at: number; list: string[] };
  private readonly masterFilter: Filter;
  private readonly notifyFilter: Filter;

  constructor(
    private readonly cfg: Cfg,
    private readonly policy: EnginePolicy,
    private readonly collective: Collective,
    private readonly log: Logger,
    private readonly signal: AbortSignal,
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

  /** All masters with their facts; an empty answer (say, mid-failover) is not cached. */
  async discover(): Promise<MasterInfo[]> {
    if (this.masters && Date.now() - this.masters.at < this.cacheMs) return this.masters.list;
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
    if (list.length) this.masters = { at: Date.now(), list };
    return list;
  }

  /** The node's master: the one it had (its certificate may be signed there already), else picked by facts. */
  async choose(id: string, facts: Record<string, unknown>, previous: string | undefined): Promise<MasterInfo> {
    let masters = await this.discover();
    for (let attempt = 1; masters.length === 0 && !this.signal.aborted; attempt++) {
      const wait = lookAgainForMasters(attempt, this.policy);
      if (wait === undefined) break;
      await sleep(wait, this.signal);
      masters = await this.discover();
    }
    const kept = previous ? masters.find((m) => m.identity === previous) : undefined;
    if (kept) return kept;
    const choice = pickMaster(this.cfg.master.criteria, facts, masters);
    if (!choice) throw new StepError(`no Puppet master found (filter: agent ${this.cfg.master.agent}${this.cfg.master.filter ? ` and ${this.cfg.master.filter}` : ""})`);
    this.log.info({ node: id, master: choice.master.identity, criterion: choice.criterion ?? "first master", value: choice.value }, "picked master");
    return choice.master as MasterInfo;
  }

  /** One action of the master agent on every master at once; names those that did not answer OK. */
  async onAll(certname: string): Promise<{ masters: number; bad: string[]; firstError?: string }> {
    const masters = await this.discover();
    const replies = await this.collective.call("master", { ddl: puppetcaDDL, name: this.cfg.master.agent }, "clean", { certname }, { nodes: masters.map((m) => m.identity), timeoutMs: this.cfg.step_timeout * 1000, signal: this.signal });
    const bad = masters.filter((m) => !replies.some((r) => r.sender === m.identity && r.statuscode === Status.OK)).map((m) => m.identity);
    return { masters: masters.length, bad, firstError: replies.find((r) => r.statuscode !== Status.OK)?.statusmsg };
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
