import { hostname } from "node:os";
import type { MusterClient } from "../client/client.js";
import { retryTransient } from "../broker/bucket.js";
import { MusterError } from "../errors.js";
import { compileFilter } from "../filter/index.js";
import { DEFAULT_STATE_BUCKET } from "../protocol/buckets.js";
import type { NodeRecord } from "../protocol/provision-record.js";
import type { PuppetRunRecord } from "../protocol/puppet-run.js";
import { emptyFilter, type Filter } from "../protocol/types.js";
import { ProvisionState } from "../provisioner/state.js";
import type { PuppetDbNodeStatus } from "../protocol/puppetdb.js";
import { DEFAULT_HEALTH_POLICY, healthReport, nodesToAsk, puppetDbView, unreachableAfter, type HealthInputs, type HealthPolicy, type HealthReport } from "./model.js";
import { AliveStore, PuppetRunStore, ServiceStore, type Beat, type ServiceSeen } from "./stores.js";
import { lostFromConsoles, span, type Blind } from "./view.js";

// Fleet health read once (`muster health`): every heartbeat (each carries its node's last Puppet
// run), the services' beats, the provisioning records, the registry's answer to the filter and,
// where the registry reaches a PuppetDB, every active node's latest report there, read side by
// side; the kept runs of the nodes whose last run failed; then the pure model (model.ts). No node is asked
// anything. The console keeps the same inputs live instead (web/health-feed.ts) and computes the
// same report from them.

export interface HealthReadOptions {
  filter?: Filter;
  stateBucket?: string;
  /** The registry's bucket (client config registry_bucket). */
  registryBucket?: string;
  policy?: HealthPolicy;
  /** Told when a source could not be read (the report is made from the others). */
  onWarning?: (message: string) => void;
  timeoutMs?: number;
  /**
   * The heartbeats an earlier read of the whole fleet found (the CLI keeps them in its cache):
   * when they cannot be read now (the store has no leader after a broker's loss), the nodes they
   * name are asked instead (readFleetHealth), so one that died then is still named.
   */
  memory?: BeatMemory;
}

/** Heartbeats kept from the last read of the whole fleet, and when that read was. */
export interface BeatMemory {
  recall(): { at: number; beats: Map<string, Beat> } | undefined;
  keep(beats: ReadonlyMap<string, Beat>): void;
}

/** Whether the filter names identities only (then nodes the registry no longer knows can match it too). */
export function identityOnly(f: Filter): boolean {
  return f.fact.length === 0 && f.class.length === 0 && f.agent.length === 0 && f.compound.length === 0;
}

const isEmpty = (f: Filter) => identityOnly(f) && f.identity.length === 0;

/** The identities a filter names exactly (-I without a regex), or undefined when it is any other filter. */
export function namedOnly(f: Filter): string[] | undefined {
  if (!identityOnly(f) || f.identity.length === 0 || f.identity.some((i) => i.startsWith("/"))) return undefined;
  return [...new Set(f.identity)];
}

/**
 * Which nodes a report covers: with no filter, every node any source knows; with one, those the
 * registry matches, and (for a filter of identities only) any other known node it names.
 */
export function inScope(known: Iterable<string>, filter: Filter, registryMatches: ReadonlySet<string> | undefined): Set<string> {
  if (isEmpty(filter)) return new Set([...known, ...(registryMatches ?? [])]);
  const out = new Set(registryMatches ?? []);
  if (identityOnly(filter)) {
    const f = compileFilter(filter);
    for (const id of known) if (f.matches({ identity: id, facts: {}, classes: [], agents: [], collectives: [] })) out.add(id);
  }
  return out;
}

/**
 * Failed-in-a-row needs a node's kept runs only when its last run failed (its heartbeat says so):
 * those few are read, not every node's.
 */
