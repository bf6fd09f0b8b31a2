import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import type { Logger } from "pino";
import { flushWithin } from "../broker/connect.js";
import { compileFilter, validateWireFilter, type CompiledFilter } from "../filter/index.js";
import { encodeJson, encodeReply } from "../protocol/envelope.js";
import { encodeLifecycleEvent, lifecycleEvent, lifecycleSubject, LifecycleComponents, type LifecycleType } from "../protocol/lifecycle.js";
import { Status } from "../protocol/status.js";
import { subjects } from "../protocol/subjects.js";
import { PROOF_HEADER, TARGET_HEADER } from "../protocol/targets.js";
import type { Reply, Request } from "../protocol/types.js";
import { Heartbeats, type HeartbeatOptions } from "./heartbeat.js";
import type { RequestIntake } from "./intake.js";
import { MATCH_EVERY_NODE, type NodeRuntime } from "./runtime.js";

// Binds NodeRuntimes to NATS: subscriptions, dispatch, replies, registration and lifecycle events.
// One message is decoded and verified once, however many nodes this process hosts.

/** A node answers at most one registry solicitation per this gap (per collective): a flood costs one registration. */
export const SOLICIT_MIN_GAP_MS = 10_000;
/** Answers are spread over up to this long, so a large fleet does not register in one burst. */
export const SOLICIT_MAX_SPLAY_MS = 2_000;

export interface NodeHostOptions {
  nc: NatsConnection;
  intake: RequestIntake;
  runtimes: NodeRuntime[];
  log: Logger;
  /** Subscribe with wildcards (`broadcast.agent.*`, `node.>`): many nodes behind one connection. */
  wildcard: boolean;
  registration?: { interval: number; splay: boolean };
  /** Heartbeats (server/heartbeat.ts); absent or interval 0: none. */
  heartbeat?: HeartbeatOptions;
  component?: string;
  version: string;
}

export class NodeHost {
  private readonly subs: Subscription[] = [];
  private readonly byIdentity = new Map<string, NodeRuntime>();
  private readonly byCollective = new Map<string, NodeRuntime[]>();
  private readonly timers: NodeJS.Timeout[] = [];
  private pending = 0;
  private readonly filters = new WeakMap<Request, CompiledFilter>();
  private idle: (() => void) | undefined;
  /** "<collective> <identity>" -> when that node last answered a solicitation. */
  private readonly solicited = new Map<string, number>();
  /** Solicited registrations waiting out their splay. */
  private readonly splayed = new Set<NodeJS.Timeout>();
  private stopping = false;
  private readonly heartbeats: Heartbeats | undefined;

  constructor(private readonly opts: NodeHostOptions) {
    this.heartbeats = opts.heartbeat && new Heartbeats(opts.runtimes, (subject, data) => opts.nc.publish(subject, data), { ...opts.heartbeat, version: opts.version, log: opts.log });
    for (const rt of opts.runtimes) rt.emitter = (subject, payload) => opts.nc.publish(subject, payload);
    for (const rt of opts.runtimes) {
      this.byIdentity.set(rt.identity, rt);
      for (const c of rt.collectives) {
        const list = this.byCollective.get(c) ?? [];
        list.push(rt);
        this.byCollective.set(c, list);
      }
    }
  }

  async start(): Promise<void> {
    const { nc } = this.opts;
    for (const [collective, runtimes] of this.byCollective) {
      if (this.opts.wildcard) {
        this.subscribe(`${collective}.broadcast.agent.*`, collective);
        this.subscribe(subjects.allNodes(collective), collective);
      } else {
        const agents = new Set<string>(["discovery"]);
        for (const rt of runtimes) for (const la of rt.loadedAgents()) agents.add(la.agent.ddl.metadata.name);
        for (const a of agents) this.subscribe(subjects.broadcast(collective, a), collective);
        for (const rt of runtimes) this.subscribe(subjects.node(collective, rt.identity), collective);
      }
    }
    await nc.flush();
    for (const rt of this.opts.runtimes) this.publishLifecycle("startup", rt);
    this.startRegistration();
    this.heartbeats?.start();
    if (this.heartbeats) this.beatOnReconnect(this.heartbeats);
  }

  /** Back on a broker (another, after one died): heartbeats at once. */
  private beatOnReconnect(h: Heartbeats): void {
    void (async () => {
      for await (const s of this.opts.nc.status()) {
        if (this.stopping) return;
        if (s.type === "reconnect") h.beatNow();
      }
    })().catch(() => undefined);
  }

