import { EventEmitter } from "node:events";
import type { Logger } from "pino";
import type { NodeRecord } from "../protocol/provision-record.js";
import type { PuppetRunRecord } from "../protocol/puppet-run.js";
import type { PuppetDbNodeStatus } from "../protocol/puppetdb.js";
import { healthReport, puppetDbView, type HealthInputs, type HealthPolicy, type HealthReport } from "./model.js";
import type { AliveStore, Beat, PuppetRunStore, Watching } from "./stores.js";

// The fleet's health, live, for every open page at once (the landing page, /api/health, alerts,
// the metrics): heartbeats and Puppet runs followed through watches on their buckets, the
// provisioning records from whoever follows them (the console's board), the registry's nodes and
// PuppetDB's record of the nodes (where the registry reaches one) asked now and then. The report (model.ts, the same as `muster health`) is recomputed every `tickMs`,
// since silence alone makes a node unreachable; `report` is emitted when which nodes have which
// problems changes.

const RUNS_KEPT = 10;

/** Where the feed finds the nodes' buckets (the console's FleetSources); undefined while a bucket does not exist. */
export interface HealthSources {
  alive(): Promise<AliveStore | undefined>;
  puppetRuns(): Promise<PuppetRunStore | undefined>;
}

/** The provisioning records, kept live by their follower (the console's board feed). */
export interface ProvisioningRecords {
  /** Every record has been read once. */
  readonly ready: boolean;
  record(identity: string): NodeRecord | undefined;
  allRecords(): Iterable<NodeRecord>;
}

export interface HealthFeedOptions {
  policy: HealthPolicy;
  /** The registry's nodes (identities), or undefined when it cannot say. */
  registered: () => Promise<Set<string> | undefined>;
  /** PuppetDB's active nodes with their latest reports, or undefined where no PuppetDB is configured. */
  puppetdb?: () => Promise<Map<string, PuppetDbNodeStatus> | undefined>;
  /** A failing node's last runs from PuppetDB (its streak). */
  puppetdbRuns?: (identity: string) => Promise<PuppetRunRecord[] | undefined>;
  tickMs?: number;
  registryEveryMs?: number;
}

export class HealthFeed extends EventEmitter {
  private readonly beats = new Map<string, Beat>();
  private readonly runs = new Map<string, PuppetRunRecord[]>();
  private registered: Set<string> | undefined;
  private puppetdb: Map<string, PuppetDbNodeStatus> | undefined;
  /** Failing nodes' PuppetDB runs, read when their latest report changed. */
  private readonly pdbRuns = new Map<string, PuppetRunRecord[]>();
  private watches: Watching<unknown>[] = [];
  private timers: NodeJS.Timeout[] = [];
  private generation = 0;
  private current: HealthReport | undefined;
  private json: string | undefined;
  private signature = "";
  private aliveCaughtUp = false;
  private registryAsked = false;
  /** Why health is incomplete (no alive bucket yet, a watch that stopped), for the page. */
  problem: string | undefined = "not connected to the broker yet";

  constructor(
    private readonly board: ProvisioningRecords,
    private readonly o: HealthFeedOptions,
    private readonly log: Logger,
  ) {
    super();
    this.setMaxListeners(0);
  }

  /** Every source has been read once: a report now is the fleet's, not a partial one (alerts wait for it). */
  get ready(): boolean {
    return this.aliveCaughtUp && this.registryAsked && this.board.ready;
  }

