// nats-server's own config for a muster broker: one server, or a member of a cluster with
// JetStream replicated across the members (docs/deploy.md#3-the-broker). Pure: the operator's
// choices in, the text of /etc/nats-server.conf out (Debian's nats-server unit reads that file).
// `muster broker config` prints it; the users it includes come from `muster broker users`.

import { dirname, relative } from "node:path";

/** Paths on the broker machine: Debian's package, with muster's files under /etc/nats. */
export const BROKER_PATHS: Readonly<Record<"config" | "dir" | "cert" | "key" | "clientsCa" | "ca" | "users" | "store", string>> = {
  config: "/etc/nats-server.conf",
  dir: "/etc/nats",
  cert: "/etc/nats/server.pem",
  key: "/etc/nats/server.key",
  /** Who may connect: the site CA, and every Puppet CA whose nodes connect with their Puppet certificate. */
  clientsCa: "/etc/nats/clients-ca.pem",
  /** The site CA alone: what cluster members present to each other. */
  ca: "/etc/nats/ca.pem",
  users: "/etc/nats/muster-users.conf",
  store: "/var/lib/nats/jetstream",
};

export interface BrokerServerOptions {
  /** This member's name (unique in the cluster; JetStream places replicas by it). */
  serverName: string;
  /** Client port (default 0.0.0.0:4222). */
  listen?: string;
  /** Monitoring port (connz, varz, healthz); default 0.0.0.0:8222. Keep it on your management network. */
  monitor?: string;
  /** The other members (and this one): nats-route://host:6222. None: a single server. */
  routes?: string[];
  /** Cluster name (default muster) and route port (default 0.0.0.0:6222). */
  clusterName?: string;
  clusterListen?: string;
  /** JetStream limits; nats-server's defaults are a share of the machine's memory and disk. */
  maxMemoryStore?: string;
  maxFileStore?: string;
  /**
   * How often JetStream forces its store to disk: "always" (each write, before it is acknowledged)
   * or a duration (1s, 500ms). nats-server's default is 2 min: a member that loses power loses what
   * it acknowledged since, and may rejoin and outvote a member that had it. nats-server 2.10 or later.
   */
  syncInterval?: string;
  paths?: Partial<typeof BROKER_PATHS>;
}

const ROUTE = /^nats-route:\/\/[A-Za-z0-9.-]+:\d{1,5}$/;
const NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;
const HOST_PORT = /^[A-Za-z0-9.:[\]-]+:\d{1,5}$/;
const SIZE = /^\d+(?:[KMGT]B?)?$/i;
const SYNC = /^(?:always|[1-9]\d*(?:ms|s|m|h))$/;

/** Why these options cannot make a config, or undefined. */
export function brokerConfigProblem(o: BrokerServerOptions): string | undefined {
  if (!NAME.test(o.serverName)) return `server name ${JSON.stringify(o.serverName)}: letters, digits, - and _ (it names this member to JetStream)`;
  for (const r of o.routes ?? []) if (!ROUTE.test(r)) return `route ${JSON.stringify(r)}: nats-route://HOST:PORT`;
  if (o.routes?.length === 1) return "a cluster has at least two members: give every member's route (this one's too), or none for a single server";
  if (o.clusterName !== undefined && !NAME.test(o.clusterName)) return `cluster name ${JSON.stringify(o.clusterName)}: letters, digits, - and _`;
  for (const [k, v] of [["listen", o.listen], ["monitor", o.monitor], ["cluster listen", o.clusterListen]] as const) if (v !== undefined && !HOST_PORT.test(v)) return `${k} ${JSON.stringify(v)}: HOST:PORT`;
  for (const [k, v] of [["max memory store", o.maxMemoryStore], ["max file store", o.maxFileStore]] as const) if (v !== undefined && !SIZE.test(v)) return `${k} ${JSON.stringify(v)}: a size such as 256MB or 10GB`;
  if (o.syncInterval !== undefined && !SYNC.test(o.syncInterval)) return `sync interval ${JSON.stringify(o.syncInterval)}: always, or a duration such as 1s or 500ms`;
  return undefined;
}

const q = (s: string) => JSON.stringify(s);

/** The text of nats-server.conf; throws on options brokerConfigProblem refuses. */
export function brokerServerConfig(o: BrokerServerOptions): string {
  const why = brokerConfigProblem(o);
  if (why) throw new Error(why);
  const p = { ...BROKER_PATHS, ...o.paths };
  const limits = [o.maxMemoryStore ? `  max_memory_store: ${o.maxMemoryStore}` : "", o.maxFileStore ? `  max_file_store: ${o.maxFileStore}` : "", o.syncInterval ? `  sync_interval: ${o.syncInterval === "always" ? "always" : q(o.syncInterval)}` : ""].filter(Boolean);
  const lines = [
    "# nats-server for muster (muster broker config): TLS with a user per certificate, JetStream",
    `server_name: ${q(o.serverName)}`,
    `listen: ${q(o.listen ?? "0.0.0.0:4222")}`,
    `http: ${q(o.monitor ?? "0.0.0.0:8222")}`,
    // inventories and registrations of nodes with many facts exceed nats-server's 1 MB default
    "max_payload: 4MB",
    "jetstream {",
    `  store_dir: ${q(p.store)}`,
    ...limits,
    "}",
    "# every client presents a certificate; its subject names its user (muster-users.conf)",
    "tls {",
    `  cert_file: ${q(p.cert)}`,
    `  key_file: ${q(p.key)}`,
    `  ca_file: ${q(p.clientsCa)}`,
    "  verify_and_map: true",
    "  timeout: 5",
    "}",
  ];
  if (o.routes?.length) {
    lines.push(
      "# the members present the site CA's certificates to each other",
      "cluster {",
      `  name: ${q(o.clusterName ?? "muster")}`,
      `  listen: ${q(o.clusterListen ?? "0.0.0.0:6222")}`,
      `  routes: [${o.routes.map(q).join(", ")}]`,
      "  tls {",
      `    cert_file: ${q(p.cert)}`,
      `    key_file: ${q(p.key)}`,
      `    ca_file: ${q(p.ca)}`,
      "    verify: true",
      "    timeout: 5",
      "  }",
      "}",
    );
  }
  // nats-server resolves an include against the including file's directory, absolute or not
  lines.push(`include ${q(relative(dirname(p.config), p.users))}`, "");
  return lines.join("\n");
}