  private subscribe(subject: string, collective: string): void {
    const sub = this.opts.nc.subscribe(subject, {
      callback: (err, msg) => {
        if (err) {
          this.opts.log.error({ err: err.message, subject }, "subscription error");
          return;
        }
        let work: Promise<void> | undefined;
        try {
          work = this.onMessage(collective, msg);
        } catch (e) {
          this.opts.log.error({ err: (e as Error).message }, "unhandled error dispatching a message");
        }
        if (!work) return; // handled synchronously: nothing in flight
        this.pending++;
        work
          .catch((e) => this.opts.log.error({ err: (e as Error).message }, "unhandled error dispatching a message"))
          .finally(() => {
            if (--this.pending === 0) this.idle?.();
          });
      },
    });
    this.subs.push(sub);
  }

  /**
   * One message through the pipeline for every node it reaches. Returns a promise only when some
   * node's work went asynchronous (a data plugin in the filter, a handler returning a promise):
   * a broadcast ping to 10,000 emulated nodes runs as one synchronous loop.
   */
  private onMessage(collective: string, msg: Msg): Promise<void> | undefined {
    const { log, intake } = this.opts;
    const directIdentity = subjects.identityOf(collective, msg.subject);
    const direct = directIdentity !== undefined;
    const target = direct ? this.byIdentity.get(directIdentity) : undefined;
    if (direct && !target) return; // another process's node (wildcard subscription)

    const res = intake.accept(msg.subject, msg.data, direct ? { identity: directIdentity, target: msg.headers?.get(TARGET_HEADER) || undefined, proof: msg.headers?.get(PROOF_HEADER) || undefined } : {});
    if (!res.ok) {
      log.warn({ subject: msg.subject, reason: res.reason, caller: res.request?.caller, requestid: res.request?.id }, "request rejected");
      // Only direct requests get a rejection reply: answering garbage on broadcast would amplify it.
      if (target && msg.reply) this.respond(msg, target.rejection(res.request?.id ?? "", res.status, res.reason, res.request?.agent, res.request?.action));
      return;
    }
    const req = res.request;
    if (req.collective !== collective) {
      log.warn({ subject: msg.subject, collective: req.collective }, "request collective does not match its subject; dropped");
      // a direct caller would otherwise wait for its timeout
      if (target && msg.reply) this.respond(msg, target.rejection(req.id, Status.InvalidData, `request for collective '${req.collective}' arrived on collective '${collective}'`, req.agent, req.action));
      return;
    }
    if (!direct && msg.subject !== subjects.broadcast(collective, req.agent)) {
      log.warn({ subject: msg.subject, agent: req.agent }, "request agent does not match its subject; dropped");
      return;
    }
    let filter: CompiledFilter;
    try {
      filter = this.compiledFilter(req);
    } catch (e) {
      log.warn({ requestid: req.id, err: (e as Error).message }, "request filter is invalid");
      intake.filterRejected();
      if (target && msg.reply) this.respond(msg, target.rejection(req.id, Status.InvalidData, `invalid filter: ${(e as Error).message}`, req.agent, req.action));
      return;
    }
    if (!msg.reply) return; // nowhere to answer; nothing to do
    if (target) {
      const reply = target.handle(req, filter, true);
      if (reply instanceof Promise) return reply.then((r) => r && this.respond(msg, r));
      if (reply) this.respond(msg, reply);
      return;
    }
    let waiting: Promise<void>[] | undefined;
    for (const rt of this.byCollective.get(collective) ?? []) {
      try {
        const reply = rt.handle(req, filter, false);
        if (reply instanceof Promise) (waiting ??= []).push(reply.then((r) => r && this.respond(msg, r)));
        else if (reply) this.respond(msg, reply);
      } catch (e) {
        log.error({ identity: rt.identity, err: (e as Error).message }, "unhandled error dispatching a message");
      }
    }
    if (waiting) return Promise.all(waiting).then(() => undefined);
  }

  /**
   * The request's filter, checked and compiled once per request: the intake hands back the same
   * Request object for every identical message (one request directly addressed to many nodes).
   */
  private compiledFilter(req: Request): CompiledFilter {
    let filter = this.filters.get(req);
    if (!filter) {
      const wire = validateWireFilter(req.filter);
      const empty = wire.fact.length + wire.class.length + wire.identity.length + wire.agent.length + wire.compound.length === 0;
      filter = empty ? MATCH_EVERY_NODE : compileFilter(wire);
      this.filters.set(req, filter);
    }
    return filter;
  }

