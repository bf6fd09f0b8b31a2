import { hostname } from "node:os";
import type { Logger } from "pino";
import { Registry } from "prom-client";
import { builtinDDLs } from "../agents/ddls.js";
import { puppetDDL } from "../agents/puppet/ddl.js";
import type { MusterClient } from "../client/client.js";
import { AdminNotifier } from "../fleet/admins.js";
import { AlertBook, type AlertBookView, type DeliveryState } from "../health/alert-book.js";
import type { AlertHistory } from "../health/alert-history.js";
import { HealthAlerts } from "../health/alerter.js";
import { ServiceBeacon } from "../beacon.js";
import { BrokerWatch } from "../health/broker-watch.js";
import { HealthFeed } from "../health/feed.js";
import { healthGauges } from "../health/metrics.js";
import type { NodeHealth } from "../health/model.js";
import { askNodes, readPuppetDbNodes } from "../health/read.js";
import { NoPuppetDb } from "../client/discovery/puppetdb.js";
import type { PuppetDbNodeStatus, PuppetDbRun } from "../protocol/puppetdb.js";
import { MAX_LOST_STRETCHES, type LostStretch, type ServiceCheck } from "../protocol/service.js";
import type { FleetSources } from "../fleet/sources.js";
import { asRunallEvent, parseNodeEvent, RUNALL_AGENT } from "../protocol/events.js";
import { Status } from "../protocol/status.js";
import { isValidIdentity } from "../protocol/subjects.js";
import { emptyFilter } from "../protocol/types.js";
import type { AlertEvent } from "../protocol/alert-event.js";
import { Auditor, OPERATOR_AUDIT_SUBJECTS, parseAuditLines, type StoredAuditEntry } from "../security/audit.js";
import { ConsoleActions } from "./actions.js";
import { auditRow, distinctRecords, type AuditRow } from "./audit-view.js";
import type { WebConfig } from "./config.js";
import { ApiError } from "./http.js";
import { Insights } from "./insights.js";
import { BoardFeed, type ConsoleStatus } from "./live.js";
import { RegistryHttp } from "./registry-http.js";
import { RunTable, type RunResult, type RunView } from "./runs.js";
import { tailLines } from "./tail.js";
import { VERSION } from "../version.js";

// The console's backend: what the routes (routes/*.ts) ask of it, as one object. It holds the live
// state (the board's records, failure groups and progress, the fleet's health, the runs), asks the
// registry and the nodes what pages show, and carries out operators' actions (actions.ts). Buckets
// and streams come through FleetSources (src/fleet/sources.ts), handed in once connected.

/** How much of the end of the audit file the audit page reads. */
const AUDIT_TAIL_BYTES = 4 * 1024 * 1024;
/** The audit stream's records the audit page reads (the newest). */
const AUDIT_STREAM_RECORDS = 5000;

/** Whether a built-in agent's DDL marks the action readonly (the audit page leaves reads out). */
const isReadAction = (agent: string, action: string) => builtinDDLs[agent]?.actions[action]?.readonly === true;

/** How long the console waits for quiet nodes to answer before it calls them unreachable (their silence already past the limit). */
const ASK_QUIET_MS = 4000;

export class ConsoleBackend {
  readonly feed: BoardFeed;
  readonly insights: Insights;
  readonly health: HealthFeed;
  readonly runs = new RunTable();
  readonly registry: RegistryHttp;
  readonly actions: ConsoleActions;
  readonly alerts: HealthAlerts;
  readonly metrics = new Registry();
  readonly auditor: Auditor;
  status: ConsoleStatus;
  client: MusterClient | undefined;
  sources: FleetSources | undefined;
  private notifier: AdminNotifier | undefined;
  /** The alerts' history: where the alerter and operators' actions keep events, and the book they fold into. */
  alertHistory: AlertHistory | undefined;
  alertBook = new AlertBook();
  private alertFollow: { stop(): void } | undefined;
  /** Until the history is read, silences are unknown: alerts wait (undefined once read, or when it cannot be). */
  private historyHeld: string | undefined = "reading the alerts' history";
  /**
   * Why the console's own view of the fleet cannot be trusted now (a reconnect, a failover), if
   * so: alerts are held meanwhile. Set by whoever judges the view (health's degraded view).
   */
  viewHeld: () => string | undefined = () => undefined;
  private readonly statusListeners = new Set<(s: ConsoleStatus) => void>();
  private readonly runListeners = new Set<(r: RunView) => void>();
  private runFollow: { stop(): void } | undefined;
  private beacon: ServiceBeacon | undefined;
  private brokers: BrokerWatch | undefined;
  private readonly me: string;
  private stopped = false;

