import type { MusterClient } from "../client/client.js";
import { StateStore } from "../provisioner/state.js";

// The provisioner's records for its clients (`muster provision status|retry`, the lab,
// decommission), opened through the client's KV API like the provisioner opens them.

/** The state bucket, created when absent (as the provisioner creates it). */
export async function openProvisionState(client: MusterClient, bucket: string): Promise<StateStore> {
  return StateStore.fromKv(await client.kv(bucket, { create: { ...StateStore.bucketOptions } }));
}

/** The state bucket if a provisioner ever created it; never creates it. */
export async function openExistingProvisionState(client: MusterClient, bucket: string): Promise<StateStore | undefined> {
  const kv = await client.kvIfExists(bucket);
  return kv ? StateStore.fromKv(kv) : undefined;
}
