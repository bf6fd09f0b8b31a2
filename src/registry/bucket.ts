import { DeliverPolicy, jetstream, jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import { nanos, type NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";
import { MusterError } from "../errors.js";
import { kvStreamName } from "../protocol/buckets.js";
import { decodeRecord, keyFor, type RegistryRecord } from "./record.js";

// The registry's JetStream KV bucket: one key per node (record.ts keyFor), history 1, and the
// bucket's max_age as the expiry. nats-server 2.9 has no per-message TTL but does expire stream
// messages by age, and every accepted registration rewrites the node's key, so a node that stops
// registering disappears from the bucket on its own. Expiry removes messages without a watch
// event, so readers also drop records older than the bucket's max_age (select.ts isCurrent).

/** The registry's default bucket; the name is a wire contract and lives in protocol/buckets.ts. */
export { DEFAULT_REGISTRY_BUCKET as DEFAULT_BUCKET } from "../protocol/buckets.js";
const BUCKET_RE = /^[-\w]+$/;

export function isValidBucketName(name: string): boolean {
  return BUCKET_RE.test(name) && name.length <= 64;
}

const streamName = kvStreamName;
const subjectPrefix = (bucket: string) => `$KV.${bucket}.`;

function unavailable(bucket: string, detail: string): MusterError {
  return new MusterError(
    "MUSTER_REGISTRY_UNAVAILABLE",
    `cannot read the registry bucket '${bucket}' (${detail}). Is \`muster registry serve\` running against this broker with JetStream on, and is registry_bucket in the client config right? For now, discover with --dm broadcast.`,
  );
}

/**
 * Opens the bucket for the registry daemon, creating it with the given expiry or changing an
 * existing bucket's expiry to it (the config is the source of truth).
 */
export async function openRegistryBucket(nc: NatsConnection, bucket: string, expireAfterMs: number, log?: Logger): Promise<KV> {
  const kv = await new Kvm(jetstream(nc)).create(bucket, { history: 1, ttl: expireAfterMs });
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(streamName(bucket));
  const want = nanos(expireAfterMs);
  if (info.config.max_age !== want) {
    log?.info({ bucket, from_ms: info.config.max_age / 1e6, to_ms: expireAfterMs }, "changing the registry bucket's expiry to the configured one");
    await jsm.streams.update(streamName(bucket), { ...info.config, max_age: want, duplicate_window: Math.min(info.config.duplicate_window || want, want) });
  }
  return kv;
}

/**
 * Drop one node's record (decommission), from the bucket as client.kvIfExists hands it out
 * (undefined: no registry here). Readers that follow the bucket see the purge and forget the node
 * at once. Returns "dropped", "absent" (no record), or "no-bucket".
 */
export async function dropRegistryEntry(kv: KV | undefined, identity: string): Promise<"dropped" | "absent" | "no-bucket"> {
  if (!kv) return "no-bucket";
  const e = await kv.get(keyFor(identity));
  if (!e || e.operation !== "PUT" || e.value.length === 0) return "absent";
  await kv.purge(keyFor(identity));
  return "dropped";
}

export interface RegistrySnapshot {
  records: RegistryRecord[];
  /** The bucket's expiry (stream max_age), ms; 0 when it has none. */
  expireAfterMs: number;
  /** Values that were not valid records (skipped). */
  invalid: number;
  /** Highest stream sequence read: a watch resuming after it misses nothing. */
  lastSequence: number;
}

/** The bucket's expiry, ms (0: none). Throws MUSTER_REGISTRY_UNAVAILABLE when the bucket does not exist. */
export async function bucketExpiry(nc: NatsConnection, bucket: string): Promise<number> {
  try {
    const jsm = await jetstreamManager(nc, { checkAPI: false });
    const info = await jsm.streams.info(streamName(bucket));
    return Math.round(info.config.max_age / 1e6);
  } catch (e) {
    throw unavailable(bucket, (e as Error).message);
  }
}

/**
 * Every current record in the bucket, read once through an ordered consumer delivering the last
 * value of each key (one round of streaming, not a request per key). Gives up at the deadline.
 */
export async function readRegistry(nc: NatsConnection, bucket: string, timeoutMs = 30_000): Promise<RegistrySnapshot> {
  if (!isValidBucketName(bucket)) throw new MusterError("MUSTER_USAGE", `invalid registry bucket name ${JSON.stringify(bucket)}: letters, digits, - and _ only`);
  const expireAfterMs = await bucketExpiry(nc, bucket);
  const js = jetstream(nc);
  const consumer = await js.consumers.get(streamName(bucket), { filter_subjects: `${subjectPrefix(bucket)}>`, deliver_policy: DeliverPolicy.LastPerSubject });
  const info = await consumer.info(true);
  const snapshot: RegistrySnapshot = { records: [], expireAfterMs, invalid: 0, lastSequence: 0 };
  if (info.num_pending === 0) {
    await consumer.delete().catch(() => undefined);
    return snapshot;
  }
  const messages = await consumer.consume({ max_messages: 5000 });
  const timer = setTimeout(() => void messages.stop(), timeoutMs);
  let complete = false;
  try {
    for await (const m of messages) {
      take(snapshot, bucket, m);
      if (m.info.pending === 0) {
        complete = true;
        break;
      }
    }
  } finally {
    clearTimeout(timer);
    void messages.stop();
  }
  // A key expiring between counting and delivery leaves the count short of its last message:
  // rare, and the deadline ends the read; a read that stops early for that reason says so.
  if (!complete) throw unavailable(bucket, `read ${snapshot.records.length + snapshot.invalid} of ${info.num_pending} entries within ${timeoutMs} ms`);
  return snapshot;
}

function take(snapshot: RegistrySnapshot, bucket: string, m: JsMsg): void {
  snapshot.lastSequence = Math.max(snapshot.lastSequence, m.seq);
  const op = m.headers?.get("KV-Operation");
  if (op === "DEL" || op === "PURGE" || m.data.length === 0) return;
  const r = decodeRecord(m.data);
  // a record must sit under its own identity's key, or deletes of that key would miss it
  if (r && m.subject === `${subjectPrefix(bucket)}${keyFor(r.identity)}`) snapshot.records.push(r);
  else snapshot.invalid++;
}
