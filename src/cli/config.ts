import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { z } from "zod";
import { TlsConfigSchema } from "../broker/connect.js";
import { loadConfigFile } from "../config/load.js";
import { configDir } from "../security/keys.js";

// Client settings. Looked up in order: --config, MUSTER_CONFIG, ./.muster/client.yaml (written by
// `muster lab up`, so commands in the checkout reach the lab), then ~/.config/muster/client.yaml.

export const ClientConfigSchema = z
  .object({
    brokers: z.array(z.string()).default([]),
    collective: z.string().default("muster"),
    ddl_directories: z.array(z.string()).default([]),
    discovery_timeout: z.number().positive().optional(),
    registry_bucket: z.string().optional(),
    /** TLS to the broker: ca, and cert/key for a broker that maps client certificates to users. */
    tls: TlsConfigSchema.optional(),
  })
  .passthrough();
export type ClientConfig = z.output<typeof ClientConfigSchema>;

export function findClientConfig(explicit?: string): string | undefined {
  if (explicit) return explicit;
  if (process.env.MUSTER_CONFIG) return process.env.MUSTER_CONFIG;
  const local = resolve(".muster", "client.yaml");
  if (existsSync(local)) return local;
  const user = join(configDir(), "client.yaml");
  return existsSync(user) ? user : undefined;
}

export function loadClientConfig(explicit?: string): ClientConfig {
  const path = findClientConfig(explicit);
  if (!path) return ClientConfigSchema.parse({});
  return loadConfigFile(path, ClientConfigSchema, "client config");
}
