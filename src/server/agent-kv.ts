import type { Logger } from "pino";
import type { Buckets } from "../broker/bucket.js";
import { bucketKey } from "../protocol/buckets.js";
import type { AgentKv, AgentKvOpener } from "../agent/agent.js";

// Key-value buckets the server keeps for its agents (agents never touch NATS): state an agent
// must not lose in a restart, such as the notify agent's delivered dedupe keys. One handle per
// bucket, bound to the connection of the node's current phase; until the node is in production
// (a bootstrap credential reaches no JetStream) opening fails and the agent carries on without.

export class AgentBuckets {
  private buckets: Buckets | undefined;
  private readonly open = new Map<string, Promise<AgentKv>>();

  constructor(private readonly log: Logger) {}

  /** Where buckets are opened from now (each phase's connection); handles of the last one are dropped. */
  connect(buckets: Buckets): void {
    this.buckets = buckets;
    this.open.clear();
  }

  /** What agents are given: opens `bucket` (created with this TTL when missing) once per connection. */
  readonly opener: AgentKvOpener = (bucket, o) => {
    const buckets = this.buckets;
    if (!buckets) return Promise.reject(new Error("no JetStream connection yet (the node is not in production)"));
    let p = this.open.get(bucket);
    if (!p) {
      p = this.bind(buckets, bucket, o.ttlMs);
      this.open.set(bucket, p);
      p.catch(() => this.open.get(bucket) === p && this.open.delete(bucket)); // retried on the next request
    }
    return p;
  };

  private async bind(buckets: Buckets, name: string, ttlMs: number): Promise<AgentKv> {
    const was = await buckets.bucketIfExists(name).then((b) => b?.status());
    // a changed dedupe window: the bucket keeps entries as long as the agent now remembers them
    const store = await buckets.bucket(name, { create: { history: 1, ttlMs, enforceTtl: true } });
    if (!was) this.log.info({ bucket: name, ttl_ms: ttlMs }, "created the agent's bucket");
    else if (was.ttlMs !== ttlMs) this.log.info({ bucket: name, ttl_ms: ttlMs, was_ms: was.ttlMs }, "changed the bucket's TTL to the agent's window");
    return {
      async get(key) {
        const e = await store.get(bucketKey(key));
        return e && e.value.length > 0 ? e.value : undefined;
      },
      async put(key, value) {
        await store.put(bucketKey(key), value);
      },
    };
  }
}
