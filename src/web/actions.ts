import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import type { MusterClient } from "../client/client.js";
import type { FleetSources } from "../fleet/sources.js";
import { runAll } from "../fleet/runner.js";
import { ackTargets, checkSilenceLength, parseSilenceLength, type AlertBook } from "../health/alert-book.js";
import type { AlertEvent } from "../protocol/alert-event.js";
import { Status } from "../protocol/status.js";
import { isValidIdentity } from "../protocol/subjects.js";
import { selectFailed, type RetrySelection } from "../provisioner/failures.js";
import { OPERATOR_AUDIT_AGENTS, signAuditEntry, type Auditor } from "../security/audit.js";
import type { Principal } from "./auth.js";
import type { WebConfig } from "./config.js";
import { explorerFilter } from "./explorer.js";
import { ApiError } from "./http.js";
import type { Insights } from "./insights.js";
import type { BoardFeed } from "./live.js";

// The operators' actions, each audited (who, what, on which target, how it ended) and signed by the
// console's key: retry one node, a failure group or a master's; forget a gone node; start a
// runall (recorded again with its outcome when it ends). Records are written through their owner,
// ProvisionState, by compare-and-set: a provisioner writing meanwhile wins and the operator is told.

export interface ActionDeps {
  cfg: WebConfig;
  log: Logger;
  auditor: Auditor;
  /** This console's name in audit records and runall events. */
  me: string;
  feed: BoardFeed;
  insights: Insights;
  /** The client and the fleet's stores once connected; throws 503 while the broker is down. */
  connected(): { client: MusterClient; sources: FleetSources };
  /** The alerts: their book, keeping an operator's event, and a test alert through the alerter. */
  alerts: {
    book(): AlertBook;
    record(e: AlertEvent): Promise<void>;
    test(by: string, note?: string): Promise<{ notifier: string; told: string[] }>;
  };
}

/** What an operator's alert action names (a POST body, checked). */
export interface AlertActionBody {
  alert?: string;
  identity?: string;
  kind?: string;
  /** A silence's length: "2h", "30m", or minutes as a number. */
  for?: string | number;
  note?: string;
}

/** A POST body's alert fields, the hostile ones dropped (the routes check what each action needs). */
export function alertActionBody(body: unknown): AlertActionBody {
  const b = (body ?? {}) as Record<string, unknown>;
  const out: AlertActionBody = {};
  if (typeof b.alert === "string" && b.alert.length <= 600) out.alert = b.alert;
  if (typeof b.identity === "string" && isValidIdentity(b.identity)) out.identity = b.identity;
  if (typeof b.kind === "string" && /^[a-z_]{1,40}$/.test(b.kind)) out.kind = b.kind;
  if ((typeof b.for === "string" && b.for.length <= 40) || (typeof b.for === "number" && Number.isFinite(b.for))) out.for = b.for;
  if (typeof b.note === "string") out.note = b.note.slice(0, 500);
  return out;
}

export class ConsoleActions {
  constructor(private readonly d: ActionDeps) {}

  /** One audit record (the node audit format, docs/security.md), signed with the console's key when it has one. */
  audit(who: Principal, what: string, target: string, data: Record<string, unknown>, statuscode: number, statusmsg: string): void {
    const entry = { time: Date.now(), identity: target, requestid: randomUUID(), caller: `web:${who.name}`, sender: this.d.me, agent: OPERATOR_AUDIT_AGENTS.console, action: what, data: { ...data, role: who.role, via: who.via }, statuscode, statusmsg };
    let key: MusterClient["key"] | undefined;
    try {
      key = this.d.connected().client.key;
    } catch {
      key = undefined;
    }
    // Signed with the console's key, so a record cannot be altered unnoticed (verify with its public key).
    this.d.auditor.record(signAuditEntry(entry, key));
    this.d.log.info({ audit: { who: who.name, role: who.role, what, target, statuscode, statusmsg } }, "console action");
  }

  /** An action refused at the edge (the role, the CSRF token), recorded as the others are. */
  refused(who: Principal, action: string, target: string, data: Record<string, unknown>, reason: string): void {
    this.audit(who, action, target, data, Status.Aborted, `refused: ${reason}`);
  }

  private async records() {
    const { sources } = this.d.connected();
    const store = await sources.records();
    if (!store) throw new ApiError(409, "retry_refused", "no provisioner has run against this broker yet: there is nothing to retry");
    return store;
  }

