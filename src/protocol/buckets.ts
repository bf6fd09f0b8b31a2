// JetStream KV bucket names: wire contracts shared by the daemons that own the buckets (the
// provisioner, the registry), the clients that read them (`muster provision status`, `--dm
// registry`, decommission) and the broker permissions that let each role reach them.

/** The provisioner's per-node records (provisioner config `state_bucket`). */
export const DEFAULT_STATE_BUCKET = "muster_provision";

/** The registry's latest registration per node (registry config `bucket`). */
export const DEFAULT_REGISTRY_BUCKET = "muster-registry";

/** The notify agents' delivered dedupe keys (notify config `dedupe_bucket`): a restarted notifier still sends once. */
export const DEFAULT_NOTIFY_BUCKET = "muster_notify";

/** The JetStream stream behind a KV bucket. */
export function kvStreamName(bucket: string): string {
  return `KV_${bucket}`;
}

/**
 * The node-key directory: per identity, the ed25519 public key its replies and events are signed
 * with (protocol/node-keys.ts). Written by the provisioner, read by clients that verify replies.
 */
export const DEFAULT_NODE_KEYS_BUCKET = "muster_node_keys";

/**
 * A string as a KV key: keys allow [-/_=.a-zA-Z0-9], anything else is hex-escaped as `_hh`
 * (identities may hold `:` and `@`). The provisioner's records and the agents' stores use it.
 */
export function bucketKey(s: string): string {
  return s.replace(/[^-/_=.a-zA-Z0-9]/g, (c) => `_${c.charCodeAt(0).toString(16).padStart(2, "0")}`);
}

/**
 * Each node's latest heartbeat (protocol/heartbeat.ts), written by the node itself: what fleet
 * health reads to say whether a node is reachable. A node's key lives as long as the bucket's TTL
 * after its last heartbeat, so a dead node is remembered (and reported) that long.
 */
export const DEFAULT_ALIVE_BUCKET = "muster_alive";

/**
 * Each service of the site's latest heartbeat (protocol/service.ts): provisioners, the registry,
 * the console write their own; the console writes what it sees of each broker. Keyed
 * `<role>.<name>`, so a role's credential can be confined to its own keys.
 */
export const DEFAULT_SERVICES_BUCKET = "muster_services";

/** Each node's last Puppet runs (protocol/puppet-run.ts), one value per run, written by the node. */
export const DEFAULT_PUPPET_RUNS_BUCKET = "muster_puppet_runs";

/**
 * The subject a put to `key` of `bucket` is: what a node publishes to (plain NATS, no JetStream
 * API), and what broker permissions confine to the node's own key.
 */
export function kvSubject(bucket: string, key: string): string {
  return `$KV.${bucket}.${key}`;
}
