import type { Logger } from "pino";
import type { Bucket, Buckets } from "../broker/bucket.js";
import { MusterError } from "../errors.js";
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
export async function openRegistryBucket(buckets: Buckets, bucket: string, expireAfterMs: number, log?: Logger, replicas?: number): Promise<Bucket> {
  const was = await buckets.bucketIfExists(bucket).then((b) => b?.status());
  if (was && was.ttlMs !== expireAfterMs) log?.info({ bucket, from_ms: was.ttlMs, to_ms: expireAfterMs }, "changing the registry bucket's expiry to the configured one");
  // replicas apply when the bucket is made; an existing one keeps its own
  return buckets.bucket(bucket, { create: { history: 1, ttlMs: expireAfterMs, enforceTtl: true, ...(replicas !== undefined ? { replicas } : {}) } });
}

/**
 * Drop one node's record (decommission), from the bucket as client.kvIfExists hands it out
 * (undefined: no registry here). Readers that follow the bucket see the purge and forget the node
 * at once. Returns "dropped", "absent" (no record), or "no-bucket".
 */
export async function dropRegistryEntry(bucket: Bucket | undefined, identity: string): Promise<"dropped" | "absent" | "no-bucket"> {
  if (!bucket) return "no-bucket";
  const e = await bucket.get(keyFor(identity));
  if (!e || e.value.length === 0) return "absent";
  await bucket.purge(keyFor(identity));
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

/**
 * Every current record in the bucket, read once (Bucket.values: one stream of last values, not a
 * request per key). Throws MUSTER_REGISTRY_UNAVAILABLE when the bucket is missing or the read does
 * not finish by the deadline.
 */
export async function readRegistry(buckets: Buckets, bucket: string, timeoutMs = 30_000): Promise<RegistrySnapshot> {
  if (!isValidBucketName(bucket)) throw new MusterError("MUSTER_USAGE", `invalid registry bucket name ${JSON.stringify(bucket)}: letters, digits, - and _ only`);
  let b: Bucket | undefined;
  try {
    b = await buckets.bucketIfExists(bucket);
  } catch (e) {
    throw unavailable(bucket, (e as Error).message);
  }
  if (!b) throw unavailable(bucket, "stream not found");
  try {
    const [status, values] = await Promise.all([b.status(), b.values(timeoutMs)]);
    const snapshot: RegistrySnapshot = { records: [], expireAfterMs: status.ttlMs, invalid: 0, lastSequence: values.lastRevision };
    for (const e of values.entries) {
      const r = decodeRecord(e.value);
      // a record must sit under its own identity's key, or deletes of that key would miss it
      if (r && e.key === keyFor(r.identity)) snapshot.records.push(r);
      else snapshot.invalid++;
    }
    return snapshot;
  } catch (e) {
    throw unavailable(bucket, (e as Error).message);
  }
}