async function streaks(runs: PuppetRunStore, beats: Map<string, Beat>, ids: Iterable<string>): Promise<Map<string, PuppetRunRecord[]>> {
  const failing = [...ids].filter((id) => beats.get(id)?.heartbeat.status.puppet?.last_run_status === "failed");
  const out = new Map<string, PuppetRunRecord[]>();
  let next = 0;
  const worker = async () => {
    while (next < failing.length) {
      const id = failing[next++]!;
      const kept = await runs.runs(id).catch(() => undefined);
      if (kept) out.set(id, kept);
    }
  };
  await Promise.all(Array.from({ length: Math.min(32, failing.length) }, worker));
  return out;
}

export interface HealthInputsRead {
  inputs: HealthInputs[];
  /** The site's services' beats, and every node's heartbeat (masters and the notifier carry theirs); absent for a report narrowed by a filter. */
  services?: { beats: ServiceSeen[]; nodes: { identity: string; beat: Beat }[] };
  /** How far this read can vouch for silence (view.ts). */
  view: { blind: Blind[]; freshAsOf?: number };
  /** The heartbeats are an earlier read's (BeatMemory): every node they name is to be asked. */
  remembered?: { at: number; nodes: number };
  /** Sources that answered (for diagnostics). */
  sources: { alive: boolean; runs: boolean; provisioning: boolean; registry: boolean; services: boolean; puppetdb: boolean };
}

/** How long a read of the heartbeats is tried again (a broker failing over takes a few seconds). */
const READ_AGAIN_MS = 15_000;

/** Every `muster health` of this host probes under one name (one key in the alive bucket, overwritten). */
const PROBE_NAME = `cli@${hostname()}`;

/**
 * How far a read can vouch for silence. A probe this reader stored just before reading proves the
 * store takes writes: silence is the nodes'. Without one (a credential that may not write it),
 * the newest value stored (any node's heartbeat, any observer's probe) says when the store last
 * took a write: if that is longer ago than a node takes to count as unreachable, every node went
 * quiet at once, and a store that stopped taking writes cannot be told from a fleet that died, so
 * nobody is judged by the silence since.
 */
export function readView(probed: boolean, newest: number, knownNodes: number, policy: HealthPolicy, now: number): { blind: Blind[]; freshAsOf?: number } {
  if (probed) return { blind: [], freshAsOf: now };
  if (newest <= 0 || knownNodes === 0) return { blind: [] };
  const quietS = (now - newest) / 1000;
  if (quietS <= unreachableAfter(policy, undefined)) return { blind: [], freshAsOf: newest };
  return { blind: [{ from: newest, lost: true, why: `the alive bucket has taken no heartbeat from any node for ${Math.round(quietS)} s: the store may not be taking writes, so silence since is not judged (run muster health with an admin credential, which proves the store with a probe)` }], freshAsOf: newest };
}

/** PuppetDB's record of the nodes (through the registry), or undefined where none is configured. */
export async function readPuppetDbNodes(client: MusterClient, o: { registryBucket?: string; timeoutMs?: number }, warn: (m: string) => void): Promise<Map<string, PuppetDbNodeStatus> | undefined> {
  const { NoPuppetDb } = await import("../client/discovery/puppetdb.js");
  try {
    const source = await client.puppetdb(o.registryBucket ? { bucket: o.registryBucket } : {});
    return new Map((await source.nodes(o.timeoutMs)).map((n) => [n.certname, n]));
  } catch (e) {
    if (!(e instanceof NoPuppetDb)) warn(`PuppetDB: ${(e as Error).message}`);
    return undefined;
  }
}

/** A failing node's last runs from PuppetDB, for its streak: those few are read, not every node's. */
async function puppetDbStreaks(client: MusterClient, nodes: Map<string, PuppetDbNodeStatus>, ids: Iterable<string>, bucket: string | undefined): Promise<Map<string, PuppetRunRecord[]>> {
  const failing = [...ids].filter((id) => nodes.get(id)?.status === "failed");
  const out = new Map<string, PuppetRunRecord[]>();
  if (!failing.length) return out;
  const source = await client.puppetdb(bucket ? { bucket } : {});
  let next = 0;
  const worker = async () => {
    while (next < failing.length) {
      const id = failing[next++]!;
      const runs = await source.runs(id, 10).catch(() => undefined);
      if (runs) out.set(id, runs);
    }
  };
  await Promise.all(Array.from({ length: Math.min(16, failing.length) }, worker));
  return out;
}

