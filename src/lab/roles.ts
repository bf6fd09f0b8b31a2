// The lab nodes' roles: each node has a role (fact role) that the lab's Puppet site (manifests.ts)
// maps to a class: role::web, role::db (with mysql::master or mysql::slave by fact mysql_role) or
// role::monitor, and a customer and environment (facts). labRole() assigns them by node index, the
// same way every time; expectedMotd() says what a run leaves in the node's motd.

export type LabRoleName = "web" | "db" | "monitor";

export interface LabRole {
  role: LabRoleName;
  /** role::db only: which mysql class. */
  mysql?: "master" | "slave";
  customer: "acme" | "globex";
  environment: "development" | "production";
}

// Any lab of 4 nodes has a database master with a web node of the same customer and environment
// (acme, development), a second customer's web node and a monitor; 6 add globex's master and an
// acme slave. Past that the cycle repeats with slaves only: one master per customer and
// environment, so `muster find -W "environment=development customer=acme mysql::master"` finds
// exactly one node whatever --nodes says.
const ROLE_CYCLE: readonly LabRole[] = [
  { role: "db", mysql: "master", customer: "acme", environment: "development" },
  { role: "web", customer: "acme", environment: "development" },
  { role: "web", customer: "globex", environment: "production" },
  { role: "monitor", customer: "acme", environment: "production" },
  { role: "db", mysql: "master", customer: "globex", environment: "production" },
  { role: "db", mysql: "slave", customer: "acme", environment: "development" },
];

/** The role, customer and environment of the lab node with this index (0-based). */
export function labRole(index: number): LabRole {
  if (!Number.isInteger(index) || index < 0) throw new Error(`lab node index must be a non-negative integer, got ${index}`);
  const r = ROLE_CYCLE[index % ROLE_CYCLE.length]!;
  return index >= ROLE_CYCLE.length && r.mysql === "master" ? { ...r, mysql: "slave" } : { ...r };
}

/** The Puppet classes the production run gives a node of this role (besides settings, motd, ...). */
export function roleClasses(r: LabRole): string[] {
  if (r.role === "web") return ["role::web", "webapp"];
  if (r.role === "db") return ["role::db", `mysql::${r.mysql ?? "slave"}`];
  return ["role::monitor"];
}

/** The facts a lab node's role puts in its facts file (and exports to Puppet). */
export function roleFacts(r: LabRole): Record<string, string> {
  return { customer: r.customer, environment: r.environment, role: r.role, ...(r.mysql ? { mysql_role: r.mysql } : {}) };
}

export const ROLE_FACT_NAMES = ["customer", "environment", "role", "mysql_role"] as const;

/** The motd lines each class registers, in the order motd::register files them. */
function motdEntries(r: LabRole, stage: "bootstrap" | "production"): [number, string][] {
  const entries: [number, string][] = [];
  if (r.role === "web") entries.push([10, "web server (role::web)"]);
  if (r.role === "db") entries.push([10, "database server (role::db)"]);
  if (r.role === "monitor") entries.push([10, "monitoring (role::monitor)"]);
  if (stage === "production") {
    if (r.role === "web") entries.push([20, "web application (webapp)"]);
    if (r.role === "db") entries.push([20, r.mysql === "master" ? "MySQL master (mysql::master)" : "MySQL slave (mysql::slave)"]);
  }
  return entries;
}

/** The content a run of `stage` leaves in <node dir>/motd. */
export function expectedMotd(identity: string, country: string, role: LabRole, stage: "bootstrap" | "production" = "production"): string {
  const slug = (t: string) => t.replace(/[^A-Za-z0-9]+/g, "_").toLowerCase();
  const lines = motdEntries(role, stage)
    .map(([order, title]) => ({ file: `${order}-${slug(title)}`, line: `        - ${title}\n` }))
    .sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : 0));
  return `${identity} is managed by Puppet (country ${country}, stage ${stage})\ncustomer ${role.customer}, environment ${role.environment}\nPuppet modules:\n${lines.map((l) => l.line).join("")}`;
}

/**
 * Whether a node of role `reader` looks up nodes of role `other` while its production catalog is
 * compiled (search_nodes in manifests.ts): a web node and a slave their database master (same
 * customer and environment, MASTERDB_QUERY), a monitor every web and database node.
 */
export function looksUp(reader: LabRole, other: LabRole): boolean {
  if (reader.role === "monitor") return other.role === "web" || other.role === "db";
  const readsMaster = reader.role === "web" || (reader.role === "db" && reader.mysql === "slave");
  return readsMaster && other.role === "db" && other.mysql === "master" && other.customer === reader.customer && other.environment === reader.environment;
}

/** What staleLookups needs of a node's provisioning record. */
export interface ProvisionedAt {
  status: string;
  /** When its provisioning finished: it registers in the fleet, with its classes, at about that time. */
  finishedAt?: number;
  /** When each stage began: the production run's is when its lookups were made, at the earliest. */
  stageTimes?: Partial<Record<string, { start: number; end?: number }>>;
}

/**
 * The lab's nodes are provisioned together, in no order, so a node that looks others up may have
 * compiled its production catalog before one of them was provisioned and registered: `database_host
 * = none` in a web node's webapp.conf. Pure: the provisioned nodes that look up another whose
 * provisioning finished after their own production run began, each with the nodes it must find
 * registered before it runs Puppet again (the lab does so before `lab up` returns).
 */
export function staleLookups(nodes: readonly { identity: string; role: LabRole }[], recs: ReadonlyMap<string, ProvisionedAt>): { identity: string; lookedUpEarly: string[] }[] {
  const done = (id: string) => recs.get(id)?.status === "done";
  const out: { identity: string; lookedUpEarly: string[] }[] = [];
  for (const r of nodes) {
    const ranAt = recs.get(r.identity)?.stageTimes?.production?.start;
    if (!done(r.identity) || ranAt === undefined) continue;
    const early = nodes.filter((o) => o.identity !== r.identity && done(o.identity) && looksUp(r.role, o.role) && (recs.get(o.identity)!.finishedAt ?? Infinity) > ranAt).map((o) => o.identity);
    if (early.length) out.push({ identity: r.identity, lookedUpEarly: early });
  }
  return out;
}
