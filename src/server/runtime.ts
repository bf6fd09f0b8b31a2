import type { Logger } from "pino";
import { validateInput, applyOutputDefaults } from "../ddl/index.js";
import { RpcError } from "../errors.js";
import type { CompiledFilter } from "../filter/index.js";
import { Status, type StatusCode } from "../protocol/status.js";
import { REPLY_PROTOCOL, type NodeMetadata, type Reply, type Request } from "../protocol/types.js";
import type { Agent, ActionContext, DataPlugin } from "./agent.js";
import { newNodeStats, type IntakeStats, type NodeStats } from "./stats.js";

// One node's request pipeline after decode and verify: filter, authorise, validate, audit, invoke,
// reply. Each failing stage maps to exactly one status code. A NodeRuntime never touches NATS, so
// `muster server` hosts one and `muster emulate` hosts thousands behind one connection.

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
}

export interface AuditEntry {
  time: number;
  identity: string;
  requestid: string;
  caller: string;
  sender: string;
  agent: string;
  action: string;
  data: Record<string, unknown>;
  statuscode: number;
  statusmsg: string;
}

export class NodeRuntime {
  readonly identity: string;
  readonly stats: NodeStats = newNodeStats();
  readonly startedAt = Date.now();
  private readonly agents = new Map<string, LoadedAgent>();
  private readonly dataPlugins = new Map<string, DataPlugin>();
  private readonly inflight = new Set<AbortController>();

  constructor(readonly opts: NodeRuntimeOptions) {
    this.identity = opts.identity;
    for (const la of opts.agents) {
      this.agents.set(la.agent.ddl.metadata.name, la);
      for (const dp of la.agent.dataPlugins ?? []) this.dataPlugins.set(dp.name, dp);
    }
  }

  addDataPlugin(dp: DataPlugin): void {
    this.dataPlugins.set(dp.name, dp);
  }

  get collectives(): string[] {
    return this.opts.collectives;
  }

  activeAgentNames(): string[] {
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

  /** Runs a data plugin for this node (compound filters and rpcutil get_data). */
  async queryData(plugin: string, argument: string | undefined): Promise<Record<string, unknown> | undefined> {
    const dp = this.dataPlugins.get(plugin);
    if (!dp) return undefined;
    return await dp.query(argument, { metadata: this.metadata() });
  }

  /** Does this node match the filter? Data-plugin calls are resolved first, then matching is pure. */
  async matches(filter: CompiledFilter): Promise<boolean> {
    const md = this.metadata();
    if (filter.dataCalls.length === 0) return filter.matches(md, () => undefined);
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
   * direct ones get an Aborted reply so the caller is not left waiting.
   */
  async handle(req: Request, filter: CompiledFilter, direct: boolean): Promise<Reply | undefined> {
    const la = this.agents.get(req.agent);
    const active = la && (la.agent.isActive?.() ?? true);
    if (!active) {
      if (!direct) return undefined;
      this.stats.unknown_agent++;
      return this.reply(req, Status.UnknownAction, `agent '${req.agent}' is not available on ${this.identity}`, {});
    }
    let matched: boolean;
    try {
      matched = await this.matches(filter);
    } catch (e) {
      matched = false;
      this.opts.log.warn({ err: (e as Error).message }, "filter evaluation failed");
    }
    if (!matched) {
      this.stats.filtered++;
      return direct ? this.reply(req, Status.Aborted, `${this.identity} does not match the request's filter`, {}) : undefined;
    }
    this.stats.passed++;
    return this.invoke(la, req);
  }

  private async invoke(la: LoadedAgent, req: Request): Promise<Reply> {
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
    const ac = new AbortController();
    this.inflight.add(ac);
    const timeoutMs = Math.max(1, ddl.metadata.timeout) * 1000;
    let timer: NodeJS.Timeout | undefined;
    const ctx: ActionContext = {
      requestId: req.id,
      caller: req.caller,
      sender: req.sender,
      identity: this.identity,
      agent: req.agent,
      action: req.action,
      config: la.config,
      log: la.log,
      signal: ac.signal,
      metadata: () => this.metadata(),
    };
    try {
      const timedOut = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          ac.abort(new Error("timeout"));
          reject(new RpcError(Status.Aborted, `action ${req.agent}#${req.action} timed out after ${ddl.metadata.timeout}s`));
        }, timeoutMs);
      });
      const out = await Promise.race([Promise.resolve().then(() => handler(input, ctx)), timedOut]);
      const data = out && typeof out === "object" && !Array.isArray(out) ? (out as Record<string, unknown>) : {};
      return this.reply(req, Status.OK, "OK", applyOutputDefaults(ddl, req.action, data));
    } catch (e) {
      if (e instanceof RpcError) {
        if (e.status === Status.Aborted) this.stats.aborted++;
        return this.reply(req, e.status, e.message, e.data);
      }
      this.stats.errors++;
      la.log.error({ err: e, action: req.action, requestid: req.id }, "action failed");
      return this.reply(req, Status.UnknownError, `${req.agent}#${req.action} failed: ${(e as Error)?.message ?? String(e)}`, {});
    } finally {
      clearTimeout(timer);
      this.inflight.delete(ac);
    }
  }

  /** A reply for a request this node could not accept (bad envelope, signature, ttl) on its direct subject. */
  rejection(requestid: string, status: StatusCode, reason: string, agent = "", action = ""): Reply {
    return { protocol: REPLY_PROTOCOL, requestid, sender: this.identity, agent, action, time: Date.now(), statuscode: status, statusmsg: reason, data: {} };
  }

  private reply(req: Request, status: StatusCode, msg: string, data: Record<string, unknown>): Reply {
    this.stats.replies++;
    this.opts.audit?.({ time: Date.now(), identity: this.identity, requestid: req.id, caller: req.caller, sender: req.sender, agent: req.agent, action: req.action, data: req.data, statuscode: status, statusmsg: msg });
    return { protocol: REPLY_PROTOCOL, requestid: req.id, sender: this.identity, agent: req.agent, action: req.action, time: Date.now(), statuscode: status, statusmsg: msg, data };
  }

  /** Abort every running action (shutdown). */
  abortAll(): void {
    for (const ac of this.inflight) ac.abort(new Error("shutdown"));
  }
}
