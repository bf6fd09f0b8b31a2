import type { Logger } from "pino";
import { validateInput, applyOutputDefaults } from "../ddl/index.js";
import type { AgentDDL } from "../ddl/types.js";
import { RpcError } from "../errors.js";
import type { CompiledFilter } from "../filter/index.js";
import { encodeNodeEvent, type NodeEvent } from "../protocol/events.js";
import { signMessage, type SigningKey } from "../protocol/signing.js";
import { Status, type StatusCode } from "../protocol/status.js";
import { subjects } from "../protocol/subjects.js";
import { REPLY_PROTOCOL, type NodeMetadata, type Reply, type Request } from "../protocol/types.js";
import type { AuditEntry } from "../security/audit.js";
import { denialMessage, type CompiledPolicies, type Decision } from "../security/policy.js";
import type { Agent, ActionContext, DataPlugin } from "../agent/agent.js";
import type { ServiceStatus } from "../protocol/service.js";
import { newNodeStats, type IntakeStats, type NodeStats } from "./stats.js";

// One node's request pipeline after decode and verify: filter, authorise (action policies), validate,
// invoke, reply; every reply is audited. Each failing stage maps to exactly one status code. A
// NodeRuntime never touches NATS, so `muster server` hosts one and `muster emulate` hosts thousands behind one connection.

export interface LoadedAgent {
  agent: Agent;
  config: Record<string, unknown>;
  log: Logger;
}

export interface NodeRuntimeOptions {
  identity: string;
  collectives: string[];
  mainCollective: string;
  agents: LoadedAgent[];
  /** Facts and classes as they are now (the runtime adds identity, agents and collectives). */
  facts: () => Record<string, unknown>;
  classes: () => string[];
  log: Logger;
  intakeStats: IntakeStats;
  /** Audit hook: called once per handled request with its outcome. */
  audit?: (entry: AuditEntry) => void;
  /** Action policies by agent (src/security/policy.ts); an agent without one allows every caller. */
  policies?: CompiledPolicies;
  /** Handed to agents as ctx.refreshMetadata (re-read classes after a Puppet run). */
  refreshMetadata?: () => Promise<void>;
  /** The node's own ed25519 key: every reply and event it sends is signed with it (docs/security.md#node-keys). */
  nodeKey?: SigningKey;
}

export type { AuditEntry };

const noData = () => undefined;

/** The compiled empty filter (most discovery and every directed call without filters): matches without looking. */
export const MATCH_EVERY_NODE: CompiledFilter = Object.freeze({ dataCalls: [], matches: () => true });

/**
 * ctx.signal is an own, enumerable accessor (so `{ ...ctx }` still carries a working signal) that
 * makes the AbortController on first use. One shared descriptor: an accessor written in the object
 * literal would cost a new getter function per request and node.
 */
const CONTROLLER = Symbol("controller");
const lazySignal: PropertyDescriptor = {
  enumerable: true,
  configurable: true,
  get(this: { [CONTROLLER]: () => AbortController }) {
    return this[CONTROLLER]().signal;
  },
};

/** Whether an action declares any output default; without one, a reply's data needs no copy. */
const outputDefaults = new WeakMap<AgentDDL, Map<string, boolean>>();
function hasOutputDefaults(ddl: AgentDDL, action: string): boolean {
  let byAction = outputDefaults.get(ddl);
  if (!byAction) outputDefaults.set(ddl, (byAction = new Map()));
  let has = byAction.get(action);
  if (has === undefined) {
    const spec = Object.hasOwn(ddl.actions, action) ? ddl.actions[action] : undefined;
    has = !spec || Object.values(spec.output).some((o) => o.default !== undefined);
    byAction.set(action, has);
  }
  return has;
}

function isPromiseLike(x: unknown): x is PromiseLike<unknown> {
  return x !== null && (typeof x === "object" || typeof x === "function") && typeof (x as { then?: unknown }).then === "function";
}

