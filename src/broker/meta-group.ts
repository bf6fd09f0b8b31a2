// JetStream's meta group as each broker's monitoring port tells it (GET /jsz): who leads, how many
// members the group expects, and (on the leader only) which members it counts as peers. A member
// the leader does not count can hold no stream's copy: creating an R3 stream then fails with "no
// suitable peers for placement", with no reason appended. Pure: /jsz bodies in, a verdict out.

/** One broker's answer, or why it gave none. */
export interface MetaView {
  /** This member's server_name. */
  server: string;
  error?: string;
  leader?: string;
  size?: number;
  /** The leader's peers other than itself (present only in the leader's own answer). */
  peers?: string[];
}

/** A MetaView from a /jsz body; a body that is not /jsz's shape gives an error, never a throw. */
export function parseMetaView(server: string, body: string): MetaView {
  let j: unknown;
  try {
    j = JSON.parse(body);
  } catch {
    return { server, error: `not JSON: ${body.slice(0, 80)}` };
  }
  const meta = (j as { meta_cluster?: unknown })?.meta_cluster;
  if (typeof meta !== "object" || meta === null) return { server, error: "no meta_cluster in /jsz (JetStream clustered mode not running)" };
  const m = meta as { leader?: unknown; cluster_size?: unknown; replicas?: unknown };
  const peers = Array.isArray(m.replicas) ? m.replicas.map((r) => (r as { name?: unknown })?.name).filter((n): n is string => typeof n === "string") : undefined;
  return {
    server,
    ...(typeof m.leader === "string" && m.leader ? { leader: m.leader } : {}),
    ...(typeof m.cluster_size === "number" ? { size: m.cluster_size } : {}),
    ...(peers ? { peers } : {}),
  };
}

/**
 * The member leading the meta group, from its own answer. A member that leads a group of its own
 * besides counts nobody, so the leader counting the most peers is the one.
 */
export function metaLeader(views: MetaView[]): MetaView | undefined {
  return views.filter((v) => v.leader !== undefined && v.leader === v.server).sort((a, b) => (b.peers?.length ?? 0) - (a.peers?.length ?? 0))[0];
}

/** The members the meta leader does not count as peers; no member leading (or the leader silent) gives none: nothing to judge by. */
export function membersOutsideMeta(views: MetaView[]): string[] {
  const leader = metaLeader(views);
  if (!leader) return [];
  const counted = new Set([leader.server, ...(leader.peers ?? [])]);
  return views.filter((v) => !counted.has(v.server)).map((v) => v.server);
}

/**
 * Whose nats-server to restart when members are left out, as docs/deploy.md tells an operator:
 * first the members left out (they rejoin and the leader adds them), then, if that was not enough,
 * the leader (a new one counts afresh); then nobody: the operator reads the logs.
 */
export function metaRemedy(views: MetaView[], tried: number): { restart: string[]; out: string[] } {
  const out = membersOutsideMeta(views);
  if (!out.length || tried >= 2) return { restart: [], out };
  return { restart: tried === 0 ? out : [metaLeader(views)!.server], out };
}

/** One line per member, for an operator: "nats1: leader nats2, expects 3; nats2 leads, peers nats1". */
export function describeMeta(views: MetaView[]): string {
  return views
    .map((v) => {
      if (v.error) return `${v.server}: ${v.error}`;
      const size = v.size !== undefined ? `, expects ${v.size}` : "";
      if (v.leader === v.server) return `${v.server} leads${size}, peers ${v.peers?.length ? v.peers.join(" ") : "none"}`;
      return `${v.server}: ${v.leader ? `leader ${v.leader}` : "no leader"}${size}`;
    })
    .join("; ");
}
