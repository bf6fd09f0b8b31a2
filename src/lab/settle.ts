import { MusterClient } from "../client/client.js";
import { buildFilter } from "../filter/index.js";
import { runAll } from "../fleet/runner.js";
import type { NodeRecord } from "../protocol/provision-record.js";
import { roleClasses, staleLookups } from "./roles.js";
import { labBrokers, type LabState } from "./state.js";

// Before `lab up` says the lab is ready: a node whose production catalog looked others up
// (search_nodes) before they were provisioned runs Puppet once more, once they are registered,
// so the lab reads as the README says (a web node's webapp.conf names its database master). Which
// nodes, and why, is roles.ts staleLookups (pure); this waits for the registry and runs Puppet
// through the fleet's runall, as `muster puppet runall` would. On a site, so does a node whose
// production run began before PuppetDB served (docs/deploy.md section 10: such a run is not in it).

/** How long the nodes looked up may take to show in the registry with their classes. */
const REGISTERED_WITHIN_MS = 60_000;

export interface SettleOutcome {
  /** Nodes that ran Puppet again, and those whose run did not succeed (with why). */
  ran: string[];
  failed: { identity: string; why: string }[];
}

/** What settleLookups needs of a lab: its nodes, and how its operator reaches the broker (no TLS: a test's bare broker). */
export type SettleReach = Pick<LabState, "broker" | "site" | "collective"> & { nodes: Pick<LabState["nodes"][number], "identity" | "role">[]; tls?: { admin?: LabState["tls"]["admin"] } };

/** The provisioned nodes whose production run began before `since` (ms). */
export function ranBefore(recs: readonly NodeRecord[], since: number): string[] {
  return recs.filter((r) => r.status === "done" && (r.stageTimes?.production?.start ?? Infinity) < since).map((r) => r.identity);
}

/** Waits for each of `ids` in the registry with its role's classes; says why the first one that does not show in time is missing. */
async function firstUnregistered(client: MusterClient, s: SettleReach, ids: string[]): Promise<string | undefined> {
  const registry = await client.registry();
  const deadline = Date.now() + REGISTERED_WITHIN_MS;
  for (const id of ids) {
    const classes = roleClasses(s.nodes.find((n) => n.identity === id)!.role);
    const filter = buildFilter({ identity: [id], class: classes });
    while (!(await registry.discover(filter, { timeoutMs: 5000, idleMs: 0 }).catch((): string[] => [])).includes(id)) {
      if (Date.now() > deadline) return `${id} is not in the registry with ${classes.join(", ")} after ${REGISTERED_WITHIN_MS / 1000} s`;
      await new Promise((r) => setTimeout(r, 500)); // the registry says nothing when a record arrives: ask again
    }
  }
  return undefined;
}

/** Runs Puppet again on the provisioned nodes whose lookups were made too early (`recs`: the nodes' provisioning records). */
export async function settleLookups(s: SettleReach, recs: readonly NodeRecord[], progress: (line: string) => void = () => undefined): Promise<SettleOutcome> {
  const stale = staleLookups(
    s.nodes.map((n) => ({ identity: n.identity, role: n.role })),
    new Map(recs.map((r) => [r.identity, r])),
  );
  // a site's nodes whose production run began before PuppetDB served: none of it reached PuppetDB
  const missedPdb = s.site?.puppetdbSince ? ranBefore(recs, s.site.puppetdbSince) : [];
  const beforePdb = missedPdb.filter((id) => !stale.some((x) => x.identity === id));
  if (!stale.length && !beforePdb.length) return { ran: [], failed: [] };
  const client = await MusterClient.connect({ brokers: labBrokers(s), collective: s.collective, name: "muster-lab-settle", tls: s.tls?.admin });
  try {
    // what they look up must be there first: each node in the registry with its role's classes
    const unregistered = await firstUnregistered(client, s, [...new Set(stale.flatMap((x) => x.lookedUpEarly))]);
    const missing = unregistered ? stale.map((x) => ({ identity: x.identity, why: unregistered })) : [];
    // a lookup that cannot be satisfied is said, and those nodes wait; the nodes PuppetDB lacks run all the same
    if (!missing.length) for (const x of stale) progress(`${x.identity} runs Puppet again: it looked up ${x.lookedUpEarly.join(", ")} before ${x.lookedUpEarly.length > 1 ? "they were" : "it was"} provisioned`);
    const forPdb = missing.length ? missedPdb : beforePdb;
    for (const id of forPdb) progress(`${id} runs Puppet again: its production run began before PuppetDB served, which holds none of it`);
    const nodes = [...(missing.length ? [] : stale.map((x) => x.identity)), ...forPdb];
    if (!nodes.length) return { ran: [], failed: missing };
    const { report } = await runAll(client, { concurrency: nodes.length, nodes });
    const failed = report.nodes.filter((n) => n.outcome !== "ok" && n.outcome !== "changed").map((n) => ({ identity: n.identity, why: `${n.outcome}: ${n.detail}` }));
    return { ran: nodes, failed: [...missing, ...failed] };
  } finally {
    await client.close();
  }
}