  constructor(
    readonly cfg: WebConfig,
    readonly log: Logger,
    o: { registryToken?: string; brokerWhere: string },
  ) {
    const me = isValidIdentity(hostname()) ? hostname() : "muster-web";
    this.me = me;
    // its own records go where the nodes' go (replicated with them), on a subject of its own
    const stream = cfg.audit.stream ? { stream: { name: "MUSTER_AUDIT", subjects: ["muster.audit.>"], subject: OPERATOR_AUDIT_SUBJECTS.console, max_age: 90 * 86_400, create: false } } : {};
    this.auditor = new Auditor({ ...(cfg.audit.file ? { file: cfg.audit.file } : {}), ...stream, buffer: 10_000 }, { identity: me, log });
    this.feed = new BoardFeed(cfg.state_bucket, log);
    this.insights = new Insights(this.feed);
    this.registry = new RegistryHttp(cfg.registry.url, o.registryToken);
    this.status = { broker: { ok: false, error: `connecting to the broker at ${o.brokerWhere}` }, registry: { ok: false, error: "not checked yet" } };
    this.health = new HealthFeed(
      this.feed,
      {
        policy: { unreachableAfterS: cfg.health.unreachable_after, ...(cfg.health.stale_after !== undefined ? { puppetStaleAfterS: cfg.health.stale_after } : {}) },
        registered: () => this.registered(),
        puppetdb: () => this.puppetdbNodes(),
        puppetdbRuns: async (id) => (await this.puppetdbRuns(id, 10))?.runs,
        observer: `console@${me}`,
        connected: () => this.client?.connected ?? false,
        reconnect: async () => this.client?.reconnect(),
        askNodes: async (ids) => (this.client ? askNodes(this.client, ids, ASK_QUIET_MS) : { answered: new Map<string, number>(), error: "not connected to the broker" }),
        askLeadMs: ASK_QUIET_MS,
      },
      log,
    );
    this.actions = new ConsoleActions({
      cfg,
      log,
      auditor: this.auditor,
      me,
      feed: this.feed,
      insights: this.insights,
      connected: () => this.connected(),
      alerts: { book: () => this.alertBook, record: (e) => this.recordAlertEvent(e), test: (by, note) => this.alerts.test(by, note) },
    });
    this.alerts = new HealthAlerts({ unreachableAfterS: cfg.alerts.unreachable_after, puppetFailures: cfg.alerts.puppet_failures }, () => this.notifier, log, {
      by: `console:${me}`,
      record: async (e) => {
        if (!this.alertHistory) throw new Error("the alerts' history is not open");
        this.alertBook.apply(await this.alertHistory.append(e));
      },
      silenced: (identity, now) => this.alertBook.silenced(identity, now),
      held: () => this.historyHeld ?? this.viewHeld(),
    });
    const gauges = healthGauges(this.metrics);
    // a stretch of refused writes opened or closed: `muster health` learns it from this beat, not one an interval later
    this.health.on("lost", () => this.beacon?.beatNow());
    this.health.on("tick", (r) => {
      gauges(r);
      if (cfg.alerts.enabled && this.health.ready) this.alerts.onReport(r);
    });
  }

  /** The client and stores, or 503 while the broker is down. */
  connected(): { client: MusterClient; sources: FleetSources } {
    if (!this.client || !this.sources || !this.status.broker.ok) throw new ApiError(503, "broker", this.status.broker.error ?? "not connected to the broker");
    return { client: this.client, sources: this.sources };
  }

  /** The client is connected: follow the records, heartbeats, runs and runall history. */
  attach(client: MusterClient, sources: FleetSources): void {
    this.client = client;
    this.sources = sources;
    this.notifier = new AdminNotifier(client, { agent: this.cfg.alerts.notify.agent, select: this.cfg.alerts.notify.filter || undefined, recipients: this.cfg.alerts.notify.recipients });
    // the console is one of the site's services, and the brokers' observer (src/health/)
    this.beacon ??= new ServiceBeacon(client, { role: "console", name: this.me, version: VERSION, status: () => this.serviceStatus(), log: this.log });
    this.beacon.start();
    this.brokers ??= new BrokerWatch(client, { urls: this.cfg.health.broker_monitoring, observer: this.me, version: VERSION, log: this.log });
    this.brokers.start();
    // after the stores are made (the stream with its copies): the auditor would make it bare
    void sources.auditStreams().then(
      (streams) => this.auditor.connect(streams),
      (e: unknown) => this.log.warn({ err: (e as Error).message }, "cannot reach JetStream for the audit stream"),
    );
  }

