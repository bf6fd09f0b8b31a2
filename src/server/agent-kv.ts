import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";
import type { AgentKv, AgentKvOpener } from "./agent.js";

// JetStream KV buckets the server keeps for its agents (agents never touch NATS): state an agent
// must not lose in a restart, such as the notify agent's delivered dedupe keys. One handle per
// bucket, bound to the connection of the node's current phase; until the node is in production
// (a bootstrap credential reaches no JetStream) opening fails and the agent carries on without.

const enc = new TextEncoder();

/** KV keys allow [-/_=.a-zA-Z0-9]; anything else is hex-escaped (the caller may hash instead). */
function kvKey(key: string): string {
  return key.replace(/[^-/_=.a-zA-Z0-9]/g, (c) => `_${c.charCodeAt(0).toString(16).padStart(2, "0")}`);
}

export class AgentBuckets {
  private nc: NatsConnection | undefined;
  private readonly open = new Map<string, Promise<AgentKv>>();

  constructor(private readonly log: Logger) {}

  /** The connection buckets are opened on from now (each phase's); handles of the last one are dropped. */
  connect(nc: NatsConnection): void {
    this.nc = nc;
    this.open.clear();
  }

  /** What agents are given: opens `bucket` (created with this TTL when missing) once per connection. */
  readonly opener: AgentKvOpener = (bucket, o) => {
    const nc = this.nc;
    if (!nc) return Promise.reject(new Error("no JetStream connection yet (the node is not in production)"));
    let p = this.open.get(bucket);
    if (!p) {
      p = this.bind(nc, bucket, o.ttlMs);
      this.open.set(bucket, p);
      p.catch(() => this.open.get(bucket) === p && this.open.delete(bucket)); // retried on the next request
    }
    return p;
  };

  private async bind(nc: NatsConnection, bucket: string, ttlMs: number): Promise<AgentKv> {
    const [{ jetstream, jetstreamManager, JetStreamApiError, JetStreamApiCodes }, { Kvm }] = await Promise.all([import("@nats-io/jetstream"), import("@nats-io/kv")]);
    const kvm = new Kvm(jetstream(nc));
    let kv;
    try {
      kv = await kvm.open(bucket);
      const ttl = (await kv.status()).ttl;
      if (ttl !== ttlMs) {
        // a changed dedupe window: the bucket keeps entries as long as the agent now remembers them
        const jsm = await jetstreamManager(nc);
        const info = await jsm.streams.info(`KV_${bucket}`);
        await jsm.streams.update(info.config.name, { ...info.config, max_age: ttlMs * 1e6 });
        this.log.info({ bucket, ttl_ms: ttlMs, was_ms: ttl }, "changed the bucket's TTL to the agent's window");
      }
    } catch (e) {
      if (!(e instanceof JetStreamApiError && e.code === JetStreamApiCodes.StreamNotFound) && !/stream not found|bucket not found/i.test((e as Error).message)) throw e;
      kv = await kvm.create(bucket, { history: 1, ttl: ttlMs });
      this.log.info({ bucket, ttl_ms: ttlMs }, "created the agent's bucket");
    }
    const store = kv;
    return {
      async get(key) {
        const e = await store.get(kvKey(key));
        return e && e.operation === "PUT" && e.value.length > 0 ? e.value : undefined;
      },
      async put(key, value) {
        await store.put(kvKey(key), typeof value === "string" ? enc.encode(value) : value);
      },
    };
  }
}