export class NodeRuntime {
  readonly identity: string;
  readonly stats: NodeStats = newNodeStats();
  readonly startedAt = Date.now();
  private readonly agents = new Map<string, LoadedAgent>();
  private readonly dataPlugins = new Map<string, DataPlugin>();
  private readonly inflight = new Set<AbortController>();

  /** Sorted agent names when no agent can switch itself off (no isActive): the list never changes. */
  private readonly fixedAgentNames: string[] | undefined;

  constructor(readonly opts: NodeRuntimeOptions) {
    this.identity = opts.identity;
    for (const la of opts.agents) {
      this.agents.set(la.agent.ddl.metadata.name, la);
      for (const dp of la.agent.dataPlugins ?? []) this.dataPlugins.set(dp.name, dp);
    }
    this.fixedAgentNames = opts.agents.some((la) => la.agent.isActive) ? undefined : [...this.agents.keys()].sort();
  }

  addDataPlugin(dp: DataPlugin): void {
    this.dataPlugins.set(dp.name, dp);
  }

  get collectives(): string[] {
    return this.opts.collectives;
  }

  activeAgentNames(): string[] {
    if (this.fixedAgentNames) return this.fixedAgentNames.slice(); // filters read it on every request
    const out: string[] = [];
    for (const [name, la] of this.agents) if (la.agent.isActive?.() ?? true) out.push(name);
    return out.sort();
  }

  loadedAgents(): LoadedAgent[] {
    return [...this.agents.values()];
  }

  dataPluginNames(): string[] {
    return [...this.dataPlugins.keys()].sort();
  }

  metadata(): NodeMetadata {
    return { identity: this.identity, facts: this.opts.facts(), classes: this.opts.classes(), agents: this.activeAgentNames(), collectives: this.opts.collectives };
  }

  /** The site services this node's agents make it, each with its checks (its heartbeat carries them); an agent that throws says so as a failed check. */
  async serviceStatuses(): Promise<ServiceStatus[]> {
    const out: ServiceStatus[] = [];
    for (const la of this.agents.values()) {
      const svc = la.agent.service;
      if (!svc) continue;
      try {
        out.push(await svc.call(la.agent, { identity: this.identity, config: la.config, log: la.log }));
      } catch (e) {
        la.log.warn({ err: (e as Error).message }, "the agent could not say how its service is");
      }
    }
    return out;
  }

  /** Runs a data plugin for this node (compound filters and rpcutil get_data). */
  async queryData(plugin: string, argument: string | undefined): Promise<Record<string, unknown> | undefined> {
    const dp = this.dataPlugins.get(plugin);
    if (!dp) return undefined;
    return await dp.query(argument, { metadata: this.metadata() });
  }

  /**
   * Does this node match the filter? Data-plugin calls are resolved first, then matching is pure.
   * Synchronous when the filter calls no data plugin (the common case), so a broadcast to many
   * emulated nodes costs no promise per node.
   */
  matches(filter: CompiledFilter): boolean | Promise<boolean> {
    if (filter === MATCH_EVERY_NODE) return true; // no node metadata to build
    const md = this.metadata();
    if (filter.dataCalls.length === 0) return filter.matches(md, noData);
    return this.matchesWithData(filter, md);
  }

  private async matchesWithData(filter: CompiledFilter, md: NodeMetadata): Promise<boolean> {
    const results = new Map<string, Record<string, unknown> | undefined>();
    for (const call of filter.dataCalls) {
      try {
        results.set(`${call.plugin}\u0000${call.argument ?? ""}`, await this.queryData(call.plugin, call.argument));
      } catch (e) {
        this.opts.log.warn({ plugin: call.plugin, err: (e as Error).message }, "data plugin failed; its statements evaluate false");
      }
    }
    return filter.matches(md, (p, a) => results.get(`${p}\u0000${a ?? ""}`));
  }