  /** The console's own checks, for its service heartbeat: its broker, its registry, its view of health, its alerts. */
  private serviceStatus(): { checks: ServiceCheck[]; details: Record<string, unknown>; lost: LostStretch[] } {
    const s = this.status;
    const r = this.health.report();
    const d = this.alerts.lastDelivery;
    const ago = (ms: number) => `${Math.max(0, Math.round((Date.now() - ms) / 1000))} s ago`;
    const checks: ServiceCheck[] = [
      s.broker.ok ? { name: "broker", status: "ok", why: "connected" } : { name: "broker", status: "fail", why: s.broker.error ?? "not connected" },
      s.registry.ok ? { name: "registry", status: "ok", why: "answers" } : { name: "registry", status: "fail", why: s.registry.error ?? "does not answer" },
      r.view.degraded ? { name: "health view", status: "fail", why: r.view.why ?? "degraded" } : { name: "health view", status: "ok", why: r.view.fresh_s_ago !== null ? `current (as of ${r.view.fresh_s_ago} s ago)` : "current" },
      !this.cfg.alerts.enabled
        ? { name: "alerts", status: "ok", why: "off (alerts.enabled: false)" }
        : !d
          ? { name: "alerts", status: "ok", why: "none sent since it started" }
          : d.ok
            ? { name: "alerts", status: "ok", why: `the last one reached ${d.notifier ?? "the notifier"} ${ago(d.at)}` }
            : { name: "alerts", status: "fail", why: `the last one (${ago(d.at)}) was not delivered: ${d.error ?? "failed"}` },
    ];
    return { checks, details: { nodes: r.summary.nodes, unhealthy: r.summary.unhealthy, alerts_held: this.alerts.held > 0, brokers_watched: this.cfg.health.broker_monitoring.length }, lost: this.health.lostStretches(MAX_LOST_STRETCHES) };
  }

  /** (Re)starts every follower (at connection, and when the broker is back). */
  async follow(): Promise<void> {
    const sources = this.sources;
    const client = this.client;
    if (!sources || !client || this.stopped) return;
    await this.feed.start(() => sources.records()).catch((e: unknown) => this.log.warn({ err: (e as Error).message }, "cannot follow the state bucket"));
    if (this.stopped) return void this.feed.stop();
    await this.health.start(sources).catch((e: unknown) => this.log.warn({ err: (e as Error).message }, "cannot follow the fleet's health"));
    if (this.stopped) return void this.health.stop();
    // A SIGTERM while the broker is away closes the client under this follow: subscribing then
    // throws, and an unhandled rejection would end `muster web` with status 1 (a CI run saw it).
    if (!this.runFollow) await this.followRuns(client, sources).catch((e: unknown) => this.stopped || this.log.warn({ err: (e as Error).message }, "cannot follow runall progress"));
    if (this.stopped) this.runFollow?.stop();
    if (!this.alertFollow) await this.followAlerts(sources).catch((e: unknown) => this.stopped || this.log.warn({ err: (e as Error).message }, "cannot follow the alerts' history"));
    if (this.stopped) this.alertFollow?.stop();
  }

  /** The alerts' history, read and then followed: silences, acknowledgements and deliveries from every console and the CLI. */
  private async followAlerts(sources: FleetSources): Promise<void> {
    let history: AlertHistory;
    try {
      history = await sources.alertHistory();
    } catch (e) {
      // without a history alerts still go out, unrecorded and unsilenced: better than none
      this.historyHeld = undefined;
      throw e;
    }
    this.alertHistory = history;
    const book = (this.alertBook = new AlertBook());
    const f = await history.follow(
      (e) => book.apply(e),
      () => (this.historyHeld = undefined),
    );
    if (!f) {
      this.historyHeld = undefined;
      return;
    }
    this.alertFollow = f;
    void f.done.catch((e: unknown) => this.stopped || this.log.warn({ err: (e as Error).message }, "the alerts' history stopped")).finally(() => {
      if (this.alertFollow === f) this.alertFollow = undefined;
    });
  }

