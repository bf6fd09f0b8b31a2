import type { MusterClient } from "../client/client.js";
import { DEFAULT_ALIVE_BUCKET, DEFAULT_PUPPET_RUNS_BUCKET } from "../protocol/buckets.js";
import { RUNALL_AGENT } from "../protocol/events.js";
import { subjects } from "../protocol/subjects.js";
import { AuditConfigSchema } from "../security/audit.js";
import { ALERT_STREAM } from "../health/alert-history.js";
import { AliveStore, PuppetRunStore } from "../health/stores.js";

// What the fleet keeps in JetStream beyond the daemons' own buckets, made in one place: the alive
// and Puppet runs buckets (written by nodes: health and Puppet history), the runall history stream
// (every run's events: who started it, its filter and concurrency, each node's result, how it
// ended), the audit stream (nodes' records, and the console's and the CLI's own) and the alerts'
// history (health/alert-history.ts). Nodes may not create them (broker permissions):
// the console makes them when it starts, and `muster broker stores` does for a fleet without one.

/** The runall history: `muster.event.runall.<started|progress|finished>` kept 30 days, at most 1 GiB. */
export const RUNALL_STREAM = { name: "MUSTER_RUNALL", subjects: [subjects.event(RUNALL_AGENT, "*")], maxAgeS: 30 * 86_400, maxBytes: 1024 ** 3 };

const auditDefaults = AuditConfigSchema.parse({ stream: {} }).stream!;
/** The nodes' audit records (audit.stream's defaults), kept 90 days. */
export const AUDIT_STREAM = { name: auditDefaults.name, subjects: auditDefaults.subjects, maxAgeS: 90 * 86_400 };

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
  const before = await Promise.all([DEFAULT_ALIVE_BUCKET, DEFAULT_PUPPET_RUNS_BUCKET].map(async (b) => (await client.bucketIfExists(b)) !== undefined));
  const [alive, runs, runall, audit, alerts] = await Promise.all([AliveStore.open(client, { create: true, ...r }), PuppetRunStore.open(client, { create: true, ...r }), streams.stream({ ...RUNALL_STREAM, ...r }), streams.stream({ ...AUDIT_STREAM, ...r }), streams.stream({ ...ALERT_STREAM, ...r })]);
  return [
    { name: alive!.bucket.name, kind: "bucket", created: !before[0] },
    { name: runs!.bucket.name, kind: "bucket", created: !before[1] },
    { name: RUNALL_STREAM.name, kind: "stream", created: runall.created },
    { name: AUDIT_STREAM.name, kind: "stream", created: audit.created },
    { name: ALERT_STREAM.name, kind: "stream", created: alerts.created },
  ];
}
