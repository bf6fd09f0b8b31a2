import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import type { Logger } from "pino";
import type { Bucket, BucketCreate, Buckets } from "../broker/bucket.js";
import { connectBroker, resolveBrokers, resolveTls, type MemberMemory, type TlsSettings } from "../broker/connect.js";
import { validateInput } from "../ddl/validate.js";
import type { AgentDDL } from "../ddl/types.js";
import { MusterError } from "../errors.js";
import { DEFAULT_NODE_KEYS_BUCKET } from "../protocol/buckets.js";
import { encodeRequest } from "../protocol/envelope.js";
import { encodeNodeEvent, parseNodeEvent, type NodeEvent } from "../protocol/events.js";
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
import type { PuppetDbSource, PuppetDbSourceOptions } from "./discovery/puppetdb.js";
import type { RegistrySource, RegistrySourceOptions } from "./discovery/registry.js";
import type { DiscoveryOptions, NodeSource } from "./discovery/source.js";
import { applyLimit } from "./limit.js";
import { buildRequest, targetHeaders } from "./request.js";
import { targetTree } from "../protocol/targets.js";
import { KeyDirectory, readKeyDirectory } from "./key-directory.js";
import { typedAgent, type TypedAgentClient } from "./typed.js";
import type { CallOptions, DiscoverOptions, RejectedReply, RpcResult, RpcStats } from "./types.js";
import { judgeSigned, signatureVerdict, SigVerdict } from "./verify.js";
import { SETTLE_FROM, Verification } from "./verification.js";

export { Verification } from "./verification.js";

export type { CallOptions, DiscoverOptions, RejectedReply, RpcResult, RpcStats } from "./types.js";
export type { TypedAgentClient, TypedReply, TypedRpcResult } from "./typed.js";

// The client API that the CLI, the provisioner and users' scripts use: discover nodes, call actions
// on them in parallel (directly addressed, batched, limited), collect and summarise replies.

/** How long close() lets a drain take before closing outright (the broker may be gone). */
const CLOSE_DRAIN_MS = 3000;

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
  /** Gives up a persistent wait for the broker (the daemon is stopping). */
  signal?: AbortSignal;
  /** Members that did not answer earlier connects, tried last (the CLI's, cli/broker-memory.ts). */
  memory?: MemberMemory;
  /**
   * Check every reply of a call (default true): a bad signature, or a key other than the one the
   * node-key directory names for the sender, drops the reply; a sender the directory does not know
   * is kept and listed as unverified. Discovery is never checked (docs/security.md).
   */
  verify?: boolean;
  /** The node-key directory bucket (default DEFAULT_NODE_KEYS_BUCKET); false: no directory, every reply unverified. */
  keyBucket?: string | false;
}

/**
 * How long the node-key directory may be silent while a client reads it before replies are
 * treated as unverified: a limit on silence, since a 50,000-key read takes longer than this.
 */
const DIRECTORY_READ_MS = 5000;

export class MusterClient implements Buckets {
  readonly collective: string;
  private readonly ownsConnection: boolean;
  private readonly ttl: number;
  private readonly log: Logger;
  private readonly broadcast: BroadcastSource;
  private readonly verification: Verification;

  /**
   * The connection is the client's own: callers use what the client offers (onEvent, onLifecycle,
   * bucket, source); a command that needs a bare connection gets one from broker/connect.ts.
   */
  private readonly nc: NatsConnection;

  /** Up, or reconnecting (a broker gone): followed from the connection's own status events. */
  private linkUp = true;