  async retry(identity: string, who: Principal): Promise<void> {
    const store = await this.records();
    const r = await store.retry([identity], `${who.name} (web console)`);
    if (r.unknown.length) {
      this.audit(who, "retry", identity, {}, Status.InvalidData, "unknown node");
      throw new ApiError(404, "not_found", `the provisioner has no record of ${identity}`);
    }
    if (r.refused.length) {
      this.audit(who, "retry", identity, {}, Status.Aborted, r.refused[0]!.why);
      throw new ApiError(409, "retry_refused", r.refused[0]!.why);
    }
    if (r.changed.length) {
      this.audit(who, "retry", identity, {}, Status.Aborted, "record changed meanwhile");
      throw new ApiError(409, "retry_refused", `${identity} changed while retrying; look at it again`);
    }
    this.audit(who, "retry", identity, { was: r.retried[0]!.was }, Status.OK, "queued for provisioning");
  }

  async retryGroup(sel: RetrySelection, who: Principal): Promise<{ retried: string[]; changed: string[] }> {
    const { sources } = this.d.connected();
    const store = await sources.records();
    const g = sel.group === undefined ? undefined : this.d.insights.failures().find((x) => x.id === sel.group);
    const target = [sel.group !== undefined ? `group:${sel.group}` : "", sel.master !== undefined ? `master:${sel.master || "(none)"}` : ""].filter(Boolean).join(" ");
    const what = { ...sel, ...(g ? { stage: g.stage, reason: g.reason } : {}) };
    const selected = store ? selectFailed(this.d.feed.allRecords(), sel).length : 0;
    if (!store || selected === 0) {
      this.audit(who, "retry_group", target, { ...what, selected: 0 }, Status.Aborted, "no failed node selected");
      throw new ApiError(409, "retry_refused", `no failed node in ${sel.group !== undefined ? `group ${sel.group}` : ""}${sel.group !== undefined && sel.master !== undefined ? " of " : ""}${sel.master !== undefined ? `master ${sel.master || "(none)"}` : ""} now: look at the board again`);
    }
    const by = `${who.name} (web console, ${g ? `group ${g.stage}: ${g.reason}` : ""}${g && sel.master !== undefined ? ", " : ""}${sel.master !== undefined ? `master ${sel.master || "(none)"}` : ""})`;
    const r = await store.retryFailed(this.d.feed.allRecords(), sel, by);
    this.audit(who, "retry_group", target, { ...what, selected, retried: r.retried.length, changed: r.changed.length, nodes: r.retried.slice(0, 100) }, Status.OK, `${r.retried.length} queued for provisioning, ${r.changed.length} changed meanwhile`);
    return r;
  }

  /** A gone or failed node's record dropped, and its heartbeat (health stops listing it). */
  async forget(identity: string, who: Principal): Promise<void> {
    const { sources } = this.d.connected();
    const store = await this.records();
    const r = await store.forget(identity);
    if (!r.ok) {
      this.audit(who, "forget", identity, {}, r.code === "unknown" ? Status.InvalidData : Status.Aborted, r.why);
      throw new ApiError(r.code === "unknown" ? 404 : 409, r.code === "unknown" ? "not_found" : "forget_refused", r.why);
    }
    await (await sources.alive())?.forget(identity).catch(() => undefined);
    this.audit(who, "forget", identity, { was: r.was.status, ...(r.was.gone ? { gone: r.was.gone.reason } : {}) }, Status.OK, "record dropped");
  }

  /**
   * Starts a runall. Above runall.confirm_above discovered nodes the operator must confirm the count
   * discovered now (a fleet that grew meanwhile asks again). Audited when it starts, with its
   * filter as the target, and again when it ends, with how it ended.
   */
  async startRunall(filterText: string, concurrency: number, who: Principal, confirmed?: number): Promise<string> {
    const { client: c } = this.d.connected();
    const f = explorerFilter(filterText);
    const filter = f.agent.includes("puppet") ? f : { ...f, agent: [...f.agent, "puppet"] };
    const target = filterText.trim() || "(every node)";
    const nodes = await c.discover({ filter, timeoutMs: 2000 });
    if (nodes.length === 0) {
      this.audit(who, "runall", target, { filter: filterText, concurrency }, Status.Aborted, "no nodes discovered");
      throw new ApiError(422, "no_nodes", `no Puppet nodes match ${JSON.stringify(filterText)}`);
    }
    if (nodes.length > this.d.cfg.runall.confirm_above && confirmed !== nodes.length) {
      if (confirmed !== undefined) this.audit(who, "runall", target, { filter: filterText, concurrency, nodes: nodes.length, confirmed }, Status.Aborted, "the confirmed count differs from the nodes discovered");
      throw new ApiError(409, "confirm", `${nodes.length} nodes match ${filterText ? JSON.stringify(filterText) : "(every node)"}; confirm the count to start (confirm: ${nodes.length})`, { matches: nodes.length });
    }
    const id = randomUUID();
    this.audit(who, "runall", target, { filter: filterText, concurrency, nodes: nodes.length, run: id }, Status.OK, "started");
    void runAll(c, { concurrency, nodes, runonce: { force: true }, announce: { id, identity: this.d.me, startedBy: `${who.name} (web console)`, filter: filterText } }).then(
      (r) => {
        const counts = Object.fromEntries(Object.entries(r.report.counts).filter(([, n]) => n > 0));
        const bad = (r.report.counts.failed ?? 0) + (r.report.counts.timeout ?? 0) + (r.report.counts.vanished ?? 0);
        this.audit(who, "runall", target, { filter: filterText, concurrency, run: id, counts, makespan_s: Math.round(r.report.makespanMs / 100) / 10 }, bad ? Status.UnknownError : Status.OK, `finished: ${Object.entries(counts).map(([k, n]) => `${n} ${k}`).join(", ") || "nothing ran"}`);
      },
      (e: unknown) => {
        this.audit(who, "runall", target, { filter: filterText, concurrency, run: id }, Status.UnknownError, `failed: ${(e as Error).message}`);
        this.d.log.error({ run: id, err: (e as Error).message }, "runall failed");
      },
    );
    return id;
  }

