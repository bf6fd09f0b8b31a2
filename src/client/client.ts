import type { KV } from "@nats-io/kv";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import type { Logger } from "pino";
import { connectBroker, resolveBrokers, resolveTls, type TlsSettings } from "../broker/connect.js";
import { checkOutputs, validateInput } from "../ddl/index.js";
import type { AgentDDL, ActionName, ActionOutput, CallInput } from "../ddl/types.js";
import { MusterError } from "../errors.js";
import { kvStreamName } from "../protocol/buckets.js";
import { encodeRequest } from "../protocol/envelope.js";
import { parseNodeEvent, type NodeEvent } from "../protocol/events.js";
import { parseLifecycleEvent, type LifecycleEvent, type LifecycleType } from "../protocol/lifecycle.js";
import type { SigningKey } from "../protocol/signing.js";
import { Status } from "../protocol/status.js";
import { isValidCollective, subjects } from "../protocol/subjects.js";
import { emptyFilter, type Filter, type Reply } from "../protocol/types.js";
import { loadOrCreateSigningKey } from "../security/keys.js";
import { silentLogger } from "../log.js";
import { collectReplies } from "./collector.js";
import { BroadcastSource } from "./discovery/broadcast.js";
import { FlatfileSource } from "./discovery/flatfile.js";
import type { RegistrySourceOptions } from "./discovery/registry.js";
import type { DiscoveryOptions, NodeSource } from "./discovery/source.js";
import { applyLimit, type LimitSpec } from "./limit.js";
import { buildRequest, targetHeaders } from "./request.js";
import { targetTree } from "../protocol/targets.js";

// The client API that the CLI, the provisioner and users' scripts use: discover nodes, call actions
// on them in parallel (directly addressed, batched, limited), collect and summarise replies.

export interface ClientOptions {
  brokers?: string[];
  broker?: string;
  collective?: string;
  key?: SigningKey;
  nc?: NatsConnection;
  name?: string;
  log?: Logger;
  /** Request ttl in seconds (default 60). */
  ttl?: number;
  /** TLS to the broker; default MUSTER_TLS_CA / MUSTER_TLS_CERT / MUSTER_TLS_KEY. */
  tls?: TlsSettings;
  /** Daemons: wait for the broker (saying so) and reconnect forever, instead of failing fast. */
  persistent?: boolean;
  /** Where the brokers came from, named while waiting (resolveBrokerSettings().from). */
  from?: string;
}

export interface DiscoverOptions {
  filter?: Filter;
  /** --dt: upper bound, ms (default 2000). */
  timeoutMs?: number;
  /** Broadcast completes this long after the last reply (default 250 ms). */
  idleMs?: number;
  source?: NodeSource;
  onFound?: (identity: string) => void;
}

export interface CallOptions {
  /** Nodes to address directly. Without them the client discovers with `filter` first. */
  nodes?: string[];
  filter?: Filter;
  discovery?: DiscoverOptions;
  /** Seconds to wait for replies after the last publish of a batch (default: the DDL timeout + 5). */
  timeoutMs?: number;
  batch?: number;
  batchSleepMs?: number;
  limit?: LimitSpec;
  onReply?: (r: Reply) => void;
  onDiscovered?: (nodes: string[]) => void;
  /** Stop waiting for replies when aborted (the call resolves with what arrived). */
  signal?: AbortSignal;
  /** Skip client-side DDL validation (the server validates anyway). */
  ddl?: AgentDDL;
}

export interface RpcStats {
  discovered: number;
  responded: number;
  ok: number;
  failed: number;
  noResponse: string[];
  discoveryMs: number;
  callMs: number;
  totalMs: number;
}

export interface RpcResult {
  agent: string;
  action: string;
  discovered: string[];
  replies: Reply[];
  stats: RpcStats;
}

export class MusterClient {
  readonly collective: string;
  private readonly ownsConnection: boolean;
  private readonly ttl: number;
  private readonly log: Logger;
  private readonly broadcast: BroadcastSource;

