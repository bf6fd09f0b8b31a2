import type { NatsConnection } from "@nats-io/transport-node";
import { bucketsOn } from "../../src/broker/bucket.js";
import { RegistryStore } from "../../src/registry/store.js";

/** Resolves once the registry bucket holds every identity (watching it, not polling); rejects at the deadline naming the missing ones. */
export async function waitRegistered(nc: NatsConnection, identities: string[], opts: { bucket?: string; timeoutMs?: number } = {}): Promise<void> {
  const timeoutMs = opts.timeoutMs ?? 20_000;
  const store = await RegistryStore.open(bucketsOn(nc), opts.bucket ?? "muster-registry");
  try {
    await new Promise<void>((resolve, reject) => {
      const missing = new Set(identities.filter((id) => !store.get(id)));
      if (missing.size === 0) return resolve();
      const timer = setTimeout(() => reject(new Error(`not registered within ${timeoutMs} ms: ${[...missing].slice(0, 5).join(", ")} (${missing.size})`)), timeoutMs);
      store.on("update", (r) => {
        missing.delete(r.identity);
        if (missing.size === 0) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
  } finally {
    store.stop();
  }
}