/** Everything health needs, read once. */
export async function readHealthInputs(client: MusterClient, o: HealthReadOptions = {}): Promise<HealthInputsRead> {
  const filter = o.filter ?? emptyFilter();
  const warn = o.onWarning ?? (() => undefined);
  const timeoutMs = o.timeoutMs ?? 30_000;
  const soft = <T>(what: string, p: Promise<T>): Promise<T | undefined> =>
    p.catch((e: unknown) => {
      warn(`${what}: ${(e as Error).message}`);
      return undefined;
    });
  const [alive, runStore, state, serviceStore] = await Promise.all([soft("the alive bucket", AliveStore.open(client)), soft("the Puppet runs bucket", PuppetRunStore.open(client)), soft("the provisioning records", ProvisionState.openExisting(client, o.stateBucket ?? DEFAULT_STATE_BUCKET)), ServiceStore.open(client).catch(() => undefined)]);
  // The probe first: a read that holds it is the store's as of now (quiet: a viewer may not write it).
  // A read without it came from a copy behind (seen after a broker's failover): read again.
  const nonce = `${process.pid}.${Math.random().toString(36).slice(2, 10)}`;
  const probed = alive ? await alive.probe(PROBE_NAME, nonce).then(() => true, () => false) : false;
  const current = () => alive?.probes.get(PROBE_NAME)?.nonce === nonce;
  // the registry answers filters; without one it only adds nodes that send no heartbeats, so its absence is said only when a filter needs it
  const quiet = identityOnly(filter);
  const registryWarn = quiet ? () => undefined : warn;
  const registry = await client.registry({ ...(o.registryBucket ? { bucket: o.registryBucket } : {}), onWarning: registryWarn }).catch(() => undefined);
  // A node's last run rides on its heartbeat: the runs bucket is read only for failing nodes'
  // streaks. Named nodes (-I without a regex) are read key by key, not the whole fleet.
  const named = namedOnly(filter);
  const few = <T>(read: (id: string) => Promise<T | undefined>) => async () => {
    const out = new Map<string, T>();
    for (const [id, v] of await Promise.all(named!.map(async (id) => [id, await read(id)] as const))) if (v !== undefined) out.set(id, v);
    return out;
  };
  const [beats, records, registered, serviceBeats, puppetdb] = await Promise.all([
    // through a broker's failover a read may fail once: read again (a source not read would make every node look silent)
    alive
      ? soft(
          "reading heartbeats",
          retryTransient(
            async () => {
              if (named) return few((id) => alive.get(id))();
              const all = await alive.latest(timeoutMs);
              if (probed && !current()) throw new Error("the store answered from a copy that is behind (this read's own probe is not in it)");
              return all;
            },
            READ_AGAIN_MS,
            () => true,
          ),
        )
      : undefined,
    state ? soft("reading provisioning records", named ? few(async (id) => (await state.get(id))?.record)().then((m) => [...m.values()]) : state.list()) : undefined,
    registry
      ? registry
          .discover(filter, { timeoutMs: 2000, idleMs: 0 })
          .then((ids) => new Set(ids))
          .catch((e: unknown) => void registryWarn(`asking the registry: ${(e as Error).message}`))
      : undefined,
    // read again through a failover as the heartbeats are: a services' list without its brokers and provisioners says less than nothing
    serviceStore ? soft("reading the services' heartbeats", retryTransient(() => serviceStore.latest(timeoutMs), READ_AGAIN_MS, () => true)) : undefined,
    readPuppetDbNodes(client, { registryBucket: o.registryBucket, timeoutMs }, warn),
  ]);
  if (!alive) warn("no alive bucket yet: nodes' heartbeats are kept once the console (muster web) has created it (docs/fleet.md#health)");
  // a read of the whole fleet is kept for the next that cannot read them; one that cannot uses it
  if (beats && isEmpty(filter)) o.memory?.keep(beats);
  const recalled = beats ? undefined : o.memory?.recall();
  const heard = beats ?? recalled?.beats;
  if (!identityOnly(filter) && !registered) throw new MusterError("MUSTER_REGISTRY_UNAVAILABLE", "filters on facts, classes or agents are answered from the registry, and none answered: run `muster registry serve`, or filter by identity (-I)");
  const byId = new Map<string, NodeRecord>((records ?? []).map((r) => [r.identity, r]));
  // a node PuppetDB lists is known too: one that never answered is what PuppetDB's witness is for
  const known = new Set<string>([...(heard?.keys() ?? []), ...byId.keys(), ...(puppetdb?.keys() ?? [])]);
  const ids = inScope(known, filter, registered);
  // PuppetDB's reports are the record of runs where it is configured: its streaks, else the nodes'
  const [history, pdbHistory] = await Promise.all([
    !puppetdb && runStore && beats ? streaks(runStore, beats, ids) : new Map<string, PuppetRunRecord[]>(),
    puppetdb ? puppetDbStreaks(client, puppetdb, ids, o.registryBucket) : new Map<string, PuppetRunRecord[]>(),
  ]);
  const inputs: HealthInputs[] = [];
  for (const id of ids) {
    const beat: Beat | undefined = heard?.get(id);
    const rec = byId.get(id);
    const pdb = puppetDbView(puppetdb, id, pdbHistory.get(id));
    inputs.push({ identity: id, ...(beat ? { beat } : {}), registered: registered?.has(id) ?? false, ...(rec ? { provisioning: rec } : {}), runs: history.get(id) ?? [], ...(pdb ? { puppetdb: pdb } : {}) });
  }
  const policy = o.policy ?? DEFAULT_HEALTH_POLICY;
  // heartbeats that could not be read: nobody is judged by them (an open blind stretch)
  const own = recalled
    ? { blind: [{ from: Date.now(), why: `the nodes' heartbeats could not be read (see the warning above): the ${recalled.beats.size} nodes an earlier read found (${span((Date.now() - recalled.at) / 1000)} ago) are asked instead: one that does not answer is unreachable when that read's last heartbeat of it is older than its limit` }] }
    : alive && !beats
      ? { blind: [{ from: Date.now(), why: "the nodes' heartbeats could not be read (see the warning above), so nobody is judged unreachable" }] }
      : readView(probed && (named !== undefined || current()), alive?.newest ?? 0, beats?.size ?? 0, policy, Date.now());
  // what a watching console saw the store lose, which one read cannot see (a broker's failover a minute ago)
  const view = { ...own, blind: [...own.blind, ...lostFromConsoles(serviceBeats?.values() ?? [], Date.now())] };
  const services = isEmpty(filter) ? { beats: [...(serviceBeats?.values() ?? [])], nodes: [...(beats ?? [])].map(([identity, beat]) => ({ identity, beat })) } : undefined;
  return { inputs, ...(services ? { services } : {}), view, ...(recalled ? { remembered: { at: recalled.at, nodes: recalled.beats.size } } : {}), sources: { alive: beats !== undefined, runs: runStore !== undefined, provisioning: records !== undefined, registry: registered !== undefined, services: serviceBeats !== undefined, puppetdb: puppetdb !== undefined } };
}