  /**
   * The raw connection, for the daemons' own transports only. The client's callers use what the
   * client offers instead (onEvent, onLifecycle, kv, source); test/client/boundary.test.ts holds
   * them to it.
   */
  readonly nc: NatsConnection;

  private constructor(nc: NatsConnection, readonly key: SigningKey, opts: ClientOptions, owns: boolean) {
    this.nc = nc;
    this.collective = opts.collective ?? "muster";
    if (!isValidCollective(this.collective)) throw new MusterError("MUSTER_USAGE", `invalid collective name ${JSON.stringify(this.collective)}`);
    this.ownsConnection = owns;
    this.ttl = opts.ttl ?? 60;
    this.log = opts.log ?? silentLogger;
    this.broadcast = new BroadcastSource((f, o) => this.broadcastDiscover(f, o));
  }

  static async connect(opts: ClientOptions = {}): Promise<MusterClient> {
    const key = opts.key ?? loadOrCreateSigningKey();
    if (opts.nc) return new MusterClient(opts.nc, key, opts, false);
    const nc = await connectBroker({ servers: opts.brokers ?? resolveBrokers(opts.broker, undefined), name: opts.name ?? "muster-client", log: opts.log, tls: resolveTls(opts.tls), persistent: opts.persistent, from: opts.from });
    return new MusterClient(nc, key, opts, true);
  }

  /**
   * The same connection and key addressing another collective (the provisioner reaches waiting
   * nodes in `provisioning` and masters in the main one). Closing the view leaves the connection open.
   */
  withCollective(collective: string): MusterClient {
    if (collective === this.collective) return this;
    return new MusterClient(this.nc, this.key, { collective, ttl: this.ttl, log: this.log }, false);
  }

  async close(): Promise<void> {
    if (this.ownsConnection) await this.nc.drain().catch(() => undefined);
  }

  /**
   * A discovery source by its name, as `--dm` spells it: `broadcast` (or `mc`), `flatfile` (or
   * `file`, with `file`), `registry` (loaded on demand, so callers that never use it do not load
   * JetStream). Pass it as `discover({source})` or `call(..., {discovery: {source}})`.
   */
  async source(spec: SourceSpec): Promise<NodeSource> {
    switch (spec.method) {
      case "broadcast":
      case "mc":
        return this.broadcast;
      case "flatfile":
      case "file":
        if (!spec.file) throw new MusterError("MUSTER_USAGE", "--dm flatfile needs --nodes FILE");
        return new FlatfileSource(spec.file);
      case "registry": {
        const { RegistrySource } = await import("./discovery/registry.js");
        const { method: _m, ...opts } = spec;
        return new RegistrySource(this.nc, { collective: this.collective, ...opts });
      }
      default:
        throw new MusterError("MUSTER_USAGE", `unknown discovery method ${JSON.stringify((spec as { method: unknown }).method)}; known: ${DiscoveryMethods.join(", ")}`);
    }
  }

  /**
   * Node events (`muster.event.<agent>.<event>`, ActionContext.emit) from now on; `*` matches any
   * agent or event. Await `ready` before starting work whose events must not be missed: it
   * resolves once the broker has the subscription. Malformed events are dropped and told to
   * `onInvalid`.
   */
  onEvent(agent: string, event: string, handler: (e: NodeEvent) => void, opts: { onInvalid?: (reason: string, subject: string) => void } = {}): EventSubscription {
    return this.subscribeParsed(subjects.event(agent, event), parseNodeEvent, handler, opts.onInvalid);
  }

  /**
   * Lifecycle events (`muster.lifecycle.<type>.<component>`): nodes starting and stopping, parsed
   * and checked (protocol/lifecycle.ts). By default every type from every component. `ready`
   * resolves once the broker has the subscription. Malformed events are dropped and told to
   * `onInvalid`.
   */
  onLifecycle(handler: (e: LifecycleEvent) => void, opts: { type?: LifecycleType | "*"; component?: string; onInvalid?: (reason: string, subject: string) => void } = {}): EventSubscription {
    return this.subscribeParsed(subjects.lifecycle(opts.type ?? "*", opts.component ?? "*"), parseLifecycleEvent, handler, opts.onInvalid);
  }