  /**
   * Handle a verified request. Broadcast requests that do not match return undefined (no reply);
   * direct ones get an Aborted reply so the caller is not left waiting. Returns the reply itself
   * when every stage ran synchronously (no data plugin in the filter, a handler that does not
   * return a promise), else a promise of it.
   */
  handle(req: Request, filter: CompiledFilter, direct: boolean): Reply | undefined | Promise<Reply | undefined> {
    const la = this.agents.get(req.agent);
    // An agent that switched itself off (isActive false) is not offered: it answers no broadcast
    // and is absent from `agents`. Directly addressed requests still reach it, so a disabled
    // provision agent can report is_disabled and release its lock; it refuses what it must.
    if (!la || (!direct && !(la.agent.isActive?.() ?? true))) {
      if (!direct) return undefined;
      this.stats.unknown_agent++;
      return this.reply(req, Status.UnknownAction, `agent '${req.agent}' is not available on ${this.identity}`, {});
    }
    let matched: boolean | Promise<boolean>;
    try {
      matched = this.matches(filter);
    } catch (e) {
      matched = false;
      this.filterFailed(e);
    }
    if (typeof matched === "boolean") return this.dispatch(la, req, direct, matched);
    return matched.then(
      (m) => this.dispatch(la, req, direct, m),
      (e: unknown) => {
        this.filterFailed(e);
        return this.dispatch(la, req, direct, false);
      },
    );
  }

  private filterFailed(e: unknown): void {
    this.opts.log.warn({ err: (e as Error).message }, "filter evaluation failed");
  }

  private dispatch(la: LoadedAgent, req: Request, direct: boolean, matched: boolean): Reply | undefined | Promise<Reply> {
    if (!matched) {
      this.stats.filtered++;
      return direct ? this.reply(req, Status.Aborted, `${this.identity} does not match the request's filter`, {}) : undefined;
    }
    // authorise: the agent's policy, if it has one, decides before anything of the agent runs
    const policy = this.opts.policies?.get(req.agent);
    if (policy) {
      let d: Decision;
      try {
        d = policy.decide(req.caller, req.action, () => this.metadata());
      } catch (e) {
        this.opts.log.error({ agent: req.agent, err: (e as Error).message }, "policy evaluation failed; denying");
        d = { allowed: false, rule: 0 };
      }
      if (!d.allowed) {
        this.stats.denied++;
        return this.reply(req, Status.Aborted, denialMessage(this.identity, req.caller, req.agent, req.action, d), {});
      }
    }
    this.stats.passed++;
    return this.invoke(la, req);
  }

  private invoke(la: LoadedAgent, req: Request): Reply | Promise<Reply> {
    const ddl = la.agent.ddl;
    const handler = (la.agent.actions as Record<string, ((i: unknown, c: ActionContext) => unknown) | undefined>)[req.action];
    if (!handler || !ddl.actions[req.action]) {
      this.stats.unknown_action++;
      return this.reply(req, Status.UnknownAction, `unknown action '${req.action}' for agent '${req.agent}'`, {});
    }
    let input: Record<string, unknown>;
    try {
      input = validateInput(ddl, req.action, req.data);
    } catch (e) {
      this.stats.invalid_input++;
      if (e instanceof RpcError) return this.reply(req, e.status, e.message, e.data);
      return this.reply(req, Status.InvalidData, (e as Error).message, {});
    }
    // The AbortController is made when the handler first asks for ctx.signal, or when it returns a
    // promise (which the DDL timeout must be able to abort): a handler that answers synchronously,
    // like every ping, costs no controller and no timer.
    let ac: AbortController | undefined;
    const controller = (): AbortController => {
      if (!ac) {
        ac = new AbortController();
        this.inflight.add(ac);
      }
      return ac;
    };
    const ctx = {
      requestId: req.id,
      caller: req.caller,
      sender: req.sender,
      identity: this.identity,
      agent: req.agent,
      action: req.action,
      config: la.config,
      log: la.log,
      metadata: () => this.metadata(),
      nodeKey: this.opts.nodeKey?.publicKey,
      emit: (event: string, data: Record<string, unknown>) => this.emit(req.agent, event, data),
      refreshMetadata: this.opts.refreshMetadata,
      [CONTROLLER]: controller,
    } as unknown as ActionContext;
    Object.defineProperty(ctx, "signal", lazySignal);
    let out: unknown;
    try {
      out = handler(input, ctx);
    } catch (e) {
      if (ac) this.inflight.delete(ac);
      return this.failed(la, req, e);
    }
    if (!isPromiseLike(out)) {
      if (ac) this.inflight.delete(ac);
      return this.succeeded(la, req, out);
    }
    return this.settle(la, req, out, controller());
  }

