import type { MusterClient } from "../client/client.js";
import { StateStore } from "../provisioner/state.js";

// The provisioner's records for its clients (`muster provision status|retry`, the lab,
// decommission). The one place outside the daemons' transports that still hands the raw
// connection to someone else.
// TODO(issue 12): StateStore.open/openExisting take the NatsConnection. Once src/provisioner/state.ts
// opens from a KV (e.g. `StateStore.fromKv(await client.kv(bucket, {create: {history: 5}}))`, as
// client.kv/kvIfExists hand out), switch these two and drop this file from the allow-list in
// test/client/boundary.test.ts.

/** The state bucket, created when absent (as the provisioner creates it). */
export function openProvisionState(client: MusterClient, bucket: string): Promise<StateStore> {
  return StateStore.open(client.nc, bucket);
}

/** The state bucket if a provisioner ever created it; never creates it. */
export function openExistingProvisionState(client: MusterClient, bucket: string): Promise<StateStore | undefined> {
  return StateStore.openExisting(client.nc, bucket);
}