  /** (Re)starts following the sources (after the broker came back, too). */
  async start(sources: HealthSources): Promise<void> {
    this.stopWatches();
    const gen = ++this.generation;
    const follow = async <C>(what: string, open: () => Promise<Watching<C> | undefined>, apply: (c: C) => void) => {
      const w = await open();
      if (!w || gen !== this.generation) return w?.stop();
      this.watches.push(w as Watching<unknown>);
      void (async () => {
        try {
          for await (const c of w) if (gen === this.generation) apply(c);
        } catch (e) {
          if (gen === this.generation) {
            this.problem = `the watch on ${what} stopped: ${(e as Error).message}`;
            this.log.warn({ err: (e as Error).message }, `${what} watch stopped`);
          }
        }
      })();
    };
    const alive = await sources.alive();
    if (!alive) {
      this.problem = "no alive bucket yet: nodes' heartbeats are kept once it exists (the console creates it at start, or `muster broker stores`)";
      this.aliveCaughtUp = true;
    } else this.problem = undefined;
    await follow("heartbeats", async () => alive?.watch(), (c) => {
      if (c.type === "caught-up") this.aliveCaughtUp = true;
      else if (c.type === "value") this.beats.set(c.identity, c.value);
      else this.beats.delete(c.identity);
    });
    const runs = await sources.puppetRuns();
    await follow("Puppet runs", async () => runs?.watch(), (c) => {
      if (c.type === "caught-up") {
        // a streak needs the history of nodes whose last run failed: read those few once
        for (const [id, list] of this.runs) if (list[0]?.status === "failed") void runs!.runs(id).then((h) => h.length && this.runs.set(id, h.slice(0, RUNS_KEPT)), () => undefined);
      } else if (c.type === "value") {
        const list = (this.runs.get(c.identity) ?? []).filter((r) => r.time !== c.value.time);
        this.runs.set(c.identity, [c.value, ...list].sort((a, b) => b.time - a.time).slice(0, RUNS_KEPT));
      } else this.runs.delete(c.identity);
    });
    const ask = async () => {
      const [r, pdb] = await Promise.all([this.o.registered().catch(() => undefined), this.o.puppetdb?.().catch(() => undefined)]);
      if (gen !== this.generation) return;
      this.registered = r;
      this.puppetdb = pdb;
      this.registryAsked = true;
      if (pdb && this.o.puppetdbRuns) await this.readStreaks(pdb, gen);
    };
    await ask();
    this.timers.push(setInterval(() => void ask(), this.o.registryEveryMs ?? 30_000));
    this.timers.push(setInterval(() => this.compute(), this.o.tickMs ?? 1000));
    for (const t of this.timers) t.unref();
    this.compute();
  }

  /** The latest report (computed now if none yet). */
  report(): HealthReport {
    return this.current ?? this.compute();
  }

  /** The latest report as JSON text, made once per report (10,000 nodes are a few MB). */
  reportJson(): string {
    const r = this.report();
    return (this.json ??= JSON.stringify(r));
  }

  /** A node's kept Puppet runs, newest first. */
  puppetRuns(identity: string): PuppetRunRecord[] {
    return this.runs.get(identity) ?? [];
  }

  /** Failing nodes' streaks from PuppetDB: read again only when a node's latest report changed. */
  private async readStreaks(pdb: Map<string, PuppetDbNodeStatus>, gen: number): Promise<void> {
    const stale = [...pdb.values()].filter((n) => n.status === "failed" && this.pdbRuns.get(n.certname)?.[0]?.time !== n.report_at).map((n) => n.certname);
    for (const id of this.pdbRuns.keys()) if (pdb.get(id)?.status !== "failed") this.pdbRuns.delete(id);
    let next = 0;
    const worker = async () => {
      while (next < stale.length && gen === this.generation) {
        const id = stale[next++]!;
        const runs = await this.o.puppetdbRuns!(id).catch(() => undefined);
        if (runs && gen === this.generation) this.pdbRuns.set(id, runs);
      }
    };
    await Promise.all(Array.from({ length: Math.min(8, stale.length) }, worker));
  }

  private inputs(): HealthInputs[] {
    const ids = new Set<string>([...this.beats.keys(), ...this.runs.keys(), ...(this.registered ?? []), ...(this.puppetdb?.keys() ?? [])]);
    for (const r of this.board.allRecords()) ids.add(r.identity);
    const out: HealthInputs[] = [];
    for (const id of ids) {
      const beat = this.beats.get(id);
      const rec = this.board.record(id);
      const pdb = puppetDbView(this.puppetdb, id, this.pdbRuns.get(id));
      out.push({ identity: id, ...(beat ? { beat } : {}), registered: this.registered?.has(id) ?? false, ...(rec ? { provisioning: rec } : {}), runs: this.runs.get(id) ?? [], ...(pdb ? { puppetdb: pdb } : {}) });
    }
    return out;
  }

  private compute(): HealthReport {
    const r = healthReport(this.inputs(), this.o.policy, Date.now());
    this.current = r;
    this.json = undefined;
    const sig = JSON.stringify([r.summary, r.nodes.filter((n) => n.problems.length).map((n) => [n.identity, n.problems.map((p) => p.kind)])]);
    if (sig !== this.signature) {
      this.signature = sig;
      this.emit("report", r);
    }
    this.emit("tick", r);
    return r;
  }

  private stopWatches(): void {
    this.generation++;
    for (const w of this.watches) w.stop();
    this.watches = [];
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
  }

  stop(): void {
    this.stopWatches();
  }
}