  private constructor(nc: NatsConnection, readonly key: SigningKey, opts: ClientOptions, owns: boolean, verification?: Verification) {
    this.nc = nc;
    void (async () => {
      for await (const st of nc.status()) {
        if (st.type === "disconnect" || st.type === "reconnecting") this.linkUp = false;
        else if (st.type === "reconnect") this.linkUp = true;
      }
    })().catch(() => undefined);
    this.collective = opts.collective ?? "muster";
    if (!isValidCollective(this.collective)) throw new MusterError("MUSTER_USAGE", `invalid collective name ${JSON.stringify(this.collective)}`);
    this.ownsConnection = owns;
    this.ttl = opts.ttl ?? 60;
    this.log = opts.log ?? silentLogger;
    this.broadcast = new BroadcastSource((f, o) => this.broadcastDiscover(f, o));
    const bucket = opts.keyBucket ?? DEFAULT_NODE_KEYS_BUCKET;
    this.verification = verification ?? new Verification(opts.verify !== false, () => (bucket === false ? Promise.resolve(new KeyDirectory("no key directory configured")) : this.loadDirectory(bucket)));
  }

  /** How many replies this client verified on its event loop and on its worker pool, and the pool's threads up (bench and tests). */
  get verifiedWhere(): { inline: number; workers: number; threads: number } {
    return { ...this.verification.pool.counts, threads: this.verification.pool.readyWorkers };
  }

  /** Whether the connection to the broker is up now (false while it reconnects, and once closed). */
  get connected(): boolean {
    return this.linkUp && !this.nc.isClosed();
  }

  /**
   * Moves the connection to another member of the cluster. For a daemon whose member answers
   * plain messages but no longer the JetStream API (seen on nats-server 2.9 right after members
   * died and came back): the next member most likely does.
   */
  async reconnect(): Promise<void> {
    await this.nc.reconnect();
  }

  /** Whether this client checks every reply's signature (a reply with a bad one never reaches its caller). */
  get verifies(): boolean {
    return this.verification.enabled;
  }

  /** Starts reading the node-key directory now, beside other work, so replies to a call made later are judged at once. */
  readKeyDirectory(): void {
    if (this.verification.enabled) void this.verification.directory();
  }