  /** The alerts as the history has them, newest events first. */
  alertsView(historyLimit: number): AlertBookView & { enabled: boolean; held: string | null } {
    return { ...this.alertBook.view(Date.now(), historyLimit), last_delivery: this.delivery(), enabled: this.cfg.alerts.enabled, held: this.alerts.holding ?? null };
  }

  /** How telling the admins last went: this console's own try, or the history's (another console, a test from the CLI), the newer. */
  delivery(): DeliveryState | null {
    const mine = this.alerts.delivery;
    const kept = this.alertBook.lastDelivery();
    if (!mine || !kept) return mine ?? kept;
    return mine.at >= kept.at ? mine : kept;
  }

  /** The console's status line for alerts: present once a delivery was tried, not ok while the last one failed. */
  alertStatus(): Pick<ConsoleStatus, "alerts"> {
    const d = this.cfg.alerts.enabled ? this.delivery() : null;
    if (!d) return {};
    return { alerts: d.ok ? { ok: true } : { ok: false, error: d.error ?? "not delivered", ...(d.failing_since ? { since: d.failing_since } : {}) } };
  }

  /** Keeps an operator's alert event (acknowledged, silenced, unsilenced): 503 without the history. */
  async recordAlertEvent(e: AlertEvent): Promise<void> {
    this.connected();
    if (!this.alertHistory) throw new ApiError(503, "alerts", "the alerts' history (stream MUSTER_ALERTS) is not open: the console could not create or read it");
    // in the book at once, so the page shows it; the follow brings it again, and the book applies each id once
    this.alertBook.apply(await this.alertHistory.append(e));
  }

  /** Runs from the runall history stream (every run kept, a restart loses none), else from live events only. */
  private async followRuns(client: MusterClient, sources: FleetSources): Promise<void> {
    const apply = (data: Uint8Array, subject: string, seq?: number) => {
      const p = parseNodeEvent(data, subject);
      const ev = p.ok ? asRunallEvent(p.event) : undefined;
      const v = ev && this.runs.apply(ev, seq);
      if (v) for (const l of this.runListeners) l(v);
    };
    const stream = await sources.runallHistory().catch(() => undefined);
    if (stream) {
      this.runFollow = stream;
      void (async () => {
        try {
          for await (const c of stream) if (c.kind === "message") apply(c.message.data, c.message.subject, c.message.seq);
        } catch (e) {
          this.log.warn({ err: (e as Error).message }, "runall history stopped");
        }
        this.runFollow = undefined;
      })();
      return;
    }
    // Runall progress comes from client processes (`muster puppet runall`, this console), which hold
    // no node key: display-only, not verified (docs/security.md, "Verifying replies").
    const sub = client.onEvent(RUNALL_AGENT, "*", (e) => apply(new TextEncoder().encode(JSON.stringify(e)), `muster.event.runall.${e.event}`), { verify: false });
    this.runFollow = { stop: () => sub.unsubscribe() };
  }

  setStatus(s: ConsoleStatus): void {
    this.status = s;
    for (const l of this.statusListeners) l(s);
  }

  onStatus(l: (s: ConsoleStatus) => void): () => void {
    this.statusListeners.add(l);
    return () => this.statusListeners.delete(l);
  }

  onRun(l: (r: RunView) => void): () => void {
    this.runListeners.add(l);
    return () => this.runListeners.delete(l);
  }

  /** The registry daemon's nodes (its query subject), for health; undefined when none answers. */
  private async registered(): Promise<Set<string> | undefined> {
    if (!this.client) return undefined;
    const src = await this.client.registry({ via: "service", serviceTimeoutMs: 2000 });
    return new Set(await src.discover(emptyFilter(), { timeoutMs: 2000, idleMs: 0 }));
  }

  /** PuppetDB's active nodes and their latest reports, through the registry (health); undefined where none is configured. */
  private async puppetdbNodes(): Promise<Map<string, PuppetDbNodeStatus> | undefined> {
    if (!this.client) return undefined;
    return readPuppetDbNodes(this.client, {}, (m) => this.log.warn(m));
  }