/** The site's health, read once: its services (unless a filter narrows it to nodes) and its nodes. */
export async function readFleetHealth(client: MusterClient, o: HealthReadOptions = {}, now = Date.now): Promise<HealthReport> {
  client.readKeyDirectory(); // beside the stores' reads: a node asked below has its answer judged at once
  const r = await readHealthInputs(client, o);
  const policy = o.policy ?? DEFAULT_HEALTH_POLICY;
  const extras = { ...(r.services ? { services: r.services } : {}), blind: r.view.blind, ...(r.view.freshAsOf !== undefined ? { freshAsOf: r.view.freshAsOf } : {}) };
  // A node quiet past its limit is asked before it is judged (model.ts nodesToAsk): a store's
  // election drops heartbeats a read once cannot know of (the console may not have seen it either),
  // and one that answers now is reachable, last seen now; one quiet only across such an election
  // that does not answer is unreachable without waiting out the election's length.
  // Every node whose limit falls within the ask's wait is asked, and all are judged as of the ask's
  // end: a dead node is named as soon as its limit passes, and one that beat a second before the
  // read is not judged by the seconds spent waiting on another (never later than the ask's end:
  // past it, nodes that were not asked could be). The wait is at most half the shortest limit, so
  // a node that answered at once is still within its limit at the end.
  const at = now();
  let waitMs = ASK_SILENT_MS; // a loop, not Math.min(...): a fleet of 100,000 is more arguments than a call takes
  for (const i of r.inputs) if (i.beat) waitMs = Math.min(waitMs, unreachableAfter(policy, i.beat.heartbeat.interval) * 500);
  // Heartbeats remembered from an earlier read (this one could not read them): every node they
  // name is asked, since the view cannot see now and nodesToAsk would ask nobody. One that answers
  // is there now; one that does not is judged by its remembered silence.
  const ask = r.remembered ? r.inputs.filter((i) => i.beat && i.beat.heartbeat.state !== "stopping").map((i) => i.identity) : nodesToAsk(r.inputs, policy, at, { blind: r.view.blind }, 0, () => waitMs / 1000);
  let judgeAt = at;
  if (ask.length) {
    // Asked while the store cannot give the heartbeats, or while the key directory it holds is
    // still being read after a fifth of the wait, the answers are not held for that directory:
    // waiting for it outlasted the ask, and every node that answered counted as silent (the site's
    // nats3 cut, twice: once with the heartbeats unreadable, once with them readable and the
    // directory's watch not, the store electing). They are kept unverified.
    const held = r.remembered || !(await client.keyDirectoryWithin(waitMs / 5));
    const got = await askNodes(held ? client.withKeyDirectory(false) : client, ask, waitMs);
    const byId = new Map(r.inputs.map((i) => [i.identity, i]));
    if (got.error && r.remembered) {
      // neither the store nor the nodes could be asked: the remembered beats judge nobody
      for (const i of r.inputs) delete i.beat;
      return healthReport(r.inputs, policy, now(), { ...extras, blind: r.view.blind.map((b) => (b.to === undefined ? { ...b, why: `the nodes' heartbeats could not be read, and asking the nodes failed (${got.error}), so nobody is judged unreachable` } : b)) });
    }
    for (const id of ask) byId.get(id)!.asked = { at: got.answered.get(id) ?? at, answered: got.answered.has(id), ...(got.error ? { error: got.error } : {}) };
    judgeAt = Math.min(now(), at + waitMs);
  }
  return healthReport(r.inputs, policy, judgeAt, extras);
}

/** Asks nodes whether they are there (rpcutil ping, `timeoutMs`): those that answered and when, or why asking failed. */
export async function askNodes(client: MusterClient, ids: string[], timeoutMs: number): Promise<{ answered: Map<string, number>; error?: string }> {
  const answered = new Map<string, number>();
  try {
    // each answer's own time: an ask waits for its slowest, and what answered at once was there then
    const res = await client.call("rpcutil", "ping", {}, { nodes: ids, timeoutMs, onReply: (r) => answered.set(r.sender, Date.now()) });
    for (const r of res.replies) if (!answered.has(r.sender)) answered.set(r.sender, Date.now());
    return { answered };
  } catch (e) {
    return { answered: new Map(), error: (e as Error).message };
  }
}

/** How long health waits for silent nodes to answer its ping: a loaded node (a site on two cores) answers in well under this. */
const ASK_SILENT_MS = 5000;
