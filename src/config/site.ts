// The configs of a site's machines besides its nodes (docs/deploy.md): a Puppet master's muster
// server, the provisioners' additions to the package's provisioner.yaml. Pure: the same generators
// render the lab's site machines and the blocks docs/deploy.md shows (test/docs/deploy.test.ts
// renders them with the doc's example values and compares).

/** Where muster keeps credentials on a machine (root:<daemon's group>, 0640 for keys). */
export const TLS_DIR = "/etc/muster/tls";

/** Where a master keeps what its muster server needs (the CA client credential is made on the master). */
export const MASTER_FILES = {
  caClientCert: `${TLS_DIR}/puppetca.pem`,
  caClientKey: `${TLS_DIR}/puppetca.key`,
  puppetCa: `${TLS_DIR}/puppet-ca.pem`,
  searchNodes: "/etc/puppet/muster.yaml",
  registryToken: "/etc/puppet/muster-registry.token",
  ssldir: "/var/lib/puppet/ssl",
} as const;

/** The name of the certificate muster's puppetca agent uses for the CA API on a master. */
export const caClientName = (master: string) => `muster-puppetca.${master}`;

/**
 * Where a site machine's muster server keeps its node key when the operator made it on the
 * workstation (muster key create): known before the machine boots, so it is in the key directory
 * (muster key enroll) by the time the machine answers, and its replies verify.
 */
export const SITE_NODE_KEY = `${TLS_DIR}/node.key`;

interface SiteServerOptions {
  identity: string;
  brokers: string[];
  collective: string;
  provisionerKey: string;
  trustedKeys: { name: string; key: string }[];
  /** The operator made its node key (written to SITE_NODE_KEY); else the server makes one itself. */
  nodeKey?: boolean;
}

const siteSecurity = (o: SiteServerOptions) => ({ trusted_keys: [{ name: "provisioner", key: o.provisionerKey }, ...o.trustedKeys], ...(o.nodeKey ? { node_key: SITE_NODE_KEY } : {}) });

export function masterServerConfig(o: SiteServerOptions): Record<string, unknown> {
  return {
    identity: o.identity,
    collectives: [o.collective],
    brokers: o.brokers,
    // Facter supplies country, ec2_placement_region (the facts file) and ipaddress
    facts: { facter: true, extra: { role: "puppetmaster" } },
    agents: { builtin: ["puppetca"] },
    plugins: {
      // the CA API, with a credential of its own made on the master (not the master's host key),
      // on this machine: by loopback, which needs no name service (a cloud may give the machine a
      // short host name its full name does not resolve to), and the master's certificate checked
      // for its identity (servername)
      puppetca: { url: "https://127.0.0.1:8140", servername: o.identity, cacert: MASTER_FILES.puppetCa, cert: MASTER_FILES.caClientCert, key: MASTER_FILES.caClientKey },
    },
    tls: { ca: `${TLS_DIR}/ca.pem`, cert: `${TLS_DIR}/master.pem`, key: `${TLS_DIR}/master.key` },
    security: siteSecurity(o),
    // every request it handles (a certificate signed, cleaned) in the site's audit stream, as nodes
    // do; like theirs, its broker user only looks the stream up
    audit: { stream: { create: false } },
    registration: { interval: 300, splay: true },
    log: { level: "info" },
  };
}


/** What a site's provisioners add to the package's /etc/muster/provisioner.yaml (the same on both). */
export function provisionerAdditions(o: { brokers: string[]; notifyTargets: string[]; metricsPort?: number; masters: { identity: string; facts: Record<string, string> }[] }): Record<string, unknown> {
  return {
    broker: o.brokers,
    tls: { ca: `${TLS_DIR}/ca.pem`, cert: `${TLS_DIR}/provisioner.pem`, key: `${TLS_DIR}/provisioner.key` },
    // the state survives the loss of a broker: three copies, one per member
    state_replicas: 3,
    // the masters are enrolled in the key directory (muster key enroll): a reply that does not
    // verify against it is not a master's, and signs or cleans nothing
    master: { require_verified: true },
    notify: { targets: o.notifyTargets },
    metrics: { host: "127.0.0.1", port: o.metricsPort ?? 9464 },
    // the masters start together on a new site: each region's nodes wait for their own, not the first to answer
    known_masters: o.masters,
  };
}