  private subscribeParsed<E>(subject: string, parse: (data: Uint8Array, subject: string) => { ok: true; event: E } | { ok: false; reason: string }, handler: (e: E) => void, onInvalid?: (reason: string, subject: string) => void): EventSubscription {
    let invalid = 0;
    const sub: Subscription = this.nc.subscribe(subject, {
      callback: (err, msg) => {
        if (err) return;
        const r = parse(msg.data, msg.subject);
        if (!r.ok) {
          invalid++;
          onInvalid?.(r.reason, msg.subject);
          return;
        }
        try {
          handler(r.event);
        } catch (e) {
          this.log.warn({ subject: msg.subject, err: (e as Error).message }, "event handler failed");
        }
      },
    });
    const ready = this.nc.flush();
    ready.catch(() => undefined); // a caller that never awaits it must not crash the process
    return {
      ready,
      unsubscribe: () => sub.unsubscribe(),
      get invalid() {
        return invalid;
      },
    };
  }

  /**
   * A JetStream KV bucket: opened, or created when absent with `create` (history, replicas and
   * ttl apply only then; an existing bucket keeps its own).
   */
  async kv(bucket: string, opts: { create?: { history?: number; replicas?: number; ttlMs?: number } } = {}): Promise<KV> {
    if (!opts.create) {
      const kv = await this.kvIfExists(bucket);
      if (!kv) throw new MusterError("MUSTER_BUCKET_NOT_FOUND", `no KV bucket ${JSON.stringify(bucket)} on this broker: check the name against the config of the daemon that owns it (provisioner state_bucket, registry bucket)`);
      return kv;
    }
    const [{ jetstream }, { Kvm }] = await Promise.all([import("@nats-io/jetstream"), import("@nats-io/kv")]);
    const kvm = new Kvm(jetstream(this.nc));
    const c = opts.create;
    return kvm.create(bucket, { ...(c.history !== undefined ? { history: c.history } : {}), ...(c.replicas !== undefined ? { replicas: c.replicas } : {}), ...(c.ttlMs !== undefined ? { ttl: c.ttlMs } : {}) });
  }

  /** The bucket if it exists, undefined when it does not (nothing ever wrote to it); never creates it. */
  async kvIfExists(bucket: string): Promise<KV | undefined> {
    const { jetstream, jetstreamManager } = await import("@nats-io/jetstream");
    try {
      await (await jetstreamManager(this.nc)).streams.info(kvStreamName(bucket));
    } catch (e) {
      if (/stream not found|10059/i.test((e as Error).message)) return undefined;
      throw e;
    }
    const { Kvm } = await import("@nats-io/kv");
    return new Kvm(jetstream(this.nc)).open(bucket);
  }

  /** Identities of the nodes matching the filter, sorted. */
  async discover(opts: DiscoverOptions = {}): Promise<string[]> {
    const source = opts.source ?? this.broadcast;
    const found = await source.discover(opts.filter ?? emptyFilter(), { timeoutMs: opts.timeoutMs ?? 2000, idleMs: opts.idleMs ?? 250, onFound: opts.onFound });
    return [...new Set(found)].sort();
  }

  private async broadcastDiscover(filter: Filter, opts: DiscoveryOptions): Promise<string[]> {
    const replies = await this.broadcastRequest("discovery", "ping", {}, filter, { timeoutMs: opts.timeoutMs, idleMs: opts.idleMs, onReply: (r) => opts.onFound?.(r.sender) });
    return replies.filter((r) => r.statuscode === Status.OK).map((r) => r.sender);
  }

  /** One signed request on the agent's broadcast subject; every matching node answers. */
  async broadcastRequest(agent: string, action: string, data: Record<string, unknown>, filter: Filter, opts: { timeoutMs: number; idleMs?: number; onReply?: (r: Reply) => void }): Promise<Reply[]> {
    const req = buildRequest({ key: this.key, collective: this.collective, agent, action, data, filter, ttl: this.ttl });
    const col = collectReplies(this.nc, { requestId: req.id, timeoutMs: opts.timeoutMs, idleMs: opts.idleMs, onReply: opts.onReply });
    this.nc.publish(subjects.broadcast(this.collective, agent), encodeRequest(req), { reply: col.inbox });
    col.start();
    return col.done;
  }