  /** Acknowledges open alerts (one by its id, or a node's): someone is on it. Audited. */
  async ackAlert(b: AlertActionBody, who: Principal): Promise<string[]> {
    this.d.connected();
    const target = b.alert ?? b.identity ?? "";
    let open;
    try {
      open = ackTargets(this.d.alerts.book(), b);
    } catch (e) {
      this.audit(who, "alerts.ack", target, { ...b }, Status.InvalidData, (e as Error).message);
      throw new ApiError(b.alert || b.identity ? 404 : 400, b.alert || b.identity ? "not_found" : "bad_request", (e as Error).message);
    }
    for (const a of open) await this.d.alerts.record({ type: "acknowledged", time: Date.now(), by: `web:${who.name}`, identity: a.identity, kind: a.kind, alert: a.alert, ...(b.note ? { note: b.note } : {}) });
    this.audit(who, "alerts.ack", target, { alerts: open.map((a) => a.alert), ...(b.note ? { note: b.note } : {}) }, Status.OK, `${open.length} acknowledged`);
    return open.map((a) => a.alert);
  }

  /** Silences a node's alerts for a stated time (recorded, not sent; told when it ends if the trouble lasts). Audited. */
  async silence(b: AlertActionBody, who: Principal): Promise<{ identity: string; until: string }> {
    this.d.connected();
    const target = b.identity ?? "";
    let ms: number;
    try {
      if (!b.identity) throw new Error("name the node to silence (identity)");
      if (b.for === undefined) throw new Error("say for how long (for: 30m, 2h, 1d)");
      ms = typeof b.for === "number" ? checkSilenceLength(b.for * 60_000) : parseSilenceLength(b.for);
    } catch (e) {
      this.audit(who, "alerts.silence", target, { ...b }, Status.InvalidData, (e as Error).message);
      throw new ApiError(400, "bad_request", (e as Error).message);
    }
    const until = Date.now() + ms;
    await this.d.alerts.record({ type: "silenced", time: Date.now(), by: `web:${who.name}`, identity: b.identity!, until, ...(b.note ? { note: b.note } : {}) });
    this.audit(who, "alerts.silence", target, { until: new Date(until).toISOString(), ...(b.note ? { note: b.note } : {}) }, Status.OK, `silenced until ${new Date(until).toISOString()}`);
    return { identity: b.identity!, until: new Date(until).toISOString() };
  }

  /** Ends a node's silence now. Audited. */
  async unsilence(b: AlertActionBody, who: Principal): Promise<void> {
    this.d.connected();
    if (!b.identity || !this.d.alerts.book().silenced(b.identity, Date.now())) {
      const why = b.identity ? `${b.identity} is not silenced` : "name the node (identity)";
      this.audit(who, "alerts.unsilence", b.identity ?? "", {}, Status.InvalidData, why);
      throw new ApiError(b.identity ? 404 : 400, b.identity ? "not_found" : "bad_request", why);
    }
    await this.d.alerts.record({ type: "unsilenced", time: Date.now(), by: `web:${who.name}`, identity: b.identity });
    this.audit(who, "alerts.unsilence", b.identity, {}, Status.OK, "silence ended");
  }

  /** A test alert to the admins, through the console's notifier. Audited with who was told. */
  async testAlert(b: AlertActionBody, who: Principal): Promise<{ notifier: string; told: string[] }> {
    this.d.connected();
    try {
      const r = await this.d.alerts.test(`web:${who.name}`, b.note);
      this.audit(who, "alerts.test", "admins", { notifier: r.notifier, told: r.told }, Status.OK, `told ${r.told.join(", ") || "nobody"}`);
      return r;
    } catch (e) {
      this.audit(who, "alerts.test", "admins", {}, Status.UnknownError, `not delivered: ${(e as Error).message}`);
      throw new ApiError(502, "not_delivered", (e as Error).message);
    }
  }
}
