import type { MusterClient } from "../client/client.js";
import type { StreamFollow } from "../broker/stream.js";
import { DEFAULT_STATE_BUCKET } from "../protocol/buckets.js";
import { ProvisionState } from "../provisioner/state.js";
import { AlertHistory } from "../health/alert-history.js";
import { AliveStore, PuppetRunStore, ServiceStore } from "../health/stores.js";
import type { AuditStreams } from "../security/audit.js";
import { ensureFleetStores, RUNALL_STREAM, type StoresMade } from "./stores.js";

// What a long-running reader of the fleet (the web console) reads, opened through each store's
// owner: the provisioning records (ProvisionState), heartbeats, Puppet runs and service heartbeats (src/health/stores.ts),
// the runall history stream (stores.ts). The console holds these handles and opens no bucket or
// stream itself. A store that does not exist yet is looked for again on the next call.

export interface FleetSources {
  /** The provisioning records, once a provisioner has created the bucket (never created here). */
  records(): Promise<ProvisionState | undefined>;
  alive(): Promise<AliveStore | undefined>;
  puppetRuns(): Promise<PuppetRunStore | undefined>;
  /** The site's services' heartbeats (protocol/service.ts). */
  services(): Promise<ServiceStore | undefined>;
  /** The alerts' history (made when missing, with the stores' copies). */
  alertHistory(): Promise<AlertHistory>;
  /** Where the console's own audit records go (the audit stream, made with the other stores). */
  auditStreams(): Promise<AuditStreams>;
  /** The runall history from `fromSeq` (default all kept), then live; undefined without the stream. */
  runallHistory(fromSeq?: number): Promise<StreamFollow | undefined>;
  /** Makes the stores nodes write to and history is kept in (the console's start). */
  ensureStores(): Promise<StoresMade[]>;
  /** A JetStream API round trip (looking the records' bucket up): whether the broker answers. */
  probe(): Promise<void>;
}

export function fleetSources(client: MusterClient, o: { stateBucket?: string; storeReplicas?: number } = {}): FleetSources {
  const once = <T>(open: () => Promise<T | undefined>) => {
    let found: Promise<T | undefined> | undefined;
    return () => {
      found ??= open().then((v) => {
        if (v === undefined) found = undefined; // not there yet: asked again next time
        return v;
      });
      found.catch(() => (found = undefined));
      return found;
    };
  };
  return {
    records: once(() => ProvisionState.openExisting(client, o.stateBucket ?? DEFAULT_STATE_BUCKET)),
    alive: once(() => AliveStore.open(client)),
    puppetRuns: once(() => PuppetRunStore.open(client)),
    services: once(() => ServiceStore.open(client)),
    alertHistory: async () => AlertHistory.open(await client.streams(), o.storeReplicas ? { replicas: o.storeReplicas } : {}),
    auditStreams: () => client.streams(),
    runallHistory: async (fromSeq) => (await client.streams()).follow(RUNALL_STREAM.name, { ...(fromSeq ? { fromSeq } : {}) }),
    ensureStores: () => ensureFleetStores(client, { ...(o.storeReplicas ? { replicas: o.storeReplicas } : {}) }),
    probe: async () => void (await client.bucketIfExists(o.stateBucket ?? DEFAULT_STATE_BUCKET)),
  };
}