  /**
   * Calls agent#action on the given or discovered nodes, directly addressed, in batches if asked.
   * Completes as soon as every addressed node answered, or when the timeout passes.
   */
  async call(agent: string, action: string, data: Record<string, unknown>, opts: CallOptions = {}): Promise<RpcResult> {
    const t0 = performance.now();
    const input = opts.ddl ? validateInput(opts.ddl, action, data) : data;
    const filter = opts.filter ?? emptyFilter();
    let discovered = opts.nodes ? [...new Set(opts.nodes)].sort() : await this.discover({ ...opts.discovery, filter: withAgent(opts.discovery?.filter ?? filter, agent) });
    const t1 = performance.now();
    opts.onDiscovered?.(discovered);
    const targets = opts.limit ? applyLimit(discovered, opts.limit) : discovered;
    const timeoutMs = opts.timeoutMs ?? ((opts.ddl?.metadata.timeout ?? 10) + 5) * 1000;
    const batchSize = opts.batch && opts.batch > 0 ? opts.batch : targets.length;
    const replies: Reply[] = [];
    for (let i = 0; i < targets.length; i += batchSize) {
      if (i > 0 && opts.batchSleepMs) await new Promise((r) => setTimeout(r, opts.batchSleepMs)); // --batch-sleep is a requested pause
      const batch = targets.slice(i, i + batchSize);
      if (opts.signal?.aborted) break;
      replies.push(...(await this.callBatch(agent, action, input, filter, batch, timeoutMs, opts.onReply, opts.signal)));
    }
    const t2 = performance.now();
    const responded = new Set(replies.map((r) => r.sender));
    const ok = replies.filter((r) => r.statuscode === Status.OK).length;
    discovered = opts.limit ? targets : discovered;
    return {
      agent,
      action,
      discovered,
      replies,
      stats: {
        discovered: discovered.length,
        responded: responded.size,
        ok,
        failed: replies.length - ok,
        noResponse: targets.filter((n) => !responded.has(n)),
        discoveryMs: t1 - t0,
        callMs: t2 - t1,
        totalMs: t2 - t0,
      },
    };
  }

  private async callBatch(agent: string, action: string, data: Record<string, unknown>, filter: Filter, nodes: string[], timeoutMs: number, onReply?: (r: Reply) => void, signal?: AbortSignal): Promise<Reply[]> {
    if (nodes.length === 0) return [];
    const tree = targetTree(nodes);
    const req = buildRequest({ key: this.key, collective: this.collective, agent, action, data, filter, ttl: Math.max(this.ttl, Math.ceil(timeoutMs / 1000)), target: tree.target });
    const col = collectReplies(this.nc, { requestId: req.id, expect: new Set(nodes), timeoutMs, onReply });
    const bytes = encodeRequest(req);
    // one signed body for every node; each copy says whom it is for and proves it (protocol/targets.ts)
    for (const n of nodes) this.nc.publish(subjects.node(this.collective, n), bytes, { reply: col.inbox, headers: targetHeaders(n, tree.proof(n)) });
    col.start();
    if (!signal) return col.done;
    const cancel = () => col.cancel();
    signal.addEventListener("abort", cancel, { once: true });
    if (signal.aborted) col.cancel();
    try {
      return await col.done;
    } finally {
      signal.removeEventListener("abort", cancel);
    }
  }

