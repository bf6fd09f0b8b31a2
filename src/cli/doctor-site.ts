import type { MusterClient } from "../client/client.js";

// `muster doctor`'s checks of a site built by hand (docs/deploy.md): each names a step of the guide
// that was skipped, and the section that does it. They run against a site's brokers (they map each
// credential to a user, so they ask for authentication); a lab or a single open broker needs none
// of these steps.

export type CheckState = "ok" | "fail" | "skip";
/** One check of `muster doctor`: ok, fail (with a fix) or skip (not applicable, or an earlier check failed). */
export interface Check {
  name: string;
  state: CheckState;
  detail: string;
  fix?: string;
}

/** The guide's sections each check points at. */
export const GUIDE = {
  credentials: "docs/deploy.md#2-credentials",
  broker: "docs/deploy.md#3-the-broker",
  masters: "docs/deploy.md#4-puppet-masters",
} as const;

const list = (xs: string[], max = 8) => `${xs.slice(0, max).join(", ")}${xs.length > max ? `, ... (${xs.length} in all)` : ""}`;

/** The fleet's stores (alive, Puppet runs, key directory, runall, audit): nodes may not make them. */
export async function storesCheck(client: MusterClient): Promise<Check> {
  const { missingFleetStores } = await import("../fleet/stores.js");
  try {
    const missing = await missingFleetStores(client);
    if (!missing.length) return { name: "stores", state: "ok", detail: "the alive and Puppet runs buckets, the key directory, the runall and audit streams exist" };
    return { name: "stores", state: "fail", detail: `missing: ${missing.join(", ")} (nodes may not create them: until they exist, heartbeats, Puppet runs and audit records have nowhere to go)`, fix: `muster broker stores --replicas N (N: your brokers, up to 3), with an admin's credential (${GUIDE.broker})` };
  } catch (e) {
    return { name: "stores", state: "fail", detail: `cannot look at JetStream: ${(e as Error).message}`, fix: `the stores are looked at with an admin's credential (admins: in the broker spec, ${GUIDE.credentials})` };
  }
}

/** Every node that answered: is its reply verified against the key directory? */
export async function verifiedCheck(client: MusterClient, discovered: string[]): Promise<Check> {
  if (!discovered.length) return { name: "replies verified", state: "skip", detail: "no node answered to ask" };
  const { rpcutilDDL } = await import("../agents/rpcutil/ddl.js");
  const res = await client.call("rpcutil", "ping", {}, { nodes: discovered, ddl: rpcutilDDL, timeoutMs: 5000 });
  const unverified = [...res.unverified].sort();
  if (!unverified.length) return { name: "replies verified", state: "ok", detail: `${res.replies.length} repl${res.replies.length === 1 ? "y" : "ies"} to rpcutil ping, each signed by the key the key directory names for its sender` };
  return {
    name: "replies verified",
    state: "fail",
    detail: `replies from ${list(unverified)} do not verify: the key directory names no key for them`,
    fix: `a master or the notifier: make its node key (muster key create IDENTITY), give it to the machine (muster user-data --node-key) and enroll it (muster key enroll IDENTITY --key IDENTITY.pub) (${GUIDE.credentials}); a node gets its entry when the provisioner provisions it`,
  };
}