  private async settle(la: LoadedAgent, req: Request, pending: PromiseLike<unknown>, ac: AbortController): Promise<Reply> {
    const timeout = la.agent.ddl.metadata.timeout;
    let timer: NodeJS.Timeout | undefined;
    try {
      const timedOut = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          // settle with the timeout first: aborting makes the handler reject too (an external agent
          // with "was aborted"), and the race keeps whichever rejection came first
          reject(new RpcError(Status.Aborted, `action ${req.agent}#${req.action} timed out after ${timeout}s`));
          ac.abort(new Error("timeout"));
        }, Math.max(1, timeout) * 1000);
      });
      return this.succeeded(la, req, await Promise.race([pending, timedOut]));
    } catch (e) {
      return this.failed(la, req, e);
    } finally {
      clearTimeout(timer);
      this.inflight.delete(ac);
    }
  }

  private succeeded(la: LoadedAgent, req: Request, out: unknown): Reply {
    const data = out && typeof out === "object" && !Array.isArray(out) ? (out as Record<string, unknown>) : {};
    return this.reply(req, Status.OK, "OK", hasOutputDefaults(la.agent.ddl, req.action) ? applyOutputDefaults(la.agent.ddl, req.action, data) : data);
  }

  private failed(la: LoadedAgent, req: Request, e: unknown): Reply {
    if (e instanceof RpcError) {
      if (e.status === Status.Aborted) this.stats.aborted++;
      return this.reply(req, e.status, e.message, e.data);
    }
    this.stats.errors++;
    la.log.error({ err: e, action: req.action, requestid: req.id }, "action failed");
    return this.reply(req, Status.UnknownError, `${req.agent}#${req.action} failed: ${(e as Error)?.message ?? String(e)}`, {});
  }

  /** A reply for a request this node could not accept (bad envelope, signature, ttl) on its direct subject. */
  rejection(requestid: string, status: StatusCode, reason: string, agent = "", action = ""): Reply {
    return this.signed<Reply>({ protocol: REPLY_PROTOCOL, requestid, sender: this.identity, agent, action, time: Date.now(), statuscode: status, statusmsg: reason, data: {} });
  }

  /** Signed with the node key (the request id is inside, so a signed reply answers one request only). */
  signed<M extends { pubkey?: string }>(msg: M): M {
    return this.opts.nodeKey ? signMessage(msg, this.opts.nodeKey) : msg;
  }

  private reply(req: Request, status: StatusCode, msg: string, data: Record<string, unknown>): Reply {
    this.stats.replies++;
    this.opts.audit?.({ time: Date.now(), identity: this.identity, requestid: req.id, caller: req.caller, sender: req.sender, agent: req.agent, action: req.action, data: req.data, statuscode: status, statusmsg: msg });
    return this.signed<Reply>({ protocol: REPLY_PROTOCOL, requestid: req.id, sender: this.identity, agent: req.agent, action: req.action, time: Date.now(), statuscode: status, statusmsg: msg, data });
  }

  /** Set by the host that carries this node: publishes a subject with a JSON payload. */
  emitter?: (subject: string, payload: Uint8Array) => void;

  emit(agent: string, event: string, data: Record<string, unknown>): void {
    if (!/^[a-z][a-z0-9_]*$/.test(event)) throw new Error(`invalid event name ${JSON.stringify(event)}`);
    try {
      this.emitter?.(subjects.event(agent, event), encodeNodeEvent(this.signed<NodeEvent>({ identity: this.identity, agent, event, time: Date.now(), data })));
    } catch (e) {
      this.opts.log.warn({ agent, event, err: (e as Error).message }, "could not publish an event");
    }
  }

  /** Abort every running action (shutdown). */
  abortAll(): void {
    for (const ac of this.inflight) ac.abort(new Error("shutdown"));
  }
}