  private respond(msg: Msg, reply: Reply): void {
    try {
      msg.respond(encodeReply(reply));
    } catch (e) {
      this.opts.log.warn({ err: (e as Error).message }, "cannot publish reply");
    }
  }

  private publishLifecycle(type: LifecycleType, rt: NodeRuntime): void {
    const component = this.opts.component ?? LifecycleComponents.server;
    try {
      const event = rt.signed(lifecycleEvent(type, { identity: rt.identity, component, version: this.opts.version, collectives: rt.collectives, time: Date.now() }));
      this.opts.nc.publish(lifecycleSubject(event), encodeLifecycleEvent(event));
    } catch {
      // connection closing; lifecycle events are best effort
    }
  }

  registrationPayload(rt: NodeRuntime): Uint8Array {
    return encodeJson({ ...rt.metadata(), time: Date.now(), version: this.opts.version });
  }

  private publishRegistration(rt: NodeRuntime, collective: string): void {
    try {
      this.opts.nc.publish(subjects.registration(collective), this.registrationPayload(rt));
    } catch {
      // not connected right now; the next interval tries again
    }
  }

  /**
   * A registry that just started asks every node to register now instead of waiting out the
   * interval (subjects.registrationSolicit). The message carries nothing a node acts on beyond
   * "register": it is unsigned, so it is rate-limited per node and only registries may publish it.
   */
  private answerSolicitations(): void {
    for (const [collective, runtimes] of this.byCollective) {
      const sub = this.opts.nc.subscribe(subjects.registrationSolicit(collective), {
        callback: (err) => {
          if (err) return;
          const now = Date.now();
          for (const rt of runtimes) {
            const key = `${collective} ${rt.identity}`;
            if (now - (this.solicited.get(key) ?? -Infinity) < SOLICIT_MIN_GAP_MS) continue;
            this.solicited.set(key, now);
            const t = setTimeout(() => {
              this.splayed.delete(t);
              this.publishRegistration(rt, collective);
            }, Math.random() * SOLICIT_MAX_SPLAY_MS);
            t.unref();
            this.splayed.add(t);
          }
        },
      });
      this.subs.push(sub);
    }
  }

  /** Registers every hosted node now, outside the interval (a node that just joined the fleet). No-op with registration off. */
  registerNow(): void {
    const reg = this.opts.registration;
    if (!reg || reg.interval <= 0 || this.stopping) return;
    for (const rt of this.opts.runtimes) for (const c of rt.collectives) this.publishRegistration(rt, c);
  }

  private startRegistration(): void {
    const reg = this.opts.registration;
    if (!reg || reg.interval <= 0) return;
    this.answerSolicitations();
    for (const rt of this.opts.runtimes) {
      const publish = () => {
        for (const c of rt.collectives) this.publishRegistration(rt, c);
      };
      const first = reg.splay ? Math.random() * reg.interval * 1000 : 0;
      const t = setTimeout(() => {
        publish();
        const iv = setInterval(publish, reg.interval * 1000);
        iv.unref();
        this.timers.push(iv);
      }, first);
      t.unref();
      this.timers.push(t);
    }
  }

  /** Stop taking requests, let in-flight ones finish (bounded), announce shutdown. */
  async stop(graceMs = 5000): Promise<void> {
    this.stopping = true;
    for (const t of this.timers) clearTimeout(t);
    for (const t of this.splayed) clearTimeout(t);
    for (const s of this.subs) s.unsubscribe();
    // Said before in-flight work finishes: whoever waits on this node (the provisioner) stops
    // waiting now rather than at its timeout; the replies still go out.
    await this.heartbeats?.stop().catch(() => undefined);
    for (const rt of this.opts.runtimes) this.publishLifecycle("shutdown", rt);
    if (this.pending > 0) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(() => {
          for (const rt of this.opts.runtimes) rt.abortAll();
          resolve();
        }, graceMs);
        this.idle = () => {
          clearTimeout(t);
          resolve();
        };
      });
    }
    await flushWithin(this.opts.nc); // bounded: with the broker down, shutdown must not wait for it
  }
}