/** Each Puppet master's CA answers for the master's identity: its certificate carries that name. */
export async function mastersCheck(client: MusterClient, timeoutMs: number): Promise<Check> {
  const [{ emptyFilter }, { puppetcaDDL }] = await Promise.all([import("../protocol/types.js"), import("../agents/puppetca/ddl.js")]);
  const masters = (await client.discover({ filter: { ...emptyFilter(), agent: ["puppetca"] }, timeoutMs })).sort();
  if (!masters.length) return { name: "masters", state: "skip", detail: `no Puppet master answered (agent puppetca) in collective ${client.collective}` };
  // each master is asked about its own name
  const replies = await Promise.all(masters.map(async (m) => (await client.call("puppetca", "status", { certname: m }, { nodes: [m], ddl: puppetcaDDL, timeoutMs: 15_000 })).replies.find((x) => x.sender === m)));
  const bad: string[] = [];
  for (const [i, m] of masters.entries()) {
    const r = replies[i];
    if (!r) bad.push(`${m}: no answer`);
    else if (r.statuscode !== 0) bad.push(`${m}: ${/altnames|does not match|certificate/i.test(r.statusmsg) ? "its CA's certificate does not carry its identity: " : ""}${r.statusmsg}`);
    else if ((r.data as { state?: string }).state !== "signed") bad.push(`${m}: its CA has no signed certificate named ${m} (it signed itself under another name, its host name?)`);
  }
  if (!bad.length) return { name: "masters", state: "ok", detail: `${masters.length} master${masters.length === 1 ? "" : "s"} (${list(masters)}): each one's CA answers on a certificate for its identity` };
  return {
    name: "masters",
    state: "fail",
    detail: bad.join("; "),
    fix: `a master's certname is its identity: its user-data (muster user-data --role master) sets certname in puppet.conf before puppetserver ca setup; a master made under another name is made anew from it (${GUIDE.masters})`,
  };
}

/** How recently a node's record changed for its silence to be its restart onto its certificate. */
const JUST_SWITCHED_MS = 60_000;

/**
 * Nodes the provisioner took past `disable` reconnect on their Puppet certificate: one that does
 * not answer at all (not even "not trusted" to a direct request) is refused by the brokers, whose
 * clients-ca.pem lacks its master's Puppet CA.
 */
export async function puppetCaCheck(client: MusterClient, discovered: string[], bucket?: string): Promise<Check> {
  const [{ ProvisionState }, { Stages }, { rpcutilDDL }] = await Promise.all([import("../provisioner/state.js"), import("../protocol/provision-record.js"), import("../agents/rpcutil/ddl.js")]);
  const store = await ProvisionState.openExisting(client, bucket).catch(() => undefined);
  if (!store) return { name: "puppet CAs", state: "skip", detail: "no provisioning state: no node is provisioned yet" };
  const disabled = Stages.indexOf("disable");
  const moved = (await store.list()).filter((r) => r.status === "done" || (r.stage !== undefined && Stages.indexOf(r.stage) >= disabled));
  if (!moved.length) return { name: "puppet CAs", state: "skip", detail: "no node has switched to its Puppet certificate yet" };
  const quiet = moved.map((r) => r.identity).filter((id) => !discovered.includes(id));
  const answered = quiet.length ? new Set((await client.call("rpcutil", "ping", {}, { nodes: quiet, ddl: rpcutilDDL, timeoutMs: 5000 })).replies.map((r) => r.sender)) : new Set<string>();
  const dark = moved.filter((r) => !answered.has(r.identity) && quiet.includes(r.identity));
  if (!dark.length) return { name: "puppet CAs", state: "ok", detail: `the ${moved.length} node(s) on their Puppet certificates reach the brokers` };
  const byMaster = [...new Set(dark.map((r) => r.master ?? "their master"))];
  // a node restarts onto its certificate as it finishes: one that just did may still be on its way
  const now = Date.now();
  const recent = dark.filter((r) => now - r.updatedAt < JUST_SWITCHED_MS).map((r) => `${r.identity} ${Math.round((now - r.updatedAt) / 1000)} s ago`);
  const note = recent.length ? `; switched only moments ago: ${recent.join(", ")}: a node is back within a minute, run muster doctor again before acting` : "";
  return {
    name: "puppet CAs",
    state: "fail",
    detail: `${list(dark.map((r) => r.identity))} switched to their Puppet certificates and do not reach the brokers (masters ${byMaster.join(", ")})${note}`,
    fix: `the brokers must trust each master's Puppet CA: append /etc/muster/tls/puppet-ca.pem of ${byMaster.join(", ")} to clients-ca.pem on every broker and reload nats-server (${GUIDE.masters})`,
  };
}
