import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import type { z } from "zod";
import { DEFAULT_BROKER, resolveTls, type TlsSettings } from "../broker/connect.js";
import { lazySchema } from "../lazy-zod.js";
import { configDir } from "../security/keys.js";
import { loadConfigFile } from "./load.js";
import { tlsConfigSchema } from "./tls.js";

// The client config, and the one rule every command and daemon uses to find the broker.
// Client config lookup: --config, MUSTER_CONFIG, ./.muster/client.yaml (written by `muster lab up`,
// so commands in the checkout reach the lab), then ~/.config/muster/client.yaml.

/** Built when a file is read: without one (MUSTER_BROKER, --broker) a command loads no zod. */
export const clientConfigSchema = lazySchema((z) =>
  z
    .object({
      brokers: z.array(z.string()).default([]),
      collective: z.string().default("muster"),
      ddl_directories: z.array(z.string()).default([]),
      discovery_timeout: z.number().positive().optional(),
      /** The discovery --dm defaults to (Choria's default_discovery_method): e.g. puppetdb where PuppetDB is the inventory. */
      discovery_method: z.enum(["broadcast", "mc", "registry", "puppetdb"]).optional(),
      registry_bucket: z.string().optional(),
      /** TLS to the broker: ca, and cert/key for a broker that maps client certificates to users. */
      tls: tlsConfigSchema(z).optional(),
    })
    .passthrough(),
);
export type ClientConfig = z.output<ReturnType<typeof clientConfigSchema>>;

/** What an absent client config means: the schema's defaults. */
const noClientConfig = (): ClientConfig => ({ brokers: [], collective: "muster", ddl_directories: [] });

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
  if (!path) return noClientConfig();
  return loadConfigFile(path, clientConfigSchema(), "client config");
}

const split = (s: string) => s.split(",").map((x) => x.trim()).filter(Boolean);

export interface BrokerSettings {
  servers: string[];
  tls?: TlsSettings;
  /** Where the servers came from, for logs and `muster doctor`: "--broker", "MUSTER_BROKER", a file, or "default". */
  from: string;
  /** The client config file consulted, if one was. */
  clientConfig?: string;
}

export interface BrokerSources {
  /** --broker URL(s), comma-separated. */
  flag?: string;
  /** A daemon's own config file (server, registry, provisioner): its brokers and tls come before the client config's. */
  own?: { file?: string; brokers?: string[]; tls?: TlsSettings };
  /** --config of a client command (a daemon's --config is its own file, so it passes none). */
  clientConfig?: string;
  /** false: the caller picks its TLS credential itself (the node daemon's phases); tls is left undefined. */
  tls?: false;
}

/**
 * The broker every command and daemon connects to: --broker, else MUSTER_BROKER, else the daemon's
 * own config, else the client config, else nats://127.0.0.1:4222. TLS: the daemon's own config,
 * else the client config's, else MUSTER_TLS_CA / MUSTER_TLS_CERT / MUSTER_TLS_KEY. The client
 * config is read only when something is still missing, so a daemon whose own config says it all
 * does not depend on it.
 */
export function resolveBrokerSettings(src: BrokerSources = {}): BrokerSettings {
  let client: { path?: string; cfg: ClientConfig } | undefined;
  const clientCfg = () => (client ??= { path: findClientConfig(src.clientConfig), cfg: loadClientConfig(src.clientConfig) });
  let servers: string[] | undefined;
  let from = "default";
  if (src.flag && split(src.flag).length) [servers, from] = [split(src.flag), "--broker"];
  else if (process.env.MUSTER_BROKER && split(process.env.MUSTER_BROKER).length) [servers, from] = [split(process.env.MUSTER_BROKER), "MUSTER_BROKER"];
  else if (src.own?.brokers?.length) [servers, from] = [src.own.brokers, src.own.file ?? "the daemon's config"];
  else if (clientCfg().cfg.brokers.length) [servers, from] = [clientCfg().cfg.brokers, clientCfg().path!];
  if (src.tls === false) return { servers: servers ?? [DEFAULT_BROKER], from, clientConfig: client?.path };
  let tls: TlsSettings | undefined = src.own?.tls && (src.own.tls.ca || src.own.tls.cert) ? src.own.tls : undefined;
  if (!tls) {
    const t = clientCfg().cfg.tls;
    if (t && (t.ca || t.cert)) tls = t;
  }
  return { servers: servers ?? [DEFAULT_BROKER], tls: resolveTls(tls), from, clientConfig: client?.path };
}
