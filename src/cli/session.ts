import { dataPluginCatalogue } from "../agents/data-ddls.js";
import { buildFilter, FilterError, pqlQueryOf } from "../filter/index.js";
import type { NodeSource } from "../client/discovery/source.js";
import { MusterClient } from "../client/client.js";
import { MusterError } from "../errors.js";
import type { Filter } from "../protocol/types.js";
import { loadClientConfig, resolveBrokerSettings, type BrokerSettings, type ClientConfig } from "./config.js";
import { parseLimit, type LimitSpec } from "../client/limit.js";
import type { FilterOpts, RpcOpts } from "./opts.js";
import { brokerMemory } from "./broker-memory.js";

// What a command that talks to the collective does once it runs: build the filter, connect. Kept
// apart from options.ts (the flags), so that defining a command loads none of this.

/**
 * The wire filter from -F -C -I -A -W -S. With the client config, -S data plugin calls are also
 * checked against the data plugins the client knows (built-in, and DDLs in its ddl_directories):
 * an unknown plugin or field is refused here, before anything is sent (docs/filters.md).
 */
export function filterFromOpts(o: FilterOpts, config?: Pick<ClientConfig, "ddl_directories">): Filter {
  const dataPlugins = config ? dataPluginCatalogue(config.ddl_directories) : undefined;
  return buildFilter({ fact: o.wf, class: o.wc, identity: o.wi, agent: o.wa, with: o.with, select: o.select }, { dataPlugins });
}

export interface Session {
  client: MusterClient;
  config: ClientConfig;
  filter: Filter;
  source?: NodeSource;
  discoveryTimeoutMs: number;
  /** The broker the client connected to. */
  broker: BrokerSettings;
}

/** Check the filters first (nothing is sent when they are bad), then connect. */
export async function openSession(o: FilterOpts, registrySource?: (client: MusterClient, cfg: ClientConfig) => NodeSource): Promise<Session> {
  const config = loadClientConfig(o.config);
  const filter = filterFromOpts(o, config);
  const method = o.nodes ? "flatfile" : (o.dm ?? config.discovery_method ?? "broadcast");
  if ((method === "flatfile" || method === "file") && !o.nodes) throw new MusterError("MUSTER_USAGE", "--dm flatfile needs --nodes FILE");
  // The registry answers from registration data: a filter it cannot answer fails before connecting.
  // Loaded on demand so commands that never use it do not load JetStream KV.
  if (method === "registry" && !registrySource) (await import("../registry/select.js")).checkRegistryFilter(filter);
  // PuppetDB answers what the registry does and pql: identities too; every other way refuses them
  if (method !== "puppetdb" && filter.identity.some((i) => pqlQueryOf(i) !== undefined)) throw new FilterError("a pql: identity is a PuppetDB query: discover with --dm puppetdb", "", 0, "-I");
  if (method === "puppetdb") (await import("../puppetdb/pql.js")).checkPuppetDbFilter(filter);
  const broker = resolveBrokerSettings({ flag: o.broker, clientConfig: o.config });
  // members that did not answer this user's last commands are tried last (broker-memory.ts)
  const memory = broker.servers.length > 1 ? brokerMemory() : undefined;
  const client = await MusterClient.connect({ brokers: broker.servers, collective: o.target ?? config.collective, name: "muster-cli", tls: broker.tls, from: broker.from, memory });
  let source: NodeSource | undefined;
  if (method === "flatfile" || method === "file") source = await client.source({ method, file: o.nodes! });
  else if (method === "registry") {
    source = registrySource ? registrySource(client, config) : await client.source({ method, bucket: config.registry_bucket, onWarning: (m) => process.stderr.write(`warning: ${m}\n`) });
  } else if (method === "puppetdb") source = await client.source({ method, bucket: config.registry_bucket, onWarning: (m) => process.stderr.write(`warning: ${m}\n`) });
  return { client, config, filter, source, discoveryTimeoutMs: (o.dt ?? config.discovery_timeout ?? 2) * 1000, broker };
}

/** --limit, --limit-method, --limit-seed as the client takes them (parsed when the action runs). */
export function limitFromOpts(o: RpcOpts): LimitSpec | undefined {
  return o.limit ? parseLimit(o.limit, o.limitMethod ?? "first", o.limitSeed) : undefined;
}