/** Where the console machine keeps its daemons' files (docs/deploy.md#6-the-registry-and-the-console). */
export const CONSOLE_FILES = {
  registryConfig: "/etc/muster/registry.yaml",
  registryToken: "/etc/muster/registry.token",
  webConfig: "/etc/muster/web.yaml",
  webTokens: "/etc/muster/web.tokens",
  /** The console's own copy of the registry's token (its user cannot read the registry's). */
  webRegistryToken: "/etc/muster/web-registry.token",
  /** The console's client config (its broker TLS) and signing key, in its unit's MUSTER_CONFIG_DIR. */
  webClientConfig: "/var/lib/muster/web/client.yaml",
  webSigningKey: "/var/lib/muster/web/keys/console.pem",
} as const;

export const SITE_HTTP = { registry: 8089, web: 8443 } as const;

/** The registry on the console machine: the site's brokers, its own credential, served to the masters with a token. */
export function registryConfig(o: { brokers: string[]; collective: string; replicas: number; puppetdb?: boolean }): Record<string, unknown> {
  return {
    brokers: o.brokers,
    tls: { ca: `${TLS_DIR}/ca.pem`, cert: `${TLS_DIR}/registry.pem`, key: `${TLS_DIR}/registry.key` },
    collectives: [o.collective],
    replicas: o.replicas,
    max_age: 900,
    // the masters' search_nodes ask it over the network: every request carries the bearer token
    http: { host: "0.0.0.0", port: SITE_HTTP.registry, token_file: CONSOLE_FILES.registryToken },
    // PuppetDB on this machine: its plain port on loopback (docs/puppetdb.md)
    ...(o.puppetdb ? { puppetdb: { url: "http://127.0.0.1:8080" } } : {}),
    log: { level: "info" },
  };
}

/** The web console: HTTPS of its own, tokens for the people, the registry on the same machine. */
export function webConfig(o: { brokers: string[]; collective: string; replicas?: number }): Record<string, unknown> {
  return {
    listen: `0.0.0.0:${SITE_HTTP.web}`,
    tls: { cert: `${TLS_DIR}/web-https.pem`, key: `${TLS_DIR}/web-https.key` },
    auth: { tokens_file: CONSOLE_FILES.webTokens },
    registry: { url: `http://127.0.0.1:${SITE_HTTP.registry}`, token_file: CONSOLE_FILES.webRegistryToken },
    collective: o.collective,
    broker: o.brokers,
    // the heartbeats, Puppet runs, runall history, audit and alerts' history it creates: as many copies as the registry's
    ...(o.replicas && o.replicas > 1 ? { store_replicas: o.replicas } : {}),
    // the brokers in health: each member's monitoring port (`muster broker config` renders http: 0.0.0.0:8222)
    health: { broker_monitoring: o.brokers.map(monitoringUrl) },
    // its own actions and refusals in the audit stream beside the nodes' records (replicated with them)
    audit: { stream: true },
  };
}

/** A broker's monitoring port from its client URL: the same host, port 8222. */
export function monitoringUrl(broker: string): string {
  const host = (() => {
    try {
      return new URL(broker).hostname;
    } catch {
      return broker.replace(/^[a-z]+:\/\//, "").split(":")[0]!;
    }
  })();
  return `http://${host}:8222`;
}

/** The console's client config: how it reaches the brokers, as itself (an admin of the broker). */
export function webClientConfig(o: { brokers: string[]; collective: string }): Record<string, unknown> {
  return { brokers: o.brokers, collective: o.collective, tls: { ca: `${TLS_DIR}/ca.pem`, cert: `${TLS_DIR}/console.pem`, key: `${TLS_DIR}/console.key` } };
}

/** The caller name the console signs as (`MUSTER_CALLER` of muster-web.service). */
export const CONSOLE_CALLER = "console";

/**
 * The notifier on the console machine: a muster server hosting the notify agent, which tells the
 * admins. It obeys the provisioners (their notices), the console (its health alerts, signed with
 * `consoleKey`: the console's own signing key) and the operators.
 */
export function notifierServerConfig(o: SiteServerOptions & { consoleKey: string; recipients: string[] }): Record<string, unknown> {
  return {
    identity: o.identity,
    collectives: [o.collective],
    brokers: o.brokers,
    facts: { facter: true, extra: { role: "notifier" } },
    agents: { builtin: ["notify"] },
    plugins: { notify: { recipients: o.recipients } },
    tls: { ca: `${TLS_DIR}/ca.pem`, cert: `${TLS_DIR}/notifier.pem`, key: `${TLS_DIR}/notifier.key` },
    security: siteSecurity({ ...o, trustedKeys: [{ name: CONSOLE_CALLER, key: o.consoleKey }, ...o.trustedKeys] }),
    // every notification asked for (by whom, how it went) in the site's audit stream
    audit: { stream: { create: false } },
    registration: { interval: 300, splay: true },
    log: { level: "info" },
  };
}
