import { EventEmitter } from "node:events";
import type { Logger } from "pino";
import type { NodeRecord } from "../protocol/provision-record.js";
import type { PuppetRunRecord } from "../protocol/puppet-run.js";
import type { PuppetDbNodeStatus } from "../protocol/puppetdb.js";
import { MAX_LOST_STRETCHES, type LostStretch } from "../protocol/service.js";
import { healthReport, nodesToAsk, puppetDbView, type Asked, type HealthInputs, type HealthPolicy, type HealthReport } from "./model.js";
import type { AliveStore, Beat, PuppetRunStore, ServiceSeen, ServiceStore, Watching } from "./stores.js";
import { lostToPublish, ViewKeeper, type Blind } from "./view.js";

// The site's health, live, for every open page at once (the landing page, /api/health, alerts,
// the metrics): heartbeats, service beats and Puppet runs followed through watches on their
// buckets, the provisioning records from whoever follows them (the console's board), the
// registry's nodes and PuppetDB's record of the nodes (where the registry reaches one) asked now
// and then. The report (model.ts, the same as `muster health`) is
// recomputed every `tickMs`, since silence alone makes a node unreachable; `report` is emitted
// when which nodes and services have which problems, or whether the view is degraded, changes.
//
// The feed also knows how far it can see (view.ts): every `probeMs` it writes a probe to the alive
// and services buckets and watches each come back. While the last one to come back is older than `lagMs`, the view
// is degraded (its connection, its watch or the store is behind): nobody is judged by the silence,
// and the alerts wait. A watch that stays behind that long is opened afresh.

const RUNS_KEPT = 10;

/** Where the feed finds the nodes' buckets (the console's FleetSources); undefined while a bucket does not exist. */
export interface HealthSources {
  alive(): Promise<AliveStore | undefined>;
  puppetRuns(): Promise<PuppetRunStore | undefined>;
  services(): Promise<ServiceStore | undefined>;
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
  /** This observer's name, on its probes (the console's host). */
  observer: string;
  /** Whether the connection to the broker is up now. */
  connected: () => boolean;
  /** Moves the connection to another broker member (after the watches could not be opened afresh through this one). */
  reconnect?: () => Promise<void>;
  tickMs?: number;
  registryEveryMs?: number;
  /** Between probes (default 2 s). */
  probeMs?: number;
  /** How old the last probe to come back may be before the view is degraded (default 6 s). */
  lagMs?: number;
  /**
   * Asks nodes whether they are there (rpcutil ping): those quiet past their limit are asked before
   * they are judged (model.ts nodesToAsk); those that answered, with when. Without it, silence alone judges.
   */
  askNodes?: (identities: string[]) => Promise<{ answered: ReadonlyMap<string, number>; error?: string }>;
  /** How long an ask may take (its timeout): nodes are asked this long before their silence reaches the limit. */
  askLeadMs?: number;
}

/** A node asked and still quiet is asked again after this long. */
const ASK_AGAIN_MS = 10_000;

/** A watch behind this long is opened afresh (at most this often). */
const REOPEN_AFTER_MS = 10_000;
/** Blind stretches are kept this long: past it no node's silence reaches back into them. */
const KEEP_BLIND_MS = 3_600_000;

export class HealthFeed extends EventEmitter {
  private readonly beats = new Map<string, Beat>();
  private readonly services = new Map<string, ServiceSeen>();
  private readonly runs = new Map<string, PuppetRunRecord[]>();
  private registered: Set<string> | undefined;
  private puppetdb: Map<string, PuppetDbNodeStatus> | undefined;
  /** Failing nodes' PuppetDB runs, read when their latest report changed. */
  private readonly pdbRuns = new Map<string, PuppetRunRecord[]>();
  private watches: Watching<unknown>[] = [];
  private clock: NodeJS.Timeout[] = [];
  private generation = 0;
  private current: HealthReport | undefined;
  private json: string | undefined;
  private signature = "";
  private lostSignature: string | undefined;
  private aliveCaughtUp = false;
  private registryAsked = false;
  private sources: HealthSources | undefined;
  private reopenedAt = 0;
  private reopenFailures = 0;
  private readonly view: ViewKeeper;
  /** What the nodes asked said, until a heartbeat newer than the ask comes. */
  private readonly asked = new Map<string, Asked>();
  private asking = false;
  /** Tells this process's probes from another's under the same name. */
  private readonly nonce = `${process.pid}.${Math.random().toString(36).slice(2, 10)}`;
  /** Why health is incomplete (no alive bucket yet, a watch that stopped), for the page. */
  problem: string | undefined = "not connected to the broker yet";

