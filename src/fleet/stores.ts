import type { MusterClient } from "../client/client.js";
import { DEFAULT_ALIVE_BUCKET, DEFAULT_NODE_KEYS_BUCKET, DEFAULT_PUPPET_RUNS_BUCKET, DEFAULT_SERVICES_BUCKET } from "../protocol/buckets.js";
import { encodeNodeKeyEntry, enrollment, nodeKeyName, parseNodeKeyEntry } from "../protocol/node-keys.js";
import { RUNALL_AGENT } from "../protocol/events.js";
import { subjects } from "../protocol/subjects.js";
import { AuditConfigSchema } from "../security/audit.js";
import { ALERT_STREAM } from "../health/alert-history.js";
import { AliveStore, PuppetRunStore, ServiceStore } from "../health/stores.js";

// What the fleet keeps in JetStream beyond the daemons' own buckets, made in one place: the alive
// and Puppet runs buckets (written by nodes: health and Puppet history), the services bucket
// (the site's own services' heartbeats: src/protocol/service.ts), the runall history stream
// (every run's events: who started it, its filter and concurrency, each node's result, how it
// ended), the audit stream (nodes' records, and the console's and the CLI's own), the alerts'
// history (health/alert-history.ts) and the node-key directory (clients verify replies against it;
// the provisioner and `muster key enroll` write it). Nodes may not create them (broker
// permissions): the console makes them when it starts, and `muster broker stores` does for a fleet
// without one, with as many copies as the site has brokers.

/** The runall history: `muster.event.runall.<started|progress|finished>` kept 30 days, at most 1 GiB. */
export const RUNALL_STREAM = { name: "MUSTER_RUNALL", subjects: [subjects.event(RUNALL_AGENT, "*")], maxAgeS: 30 * 86_400, maxBytes: 1024 ** 3 };

const auditDefaults = AuditConfigSchema.parse({ stream: {} }).stream!;
/** The nodes' audit records (audit.stream's defaults), kept 90 days. */
export const AUDIT_STREAM = { name: auditDefaults.name, subjects: auditDefaults.subjects, maxAgeS: 90 * 86_400 };

/** The node-key directory's settings when it is made (the provisioner and `muster key enroll` make it the same way). */
export const NODE_KEYS_BUCKET = { history: 5 } as const;

export interface StoresMade {
  name: string;
  kind: "bucket" | "stream";
  /** Made now (false: it was there). */
  created: boolean;
}

/** Finds or creates every store (`replicas`: copies in a JetStream cluster); an existing one keeps its own settings. */
export async function ensureFleetStores(client: MusterClient, o: { replicas?: number } = {}): Promise<StoresMade[]> {
  const r = o.replicas ? { replicas: o.replicas } : {};
  const streams = await client.streams();
  const before = await Promise.all([DEFAULT_ALIVE_BUCKET, DEFAULT_PUPPET_RUNS_BUCKET, DEFAULT_NODE_KEYS_BUCKET, DEFAULT_SERVICES_BUCKET].map(async (b) => (await client.bucketIfExists(b)) !== undefined));
  const [alive, runs, , services, runall, audit, alerts] = await Promise.all([
    AliveStore.open(client, { create: true, ...r }),
    PuppetRunStore.open(client, { create: true, ...r }),
    client.bucket(DEFAULT_NODE_KEYS_BUCKET, { create: { ...NODE_KEYS_BUCKET, ...r } }),
    ServiceStore.open(client, { create: true, ...r }),
    streams.stream({ ...RUNALL_STREAM, ...r }),
    streams.stream({ ...AUDIT_STREAM, ...r }),
    streams.stream({ ...ALERT_STREAM, ...r }),
  ]);
  return [
    { name: alive!.bucket.name, kind: "bucket", created: !before[0] },
    { name: runs!.bucket.name, kind: "bucket", created: !before[1] },
    { name: DEFAULT_NODE_KEYS_BUCKET, kind: "bucket", created: !before[2] },
    { name: services!.bucket.name, kind: "bucket", created: !before[3] },
    { name: RUNALL_STREAM.name, kind: "stream", created: runall.created },
    { name: AUDIT_STREAM.name, kind: "stream", created: audit.created },
    { name: ALERT_STREAM.name, kind: "stream", created: alerts.created },
  ];
}

/** The stores ensureFleetStores makes that do not exist (nothing is made): what `muster doctor` names. */
export async function missingFleetStores(client: MusterClient): Promise<string[]> {
  const streams = await client.streams();
  const buckets = await Promise.all([DEFAULT_ALIVE_BUCKET, DEFAULT_PUPPET_RUNS_BUCKET, DEFAULT_NODE_KEYS_BUCKET].map(async (b) => ((await client.bucketIfExists(b)) ? [] : [b])));
  const made = await Promise.all([RUNALL_STREAM.name, AUDIT_STREAM.name, ALERT_STREAM.name].map(async (s) => ((await streams.exists(s)) ? [] : [s])));
  return [...buckets, ...made].flat();
}

/**
 * Enroll a site machine's node key in the key directory (`muster key enroll`, and the lab's site as
 * it comes up): written, left as it is (the directory says so already), or refused (another key
 * is there and `replace` is not set). Needs an admin's or a provisioner's credential.
 */
export async function enrollNodeKey(client: MusterClient, o: { identity: string; pubkey: string; by: string; replace?: boolean }): Promise<{ act: "write" | "same" | "refuse"; why: string }> {
  const bucket = await client.bucket(DEFAULT_NODE_KEYS_BUCKET, { create: NODE_KEYS_BUCKET });
  const now = await bucket.get(nodeKeyName(o.identity));
  const parsed = now ? parseNodeKeyEntry(now.value, nodeKeyName(o.identity)) : undefined;
  const plan = enrollment(parsed?.ok ? parsed.entry : undefined, o.identity, o.pubkey, o.replace === true);
  if (plan.act === "write") await bucket.put(nodeKeyName(o.identity), encodeNodeKeyEntry({ identity: o.identity, pubkey: o.pubkey, source: "enrolled", time: Date.now(), by: o.by }));
  return plan;
}