  /** A node's last runs as PuppetDB recorded them (node page, health's streaks); null where no PuppetDB answers. */
  async puppetdbRuns(identity: string, limit = 5): Promise<{ puppetdb: string; runs: PuppetDbRun[] } | null> {
    if (!this.client || !this.status.broker.ok || !isValidIdentity(identity)) return null;
    const source = await this.client.puppetdb();
    try {
      const runs = await source.runs(identity, limit, 10_000);
      return { puppetdb: source.lastPuppetDb ?? "", runs };
    } catch (e) {
      if (e instanceof NoPuppetDb) return null;
      throw e;
    }
  }

  /** Asks one node's puppet agent (node page); null when it does not answer. */
  async puppet(identity: string, action: "last_run_summary" | "status" | "last_run_report"): Promise<Record<string, unknown> | null> {
    if (!this.client || !this.status.broker.ok || !isValidIdentity(identity)) return null;
    const r = await this.client.agent(puppetDDL).call(action, {}, { nodes: [identity], timeoutMs: 2000 });
    const reply = r.replies[0];
    return reply && reply.statuscode === Status.OK ? (reply.data as Record<string, unknown>) : null;
  }

  /** A node's health as the landing page has it (undefined when no source knows it). */
  nodeHealth(identity: string): NodeHealth | undefined {
    return this.health.report().nodes.find((n) => n.identity === identity);
  }

  /** A run's per-node results: kept in memory for the latest runs, read back from the history stream for older ones. */
  async runResults(id: string): Promise<RunResult[] | undefined> {
    const kept = this.runs.results(id);
    const run = this.runs.get(id);
    if (!run || (kept && run.has_results)) return kept;
    const seq = this.runs.startSeq(id);
    const follow = seq !== undefined ? await this.sources?.runallHistory(seq).catch(() => undefined) : undefined;
    if (!follow) return kept;
    const one = new RunTable();
    try {
      for await (const c of follow) {
        if (c.kind === "caught-up") break;
        const p = parseNodeEvent(c.message.data, c.message.subject);
        const ev = p.ok ? asRunallEvent(p.event) : undefined;
        if (!ev || ev.data.id !== id) continue;
        one.apply(ev);
        if (ev.event === "finished") break;
      }
    } finally {
      follow.stop();
    }
    return one.results(id);
  }

  /** The audit records the console can read: the audit stream (the nodes', the CLI's and its own) and its own file when it keeps one. */
  async auditRecords(): Promise<{ rows: AuditRow[]; sources: { name: string; ok: boolean; records: number; error?: string }[] }> {
    const lists: StoredAuditEntry[][] = [];
    const sources: { name: string; ok: boolean; records: number; error?: string }[] = [];
    if (this.cfg.audit.file) {
      try {
        const recs = parseAuditLines(tailLines(this.cfg.audit.file, AUDIT_TAIL_BYTES));
        lists.push(recs);
        sources.push({ name: `console file ${this.cfg.audit.file}`, ok: true, records: recs.length });
      } catch (e) {
        sources.push({ name: `console file ${this.cfg.audit.file}`, ok: false, records: 0, error: (e as Error).message });
      }
    }
    const stream = "audit stream MUSTER_AUDIT";
    if (this.client && this.status.broker.ok) {
      try {
        const recs = await this.client.auditRecords("MUSTER_AUDIT", AUDIT_STREAM_RECORDS);
        if (recs === undefined) sources.push({ name: stream, ok: false, records: 0, error: "no such stream: the console creates it when it starts with an admin's credential (or `muster broker stores`); nodes publish their records there with audit.stream (docs/security.md)" });
        else {
          lists.push(recs);
          sources.push({ name: stream, ok: true, records: recs.length });
        }
      } catch (e) {
        sources.push({ name: stream, ok: false, records: 0, error: (e as Error).message });
      }
    } else sources.push({ name: stream, ok: false, records: 0, error: "the broker is not reachable" });
    if (!this.cfg.audit.file && !this.cfg.audit.stream) sources.push({ name: "the console's own records", ok: false, records: 0, error: "audit.stream is off and audit.file is not set: the console's actions are only logged" });
    return { rows: distinctRecords(lists).map((e) => auditRow(e, isReadAction)), sources };
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.brokers?.stop();
    await this.beacon?.stop().catch(() => undefined);
    this.feed.stop();
    this.insights.stop();
    this.health.stop();
    this.runFollow?.stop();
    this.alertFollow?.stop();
    await this.auditor.close();
  }
}