  /**
   * Whether replies to a call made now would be judged at once: no verification, or the node-key
   * directory read (started now if it was not). False when it is still being read after `ms`: a
   * call's replies would wait for it (`muster health` asks quiet nodes through the client without
   * one then: a store electing a leader serves reads but no watch, and the directory's read waited
   * past the ask, which counted every node that answered as silent).
   */
  async keyDirectoryWithin(ms: number): Promise<boolean> {
    if (!this.verification.enabled) return true;
    const dir = this.verification.directory();
    if (dir instanceof KeyDirectory) return true;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<false>((r) => (timer = setTimeout(() => r(false), ms)));
    try {
      return await Promise.race([dir.then(() => true as const, () => false as const), late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** The node-key directory, or an empty one saying why there is none; never fails a call. */
  private async loadDirectory(bucket: string): Promise<KeyDirectory> {
    return readKeyDirectory(() => this.bucketIfExists(bucket), bucket, DIRECTORY_READ_MS);
  }

  static async connect(opts: ClientOptions = {}): Promise<MusterClient> {
    const key = opts.key ?? loadOrCreateSigningKey();
    if (opts.nc) return new MusterClient(opts.nc, key, opts, false);
    const nc = await connectBroker({ servers: opts.brokers ?? resolveBrokers(opts.broker, undefined), name: opts.name ?? "muster-client", log: opts.log, tls: resolveTls(opts.tls), persistent: opts.persistent, from: opts.from, signal: opts.signal, memory: opts.memory });
    return new MusterClient(nc, key, opts, true);
  }

  /**
   * The same connection and key addressing another collective (the provisioner reaches waiting
   * nodes in `provisioning` and masters in the main one). Closing the view leaves the connection open.
   */
  withCollective(collective: string): MusterClient {
    if (collective === this.collective) return this;
    return new MusterClient(this.nc, this.key, { collective, ttl: this.ttl, log: this.log }, false, this.verification);
  }

  /**
   * The same connection, its replies checked against the node-key directory `bucket`: for a
   * client made without one (the provisioner's, which holds waiting nodes to its own pins) that
   * must know whether another party's reply is verified (a master's, master.require_verified).
   * `false`: no directory, every well-signed reply kept unverified at once (`muster health`
   * asking nodes while the store, which holds the directory too, cannot be read).
   */
  withKeyDirectory(bucket: string | false = DEFAULT_NODE_KEYS_BUCKET): MusterClient {
    return new MusterClient(this.nc, this.key, { collective: this.collective, ttl: this.ttl, log: this.log, keyBucket: bucket }, false);
  }

  async close(): Promise<void> {
    if (!this.ownsConnection) return;
    await this.verification.close();
    if (this.nc.isClosed()) return;
    // drain() waits for the broker: while it is away (reconnecting) that is forever, and a daemon
    // asked to stop must stop. Past the bound the connection is closed without draining.
    let timer: NodeJS.Timeout | undefined;
    const bounded = new Promise<void>((r) => (timer = setTimeout(r, CLOSE_DRAIN_MS)));
    await Promise.race([this.nc.drain().catch(() => undefined), bounded]);
    clearTimeout(timer);
    if (!this.nc.isClosed()) await this.nc.close().catch(() => undefined);
  }

  /**
   * A discovery source by its name, as `--dm` spells it: `broadcast` (or `mc`), `flatfile` (or
   * `file`, with `file`), `registry` (loaded on demand, so callers that never use it do not load
   * JetStream), `puppetdb` (through the registry daemon). Pass it as `discover({source})` or `call(..., {discovery: {source}})`.
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
        const { method: _m, ...opts } = spec;
        return this.registry(opts);
      }
      case "puppetdb": {
        const { method: _m, ...opts } = spec;
        return this.puppetdb(opts);
      }
      default:
        throw new MusterError("MUSTER_USAGE", `unknown discovery method ${JSON.stringify((spec as { method: unknown }).method)}; known: ${DiscoveryMethods.join(", ")}`);
    }
  }

  /** The registry of this collective: a discovery source that also reads whole records (`muster registry query`). */
  async registry(opts: Omit<RegistrySourceOptions, "collective"> = {}): Promise<RegistrySource> {
    const { RegistrySource } = await import("./discovery/registry.js");
    return new RegistrySource(this.nc, { collective: this.collective, ...opts });
  }

  /** PuppetDB, through the registry daemon that holds its credential (docs/puppetdb.md): a discovery source. */
  async puppetdb(opts: Omit<PuppetDbSourceOptions, "collective"> = {}): Promise<PuppetDbSource> {
    const { PuppetDbSource } = await import("./discovery/puppetdb.js");
    return new PuppetDbSource(this.nc, { collective: this.collective, ...opts });
  }

  /**
   * Node events (`muster.event.<agent>.<event>`, ActionContext.emit) from now on; `*` matches any
   * agent or event. Await `ready` before starting work whose events must not be missed: it
   * resolves once the broker has the subscription. Malformed events are dropped and told to
   * `onInvalid`.
   *
   * Each event is checked as a reply is (judgeSigned): a bad signature, or an event unsigned or
   * signed by another key than the one the node-key directory names for its identity, is dropped,
   * logged and told to `onInvalid`; an event from an identity the directory does not know reaches
   * `handler` with `verified: false`. Events are delivered in the order they arrived, also while
   * the directory is still being read. `verify: false` skips the check for display-only uses
   * (and every event is then unverified), as does a client made with `verify: false`.
   */
  onEvent(agent: string, event: string, handler: (e: NodeEvent, trust: { verified: boolean }) => void, opts: { onInvalid?: (reason: string, subject: string) => void; verify?: boolean } = {}): EventSubscription {
    const subject = subjects.event(agent, event);
    const v = this.verification;
    if (!v.enabled || opts.verify === false) return this.subscribeParsed(subject, parseNodeEvent, (e) => handler(e, { verified: false }), opts.onInvalid);
    void v.directory(); // read it while the subscription is made
    let dropped = 0;
    let queue: Promise<void> | undefined; // events waiting for the directory, in order
    const deliver = (e: NodeEvent, dir: KeyDirectory) => {
      const t = judgeSigned(e.identity, signatureVerdict(e), e.pubkey, dir.get(e.identity)?.pubkey);
      if (!t.keep) {
        dropped++;
        this.log.warn({ identity: e.identity, agent: e.agent, event: e.event, pubkey: e.pubkey }, `dropped an event claiming to be from ${e.identity}: ${t.why}`);
        opts.onInvalid?.(`dropped an event claiming to be from ${e.identity}: ${t.why}`, subject);
        return;
      }
      try {
        handler(e, { verified: t.verified });
      } catch (err) {
        this.log.warn({ subject, err: (err as Error).message }, "event handler failed");
      }
    };
    const check = (e: NodeEvent) => {
      const dir = v.directory();
      if (dir instanceof KeyDirectory && !queue) return deliver(e, dir);
      const mine: Promise<void> = (queue ?? Promise.resolve())
        .then(async () => deliver(e, await dir))
        .catch((err: unknown) => this.log.warn({ subject, err: (err as Error).message }, "event check failed"))
        .finally(() => {
          if (queue === mine) queue = undefined;
        });
      queue = mine;
    };
    const sub = this.subscribeParsed(subject, parseNodeEvent, check, opts.onInvalid);
    return {
      ready: sub.ready,
      unsubscribe: () => sub.unsubscribe(),
      get invalid() {
        return sub.invalid + dropped;
      },
    };
  }

  /**
   * Publish an event on `muster.event.<agent>.<event>` as a node's runtime does (a client process
   * reporting its own work, e.g. runall progress). Checked like every subscriber checks it.
   */
  publishEvent(e: NodeEvent): void {
    const bytes = encodeNodeEvent(e);
    const r = parseNodeEvent(bytes, subjects.event(e.agent, e.event));
    if (!r.ok) throw new MusterError("MUSTER_USAGE", `not a valid event: ${r.reason}`);
    this.nc.publish(subjects.event(e.agent, e.event), bytes);
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
   * A key-value bucket (broker/bucket.ts): opened, or created when absent with `create` (its
   * options apply only then; an existing bucket keeps its own). Without `create` a missing bucket
   * is MUSTER_BUCKET_NOT_FOUND.
   */
  async bucket(name: string, opts: { create?: BucketCreate } = {}): Promise<Bucket> {
    const { openBucket } = await import("../broker/bucket.js");
    return openBucket(this.nc, name, opts);
  }

  /** The bucket if it exists (something once created it), else undefined; never creates it. */
  async bucketIfExists(name: string): Promise<Bucket | undefined> {
    const { bucketIfExists } = await import("../broker/bucket.js");
    return bucketIfExists(this.nc, name);
  }

  /** JetStream streams on this connection (broker/stream.ts): found or created, read, followed. */
  async streams(): Promise<import("../broker/stream.js").Streams> {
    const { streamsOn } = await import("../broker/stream.js");
    return streamsOn(this.nc);
  }

  /** Rebuild a JetStream cluster member's copies of the replicated streams (broker/rebuild.ts; an admin's credential). */
  async rebuildMember(member: string, o: Parameters<typeof import("../broker/rebuild.js").rebuildMember>[2] = {}): Promise<import("../broker/rebuild.js").RebuildResult[]> {
    const { rebuildMember } = await import("../broker/rebuild.js");
    return rebuildMember(this.nc, member, o);
  }

  /**
   * The last `limit` records of the nodes' audit stream (audit.stream, docs/security.md), oldest
   * first; undefined when no node created the stream. The web console's audit page reads it.
   */
  async auditRecords(stream = "MUSTER_AUDIT", limit = 1000): Promise<import("../security/audit.js").StoredAuditEntry[] | undefined> {
    const { recentAuditRecords } = await import("../security/audit.js");
    return recentAuditRecords(await this.streams(), stream, limit);
  }

  /** Identities of the nodes matching the filter, sorted. */
  async discover(opts: DiscoverOptions = {}): Promise<string[]> {
    const source = opts.source ?? this.broadcast;
    const anticipate = opts.anticipate ? new Set(opts.anticipate) : undefined;
    const found = await source.discover(opts.filter ?? emptyFilter(), { timeoutMs: opts.timeoutMs ?? 2000, idleMs: opts.idleMs ?? 250, anticipate, onFound: opts.onFound });
    return [...new Set(found)].sort();
  }

  private async broadcastDiscover(filter: Filter, opts: DiscoveryOptions): Promise<string[]> {
    const replies = await this.broadcastRequest("discovery", "ping", {}, filter, { timeoutMs: opts.timeoutMs, idleMs: opts.idleMs, anticipate: opts.anticipate, onReply: (r) => opts.onFound?.(r.sender) });
    return replies.filter((r) => r.statuscode === Status.OK).map((r) => r.sender);
  }

  /** One signed request on the agent's broadcast subject; every matching node answers. */
  async broadcastRequest(agent: string, action: string, data: Record<string, unknown>, filter: Filter, opts: { timeoutMs: number; idleMs?: number; anticipate?: ReadonlySet<string>; onReply?: (r: Reply) => void }): Promise<Reply[]> {
    const req = buildRequest({ key: this.key, collective: this.collective, agent, action, data, filter, ttl: this.ttl });
    const col = collectReplies(this.nc, { requestId: req.id, timeoutMs: opts.timeoutMs, idleMs: opts.idleMs, anticipate: opts.anticipate, onReply: opts.onReply });
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
    if (this.verification.enabled) void this.verification.directory(); // read while discovery runs
    const given = opts.filter ?? emptyFilter();
    // a source may have answered part of the filter that no node can (PuppetDB's pql: identities)
    const source = opts.discovery?.source;
    const filter = source?.requestFilter ? source.requestFilter(given) : given;
    let discovered = opts.nodes ? [...new Set(opts.nodes)].sort() : await this.discover({ ...opts.discovery, filter: withAgent(opts.discovery?.filter ?? given, agent) });
    const t1 = performance.now();
    opts.onDiscovered?.(discovered);
    const targets = opts.limit ? applyLimit(discovered, opts.limit) : discovered;
    const timeoutMs = opts.timeoutMs ?? ((opts.ddl?.metadata.timeout ?? 10) + 5) * 1000;
    const batchSize = opts.batch && opts.batch > 0 ? opts.batch : targets.length;
    const replies: Reply[] = [];
    const trust: Trust = { unverified: new Set(), rejected: [], onRejected: opts.onRejected };
    if (this.verification.enabled && targets.length >= SETTLE_FROM) await this.verification.settled();
    for (let i = 0; i < targets.length; i += batchSize) {
      if (i > 0 && opts.batchSleepMs) await new Promise((r) => setTimeout(r, opts.batchSleepMs)); // --batch-sleep is a requested pause
      const batch = targets.slice(i, i + batchSize);
      if (opts.signal?.aborted) break;
      replies.push(...(await this.callBatch(agent, action, input, filter, batch, timeoutMs, trust, opts.onReply, opts.signal)));
    }
    const t2 = performance.now();
    const responded = new Set(replies.map((r) => r.sender));
    const ok = replies.filter((r) => r.statuscode === Status.OK).length;
    discovered = opts.limit ? targets : discovered;
    const unverified = [...trust.unverified].filter((n) => responded.has(n)).sort();
    return {
      agent,
      action,
      discovered,
      replies,
      unverified,
      rejected: trust.rejected,
      stats: {
        discovered: discovered.length,
        responded: responded.size,
        ok,
        failed: replies.length - ok,
        noResponse: targets.filter((n) => !responded.has(n)),
        verified: replies.length - unverified.length,
        unverified: unverified.length,
        rejected: trust.rejected.length,
        discoveryMs: t1 - t0,
        callMs: t2 - t1,
        totalMs: t2 - t0,
      },
    };
  }

  /**
   * The collector's check for one call: the signature (pool), then the sender's key against the
   * directory. Drops what fails, records what is kept unproven.
   */
  private replyCheck(trust: Trust): ((raw: Uint8Array, r: Reply, done: (keep: boolean) => void) => void) | undefined {
    if (!this.verification.enabled) return undefined;
    const v = this.verification;
    const judge = (dir: KeyDirectory, r: Reply, sig: SigVerdict): boolean => {
      const v = judgeSigned(r.sender, sig, r.pubkey, dir.get(r.sender)?.pubkey);
      if (!v.keep) {
        trust.rejected.push({ sender: r.sender, reason: v.why });
        this.log.warn({ sender: r.sender, pubkey: r.pubkey }, `dropped a reply claiming to be from ${r.sender}: ${v.why}`);
        trust.onRejected?.(r, v.why);
        return false;
      }
      if (!v.verified) trust.unverified.add(r.sender);
      return true;
    };
    return (raw, r, done) =>
      v.pool.check(raw, r, (sig) => {
        const dir = v.directory();
        if (dir instanceof KeyDirectory) done(judge(dir, r, sig));
        else void dir.then((d) => done(judge(d, r, sig)));
      });
  }

  private async callBatch(agent: string, action: string, data: Record<string, unknown>, filter: Filter, nodes: string[], timeoutMs: number, trust: Trust, onReply?: (r: Reply) => void, signal?: AbortSignal): Promise<Reply[]> {
    if (nodes.length === 0) return [];
    const tree = targetTree(nodes);
    const req = buildRequest({ key: this.key, collective: this.collective, agent, action, data, filter, ttl: Math.max(this.ttl, Math.ceil(timeoutMs / 1000)), target: tree.target });
    this.verification.awaiting(nodes.length);
    const col = collectReplies(this.nc, { requestId: req.id, expect: new Set(nodes), timeoutMs, onReply, check: this.replyCheck(trust) });
    void col.done.finally(() => this.verification.awaiting(-nodes.length)).catch(() => undefined);
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

  /**
   * A typed view of one agent: inputs and action names are checked at compile time and against the
   * DDL, outputs on arrival. `name`: the agent is installed under another name than its DDL's
   * (mcprovision's configs name their agents).
   */
  agent<const D extends AgentDDL>(ddl: D, opts: { name?: string } = {}): TypedAgentClient<D> {
    return typedAgent(this, ddl, opts.name ?? ddl.metadata.name);
  }
}

interface Trust {
  unverified: Set<string>;
  rejected: RejectedReply[];
  onRejected?: (r: Reply, reason: string) => void;
}

/** As MCollective does, discovery for a call only finds nodes that offer the agent. */
function withAgent(filter: Filter, agent: string): Filter {
  return filter.agent.includes(agent) ? filter : { ...filter, agent: [...filter.agent, agent] };
}

/** Discovery methods by name (`--dm`); `mc` and `file` are MCollective's spellings. */
export const DiscoveryMethods = ["broadcast", "mc", "flatfile", "file", "registry", "puppetdb"] as const;
export type DiscoveryMethod = (typeof DiscoveryMethods)[number];

export type SourceSpec =
  | { method: "broadcast" | "mc" }
  | { method: "flatfile" | "file"; file: string }
  | ({ method: "registry" } & Omit<RegistrySourceOptions, "collective">)
  | ({ method: "puppetdb" } & Omit<PuppetDbSourceOptions, "collective">);

/** A live event subscription. */
export interface EventSubscription {
  /** Resolves once the broker has the subscription: events published afterwards reach the handler. */
  readonly ready: Promise<void>;
  unsubscribe(): void;
  /** Messages dropped because they did not parse. */
  readonly invalid: number;
}