  constructor(
    private readonly board: ProvisioningRecords,
    private readonly o: HealthFeedOptions,
    private readonly log: Logger,
  ) {
    super();
    this.setMaxListeners(0);
    this.view = new ViewKeeper({ lagMs: o.lagMs ?? 6000, keepMs: KEEP_BLIND_MS });
  }

  /** Every source has been read once: a report now is the fleet's, not a partial one (alerts wait for it). */
  get ready(): boolean {
    return this.aliveCaughtUp && this.registryAsked && this.board.ready;
  }

  /**
   * (Re)starts following the sources (after the broker came back, too). The clock that recomputes,
   * probes and asks the registry starts with the first call and runs until stop(): a restart that
   * fails leaves the view ageing where the page shows it, and tried again (compute()).
   */
  async start(sources: HealthSources): Promise<void> {
    this.sources = sources;
    this.startClock();
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
      else if (c.type === "probe") {
        if (c.observer === this.o.observer && c.nonce === this.nonce) this.view.seen("alive", c.time);
      } else this.beats.delete(c.identity);
    });
    const services = await sources.services();
    await follow("service heartbeats", async () => services?.watch(), (c) => {
      if (c.type === "value") this.services.set(c.identity, c.value);
      else if (c.type === "removed") this.services.delete(c.identity);
      else if (c.type === "probe" && c.observer === this.o.observer && c.nonce === this.nonce) this.view.seen("services", c.time);
    });
    const runs = await sources.puppetRuns();
    await follow("Puppet runs", async () => runs?.watch(), (c) => {
      if (c.type === "caught-up") {
        // a streak needs the history of nodes whose last run failed: read those few once
        for (const [id, list] of this.runs) if (list[0]?.status === "failed") void runs!.runs(id).then((h) => h.length && this.runs.set(id, h.slice(0, RUNS_KEPT)), () => undefined);
      } else if (c.type === "value") {
        const list = (this.runs.get(c.identity) ?? []).filter((r) => r.time !== c.value.time);
        this.runs.set(c.identity, [c.value, ...list].sort((a, b) => b.time - a.time).slice(0, RUNS_KEPT));
      } else if (c.type === "removed") this.runs.delete(c.identity);
    });
    if (!this.registryAsked) await this.ask();
    this.probe();
    this.compute();
  }

  /** The registry's nodes (and PuppetDB's, where it reaches one), asked again. */
  private async ask(): Promise<void> {
    const gen = this.generation;
    const [r, pdb] = await Promise.all([this.o.registered().catch(() => undefined), this.o.puppetdb?.().catch(() => undefined)]);
    this.registered = r;
    this.puppetdb = pdb;
    this.registryAsked = true;
    if (pdb && this.o.puppetdbRuns) await this.readStreaks(pdb, gen);
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

  /** A probe on each watched bucket: a watch can fall behind alone (seen: the services' stuck after failovers while the heartbeats' went on). */
  private probe(): void {
    const s = this.sources;
    if (!s) return;
    for (const [channel, open] of [["alive", () => s.alive()], ["services", () => s.services()]] as const) {
      void open()
        .then((store) => store?.probe(this.o.observer, this.nonce))
        .then(
          () => this.view.put(channel),
          (e: unknown) => this.view.put(channel, (e as Error).message),
        );
    }
  }

  private startClock(): void {
    if (this.clock.length) return;
    this.clock.push(setInterval(() => this.probe(), this.o.probeMs ?? 2000));
    this.clock.push(setInterval(() => void this.ask(), this.o.registryEveryMs ?? 30_000));
    this.clock.push(setInterval(() => this.compute(), this.o.tickMs ?? 1000));
    for (const t of this.clock) t.unref();
  }

  /** The stretches the store refused this view's probes in (for the console's service beat: readers that read once take them too). */
  lostStretches(max: number): LostStretch[] {
    return lostToPublish(this.view.stretches(), Date.now(), max);
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

  private inputs(): HealthInputs[] {
    const ids = new Set<string>([...this.beats.keys(), ...this.runs.keys(), ...(this.registered ?? []), ...(this.puppetdb?.keys() ?? [])]);
    for (const r of this.board.allRecords()) ids.add(r.identity);
    const out: HealthInputs[] = [];
    for (const id of ids) {
      const beat = this.beats.get(id);
      const rec = this.board.record(id);
      const pdb = puppetDbView(this.puppetdb, id, this.pdbRuns.get(id));
      let asked = this.asked.get(id);
      if (asked && beat && beat.at > asked.at) {
        this.asked.delete(id); // a heartbeat since says more than the ask did
        asked = undefined;
      }
      out.push({ identity: id, ...(beat ? { beat } : {}), registered: this.registered?.has(id) ?? false, ...(rec ? { provisioning: rec } : {}), runs: this.runs.get(id) ?? [], ...(pdb ? { puppetdb: pdb } : {}), ...(asked ? { asked } : {}) });
    }
    return out;
  }

  private compute(): HealthReport {
    const now = Date.now();
    const v = this.view.tick(now, this.o.connected());
    // A watch that stays behind while connected is opened afresh: its consumer may have been on a
    // member that died (seen: the library's ordered consumer took 40 s and more to come back by itself).
    const open = v.blind.find((b) => b.to === undefined);
    if (open && this.o.connected() && this.sources && now - open.from > REOPEN_AFTER_MS && now - this.reopenedAt > REOPEN_AFTER_MS) {
      this.reopenedAt = now;
      this.log.warn({ why: open.why }, "the health view is behind: opening its watches afresh");
      void this.start(this.sources).then(
        () => (this.reopenFailures = 0),
        (e: unknown) => {
          // twice through this member in vain: the next member may answer the JetStream API
          const move = ++this.reopenFailures >= 2 && this.o.reconnect;
          this.log.warn({ err: (e as Error).message }, `cannot reopen the health watches${move ? "; moving to another broker member" : ""}`);
          if (move) {
            this.reopenFailures = 0;
            void this.o.reconnect!().catch(() => undefined);
          }
        },
      );
    }
    const nodes = [...this.beats.entries()].map(([identity, beat]) => ({ identity, beat }));
    const inputs = this.inputs();
    this.askQuiet(inputs, now, v);
    const r = healthReport(inputs, this.o.policy, now, { services: { beats: this.services.values(), nodes }, blind: v.blind, judgeUntil: v.judgeUntil, ...(v.freshAsOf !== undefined ? { freshAsOf: v.freshAsOf } : {}) });
    this.current = r;
    this.json = undefined;
    const sig = JSON.stringify([r.view.degraded, r.view.why, r.summary, r.service_summary, r.services.map((s) => [s.role, s.name, s.problems.map((p) => p.kind), s.checks.map((c) => c.status)]), r.nodes.filter((n) => n.problems.length).map((n) => [n.identity, n.problems.map((p) => p.kind)])]);
    if (sig !== this.signature) {
      this.signature = sig;
      this.emit("report", r);
    }
    // its stretches of refused writes changed (one opened or closed): readers that read once take them from its service beat
    const lost = lostToPublish(v.blind, now, MAX_LOST_STRETCHES).map((b) => `${b.from}-${b.to ?? ""}`).join(",");
    if (lost !== this.lostSignature) {
      const first = this.lostSignature === undefined;
      this.lostSignature = lost;
      if (!first) this.emit("lost");
    }
    this.emit("tick", r);
    return r;
  }

  /** Asks the nodes quiet past their limit (one round at a time), marking them asked in `inputs`; the report is made again with their answers. */
  private askQuiet(inputs: HealthInputs[], now: number, v: { blind: Blind[]; judgeUntil: number }): void {
    if (!this.o.askNodes || this.asking || !this.o.connected()) return;
    const ids = nodesToAsk(inputs, this.o.policy, now, { blind: v.blind, judgeUntil: v.judgeUntil }, ASK_AGAIN_MS, (this.o.askLeadMs ?? 0) / 1000);
    if (!ids.length) return;
    this.asking = true;
    const at = Date.now();
    // not judged while asked: a node whose beats a failover dropped is not called unreachable for
    // the length of the ask. One that did not answer last time (or whose ask failed) keeps that judgement meanwhile (a
    // dead node must not read as reachable for 4 s of every 10)
    const byId = new Map(inputs.map((i) => [i.identity, i]));
    for (const id of ids) {
      const prev = this.asked.get(id);
      if (prev && !prev.answered && !prev.pending) continue;
      const pending = { at, answered: false, pending: true };
      this.asked.set(id, pending);
      byId.get(id)!.asked = pending;
    }
    void this.o
      .askNodes(ids)
      .then((got) => {
        // an answer is seen when it came; silence counts from the ask's start
        for (const id of ids) this.asked.set(id, { at: got.answered.get(id) ?? at, answered: got.answered.has(id), ...(got.error ? { error: got.error } : {}) });
      })
      .catch((e: unknown) => {
        this.log.warn({ err: (e as Error).message }, "asking quiet nodes failed");
        for (const id of ids) this.asked.set(id, { at, answered: false, error: (e as Error).message }); // judged by their silence
      })
      .finally(() => {
        this.asking = false;
        if (this.clock.length) this.compute();
      });
  }

  private stopWatches(): void {
    this.generation++;
    for (const w of this.watches) w.stop();
    this.watches = [];
  }

  stop(): void {
    this.stopWatches();
    for (const t of this.clock) clearInterval(t);
    this.clock = [];
  }
}
