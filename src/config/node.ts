// The one generator of a waiting node's `muster server` config: the lab's nodes (src/lab) and the
// cloud-init example (`muster user-data` renders examples/cloud-init/) both come from here,
// so what the lab proves is what a cloud machine runs. Pure: paths and credentials come in, a
// plain object (written as YAML by the caller) goes out.

/** What a node hosts: provision while it waits; the rest once it is provisioned. */
export const NODE_AGENTS = ["provision", "puppet", "nrpe", "resource"] as const;

export interface NodeConfigOptions {
  /** Fixed in the lab; on a cloud machine left out, so the server takes the host name. */
  identity?: string;
  /** Left out: the caller adds them (the lab writes its broker in later). */
  brokers?: string[];
  collectives: string[];
  /** The broker's CA (PEM file). */
  ca: string;
  /** The node's bootstrap credential: reaches only the provisioning subjects. */
  bootstrap: { cert: string; key: string };
  /** Where the node waits, and whose requests it answers there. */
  provisioning: { collective: string; callers: string[] };
  /** Which caller keys the node trusts (the provisioner's at least). */
  security?: Record<string, unknown>;
  /** The server's facts section; default Facter. */
  facts?: Record<string, unknown>;
  /** Per-agent settings (default: each agent's system defaults). */
  plugins?: Record<string, Record<string, unknown>>;
  registration?: { interval: number; splay: boolean };
  log?: Record<string, unknown>;
  /**
   * The privileged helper's socket, for a node whose server runs unprivileged (the package's unit).
   * Left out in the lab: its nodes are processes run as root on the host, acting directly.
   */
  privilegedHelper?: string;
}

export function nodeServerConfig(o: NodeConfigOptions): Record<string, unknown> {
  return {
    ...(o.identity ? { identity: o.identity } : {}),
    collectives: o.collectives,
    ...(o.brokers ? { brokers: o.brokers } : {}),
    facts: o.facts ?? { facter: true },
    // nrpe and resource are served once provisioned: a waiting node hosts the provision agent only
    agents: { builtin: [...NODE_AGENTS] },
    plugins: o.plugins ?? {},
    registration: o.registration ?? { interval: 300, splay: true },
    ...(o.security ? { security: o.security } : {}),
    // Once provisioned, the node reconnects on its own with its Puppet certificate.
    tls: { ca: o.ca, use_puppet_cert: true },
    // Until then it waits in the provisioning collective with the bootstrap credential.
    provisioning: { collective: o.provisioning.collective, callers: o.provisioning.callers, cert: o.bootstrap.cert, key: o.bootstrap.key },
    log: o.log ?? { level: "info" },
    // every request it handles is recorded in the fleet's audit stream (the console and
    // `muster broker stores` create it; docs/security.md#the-audit-trail), its own bootstrap
    // credential included. A node's broker user may not create it: it only looks it up.
    audit: { stream: { create: false } },
    ...(o.privilegedHelper ? { privileged_helper: o.privilegedHelper } : {}),
  };
}