  /**
   * The replies of a call as they arrive: `for await (const r of client.stream(...))`. The
   * iterator ends when every addressed node answered or the timeout passed; breaking out early
   * stops waiting.
   */
  async *stream(agent: string, action: string, data: Record<string, unknown>, opts: Omit<CallOptions, "onReply" | "signal"> = {}): AsyncGenerator<Reply, RpcResult, undefined> {
    const queue: Reply[] = [];
    let wake: (() => void) | undefined;
    const ac = new AbortController();
    let result: RpcResult | undefined;
    let failure: unknown;
    const done = this.call(agent, action, data, { ...opts, signal: ac.signal, onReply: (r) => (queue.push(r), wake?.()) }).then(
      (r) => (result = r),
      (e: unknown) => (failure = e),
    );
    void done.finally(() => wake?.());
    try {
      for (;;) {
        while (queue.length) yield queue.shift()!;
        if (failure) throw failure;
        if (result) return result;
        await new Promise<void>((r) => (wake = r));
        wake = undefined;
      }
    } finally {
      ac.abort();
      await done;
    }
  }

  /** A typed view of one agent: inputs and action names are checked at compile time and against the DDL. */
  agent<const D extends AgentDDL>(ddl: D): TypedAgentClient<D> {
    return {
      call: async (action, input, opts = {}) => {
        const typed = new WeakMap<Reply, Reply>();
        const check = (r: Reply) => {
          let t = typed.get(r);
          if (!t) typed.set(r, (t = typedReply(ddl, r)));
          return t;
        };
        const { onReply } = opts;
        const res = await this.call(ddl.metadata.name, action, input as Record<string, unknown>, { ...opts, ddl, onReply: onReply && ((r) => onReply(check(r) as TypedReply<D, typeof action>)) });
        const replies = res.replies.map(check);
        const ok = replies.filter((r) => r.statuscode === Status.OK).length;
        return { ...res, replies: replies as TypedReply<D, typeof action>[], stats: { ...res.stats, ok, failed: replies.length - ok } };
      },
    };
  }
}

/** As MCollective does, discovery for a call only finds nodes that offer the agent. */
function withAgent(filter: Filter, agent: string): Filter {
  return filter.agent.includes(agent) ? filter : { ...filter, agent: [...filter.agent, agent] };
}

/**
 * A reply whose data was checked against the action's DDL outputs. A node answering OK with an
 * output of the wrong type gets statuscode 5 (Unknown error) and a statusmsg naming the output;
 * the offending outputs are left out of `data`.
 */
export type TypedReply<D extends AgentDDL, A extends ActionName<D>> = Omit<Reply, "data"> & { data: ActionOutput<D, A> };

export interface TypedRpcResult<D extends AgentDDL, A extends ActionName<D>> extends Omit<RpcResult, "replies"> {
  replies: TypedReply<D, A>[];
}

export interface TypedAgentClient<D extends AgentDDL> {
  call<A extends ActionName<D>>(action: A, input: CallInput<D, A>, opts?: Omit<CallOptions, "ddl" | "onReply"> & { onReply?: (r: TypedReply<D, A>) => void }): Promise<TypedRpcResult<D, A>>;
}

function typedReply(ddl: AgentDDL, r: Reply): Reply {
  const { data, problems } = checkOutputs(ddl, r.action, r.data);
  if (problems.length === 0) return { ...r, data };
  const what = `the reply does not match the ${ddl.metadata.name} DDL: ${problems.join("; ")}`;
  return { ...r, data, ...(r.statuscode === Status.OK ? { statuscode: Status.UnknownError, statusmsg: what } : { statusmsg: `${r.statusmsg} (and ${what})` }) };
}

/** Discovery methods by name (`--dm`); `mc` and `file` are MCollective's spellings. */
export const DiscoveryMethods = ["broadcast", "mc", "flatfile", "file", "registry"] as const;
export type DiscoveryMethod = (typeof DiscoveryMethods)[number];

export type SourceSpec =
  | { method: "broadcast" | "mc" }
  | { method: "flatfile" | "file"; file: string }
  | ({ method: "registry" } & Omit<RegistrySourceOptions, "collective">);

/** A live event subscription. */
export interface EventSubscription {
  /** Resolves once the broker has the subscription: events published afterwards reach the handler. */
  readonly ready: Promise<void>;
  unsubscribe(): void;
  /** Messages dropped because they did not parse. */
  readonly invalid: number;
}
