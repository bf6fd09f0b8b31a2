import { randomUUID, sign } from "node:crypto";
import { closeSync, fstatSync, openSync, readFileSync, readSync } from "node:fs";
import { hostname } from "node:os";
import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";
import { puppetDDL } from "../agents/puppet/ddl.js";
import { MusterClient } from "../client/client.js";
import { resolveBrokerSettings } from "../config/client.js";
import { MusterError } from "../errors.js";
import { selectFailed } from "../fleet/provision-failures.js";
import { applyRetry, retryFailed, retryRefusal } from "../fleet/provision-state.js";
import { ProvisionState } from "../provisioner/state.js";
import { runAll } from "../fleet/runner.js";
import { canonicalJson } from "../protocol/canonical.js";
import { asRunallEvent, RUNALL_AGENT } from "../protocol/events.js";
import { Status } from "../protocol/status.js";
import { isValidIdentity } from "../protocol/subjects.js";
import { Auditor, parseAuditLines } from "../security/audit.js";
import { auditRow, type AuditRow } from "./audit-view.js";
import { isLoopback } from "../security/loopback.js";
import { TokenTable, type Principal } from "./auth.js";
import { configuredBrokers, parseListen, type WebConfig } from "./config.js";
import { explorerFilter, type ExplorerNode } from "./explorer.js";
import { Insights } from "./insights.js";
import { BoardFeed, probeBroker, probeRegistry, sameHealth, type Health } from "./live.js";
import { RunTable, type RunView } from "./runs.js";
import { ApiError, buildApp, type WebBackend } from "./server.js";

// `muster web`: the console's process. Listens first (so the page can say what is down), connects
// to the broker in the background and keeps reconnecting, follows the state bucket and runall
// events, probes the broker and the registry, and carries out operators' actions.

export interface WebHandle {
  url: string;
  app: FastifyInstance;
  stop(): Promise<void>;
}

export interface WebOptions {
  /** --broker */
  broker?: string;
  /** Client config for the broker settings (--client-config). */
  clientConfig?: string;
  /** ms between health probes (default 2000). */
  probeMs?: number;
}

function readOptional(file: string | undefined, what: string): Buffer | undefined {
  if (!file) return undefined;
  try {
    return readFileSync(file);
  } catch (e) {
    throw new MusterError("MUSTER_CONFIG_INVALID", `${what}: cannot read ${file}: ${(e as Error).message}`);
  }
}

/** How much of the end of the audit file the audit page reads. */
const AUDIT_TAIL_BYTES = 4 * 1024 * 1024;

/** The whole lines in the last `bytes` of a file. */
function tailLines(file: string, bytes: number): string[] {
  let fd: number;
  try {
    fd = openSync(file, "r");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return []; // nothing recorded yet
    throw e;
  }
  try {
    const size = fstatSync(fd).size;
    const start = Math.max(0, size - bytes);
    const buf = Buffer.alloc(size - start);
    readSync(fd, buf, 0, buf.length, start);
    const lines = buf.toString("utf8").split("\n");
    return start > 0 ? lines.slice(1) : lines; // the first line may be cut
  } finally {
    closeSync(fd);
  }
}

/** How long the registry's answer to one filter is reused (paging and counts hit it repeatedly). */
const REGISTRY_CACHE_MS = 2000;

export async function startWeb(cfg: WebConfig, log: Logger, opts: WebOptions = {}): Promise<WebHandle> {
  const tokensText = readOptional(cfg.auth.tokens_file, "auth.tokens_file")?.toString("utf8");
  const tokens = tokensText === undefined ? undefined : TokenTable.fromText(tokensText, cfg.auth.tokens_file);
  if (tokens && tokens.size === 0 && !cfg.tls?.ca) throw new MusterError("MUSTER_CONFIG_INVALID", `auth.tokens_file ${cfg.auth.tokens_file} holds no tokens: add lines "<token> <role> <name>" (role viewer or operator)`);
  const registryToken = readOptional(cfg.registry.token_file, "registry.token_file")?.toString("utf8").trim();
  const https = cfg.tls ? { cert: readOptional(cfg.tls.cert, "tls.cert")!, key: readOptional(cfg.tls.key, "tls.key")!, ...(cfg.tls.ca ? { ca: readOptional(cfg.tls.ca, "tls.ca")! } : {}) } : undefined;
  const { host, port } = parseListen(cfg.listen);
  const broker = resolveBrokerSettings({ flag: opts.broker, own: { file: "the web config", brokers: configuredBrokers(cfg) }, clientConfig: opts.clientConfig });
  const where = broker.servers.join(",");
  const auditor = new Auditor(cfg.audit.file ? { file: cfg.audit.file, buffer: 10_000 } : undefined, { identity: hostname(), log });
  const me = isValidIdentity(hostname()) ? hostname() : "muster-web";

  let client: MusterClient | undefined;
  let stopping = false;
  const feed = new BoardFeed(cfg.state_bucket, log);
  const insights = new Insights(feed);
  const runs = new RunTable();
  const runListeners = new Set<(r: RunView) => void>();
  const healthListeners = new Set<(h: Health) => void>();
  let health: Health = { broker: { ok: false, error: `connecting to the broker at ${where}` }, registry: { ok: false, error: "not checked yet" } };

  // The registry's answer per filter, briefly reused.
  const cache = new Map<string, { at: number; nodes: Promise<ExplorerNode[]> }>();
  const registryGet = async (path: string): Promise<Response> => {
    try {
      return await fetch(new URL(path, cfg.registry.url), { signal: AbortSignal.timeout(10_000), headers: registryToken ? { authorization: `Bearer ${registryToken}` } : {} });
    } catch (e) {
      const cause = (e as { cause?: { code?: string } }).cause?.code ?? (e as Error).message;
      throw new ApiError(503, "registry", `the registry at ${cfg.registry.url} is unreachable (${cause}); the explorer answers again once it is back`);
    }
  };
  const registryNodes = (filterText: string): Promise<ExplorerNode[]> => {
    const now = Date.now();
    const hit = cache.get(filterText);
    if (hit && now - hit.at < REGISTRY_CACHE_MS) return hit.nodes;
    for (const [k, v] of cache) if (now - v.at >= REGISTRY_CACHE_MS) cache.delete(k);
    const nodes = (async () => {
      explorerFilter(filterText); // parsed here first: errors point at their column
      const q = filterText.trim() ? `?select=${encodeURIComponent(filterText.trim())}` : "";
      const res = await registryGet(`/nodes${q}`);
      const body = (await res.json().catch(() => ({}))) as { nodes?: ExplorerNode[]; message?: string };
      if (res.status === 400) throw new ApiError(400, "filter", body.message ?? "the registry cannot answer this filter", { column: 0 });
      if (!res.ok) throw new ApiError(502, "registry", `the registry answered HTTP ${res.status}: ${body.message ?? ""}`.trim());
      return body.nodes ?? [];
    })();
    nodes.catch(() => cache.delete(filterText));
    cache.set(filterText, { at: now, nodes });
    return nodes;
  };

  const audit = (who: Principal, what: string, target: string, data: Record<string, unknown>, statuscode: number, statusmsg: string) => {
    const entry = { time: Date.now(), identity: target, requestid: randomUUID(), caller: `web:${who.name}`, sender: me, agent: "web", action: what, data: { ...data, role: who.role, via: who.via }, statuscode, statusmsg };
    // Signed with the console's key, so a record cannot be altered unnoticed (verify with its public key).
    const signature = client ? sign(null, Buffer.from(canonicalJson(entry)), client.key.privateKey).toString("base64") : undefined;
    auditor.record({ ...entry, data: { ...entry.data, ...(signature ? { signature, signer: client!.key.name } : {}) } });
    log.info({ audit: { who: who.name, role: who.role, what, target, statuscode, statusmsg } }, "console action");
  };

  const needClient = (): MusterClient => {
    if (!client || !health.broker.ok) throw new ApiError(503, "broker", health.broker.error ?? `not connected to the broker at ${where}`);
    return client;
  };

  const backend: WebBackend = {
    feed,
    insights,
    async retryGroup(sel, who) {
      const c = needClient();
      const store = await ProvisionState.openExisting(c, cfg.state_bucket);
      const groups = insights.failures();
      const g = sel.group === undefined ? undefined : groups.find((x) => x.id === sel.group);
      const target = [sel.group !== undefined ? `group:${sel.group}` : "", sel.master !== undefined ? `master:${sel.master || "(none)"}` : ""].filter(Boolean).join(" ");
      const what = { ...sel, ...(g ? { stage: g.stage, reason: g.reason } : {}) };
      const selected = store ? selectFailed(feed.allRecords(), sel).length : 0;
      if (!store || selected === 0) {
        audit(who, "retry_group", target, { ...what, selected: 0 }, Status.Aborted, "no failed node selected");
        throw new ApiError(409, "retry_refused", `no failed node in ${sel.group !== undefined ? `group ${sel.group}` : ""}${sel.group !== undefined && sel.master !== undefined ? " of " : ""}${sel.master !== undefined ? `master ${sel.master || "(none)"}` : ""} now: look at the board again`);
      }
      const by = `${who.name} (web console, ${g ? `group ${g.stage}: ${g.reason}` : ""}${g && sel.master !== undefined ? ", " : ""}${sel.master !== undefined ? `master ${sel.master || "(none)"}` : ""})`;
      const r = await retryFailed(store, feed.allRecords(), sel, by);
      audit(who, "retry_group", target, { ...what, selected, retried: r.retried.length, changed: r.changed.length, nodes: r.retried.slice(0, 100) }, Status.OK, `${r.retried.length} queued for provisioning, ${r.changed.length} changed meanwhile`);
      return r;
    },
    health: () => health,
    onHealth(l) {
      healthListeners.add(l);
      return () => healthListeners.delete(l);
    },
    registryNodes,
    async registryNode(identity) {
      const res = await registryGet(`/nodes/${encodeURIComponent(identity)}`);
      if (res.status === 404) return undefined;
      if (!res.ok) throw new ApiError(502, "registry", `the registry answered HTTP ${res.status}`);
      return (await res.json()) as ExplorerNode;
    },
    async lastRunSummary(identity) {
      if (!client || !health.broker.ok || !isValidIdentity(identity)) return null;
      const r = await client.agent(puppetDDL).call("last_run_summary", {}, { nodes: [identity], timeoutMs: 2000 });
      const reply = r.replies[0];
      return reply && reply.statuscode === Status.OK ? (reply.data as Record<string, unknown>) : null;
    },
    async puppetStatus(identity) {
      if (!client || !health.broker.ok || !isValidIdentity(identity)) return null;
      const r = await client.agent(puppetDDL).call("status", {}, { nodes: [identity], timeoutMs: 2000 });
      const reply = r.replies[0];
      return reply && reply.statuscode === Status.OK ? (reply.data as Record<string, unknown>) : null;
    },
    async lastRunReport(identity) {
      if (!client || !health.broker.ok || !isValidIdentity(identity)) return null;
      // a node whose puppet agent predates the action answers "unknown action": no report, as before
      const r = await client.agent(puppetDDL).call("last_run_report", {}, { nodes: [identity], timeoutMs: 2000 });
      const reply = r.replies[0];
      return reply && reply.statuscode === Status.OK ? (reply.data as Record<string, unknown>) : null;
    },
    async retry(identity, who) {
      const c = needClient();
      const store = await ProvisionState.openExisting(c, cfg.state_bucket);
      const v = store && (await store.get(identity));
      if (!v) {
        audit(who, "retry", identity, {}, Status.InvalidData, "unknown node");
        throw new ApiError(404, "not_found", `the provisioner has no record of ${identity}`);
      }
      const why = retryRefusal(v.record);
      if (why) {
        audit(who, "retry", identity, { status: v.record.status }, Status.Aborted, why);
        throw new ApiError(409, "retry_refused", why);
      }
      applyRetry(v.record, `${who.name} (web console)`);
      // Compare-and-set: a provisioner writing meanwhile wins, and the operator is told.
      if ((await store.compareAndSet(v)) === undefined) {
        audit(who, "retry", identity, {}, Status.Aborted, "record changed meanwhile");
        throw new ApiError(409, "retry_refused", `${identity} changed while retrying; look at it again`);
      }
      audit(who, "retry", identity, {}, Status.OK, "queued for provisioning");
    },
    refused(who, action, target, data, reason) {
      audit(who, action, target, data, Status.Aborted, `refused: ${reason}`);
    },
    runs: () => runs.list(),
    onRun(l) {
      runListeners.add(l);
      return () => runListeners.delete(l);
    },
    async auditRecords() {
      const rows: AuditRow[] = [];
      const sources: { name: string; ok: boolean; records: number; error?: string }[] = [];
      if (cfg.audit.file) {
        try {
          const recs = parseAuditLines(tailLines(cfg.audit.file, AUDIT_TAIL_BYTES));
          rows.push(...recs.map((e) => auditRow(e, "console")));
          sources.push({ name: `console file ${cfg.audit.file}`, ok: true, records: recs.length });
        } catch (e) {
          sources.push({ name: `console file ${cfg.audit.file}`, ok: false, records: 0, error: (e as Error).message });
        }
      } else sources.push({ name: "console file", ok: false, records: 0, error: "audit.file is not set: the console's actions are only logged" });
      if (client && health.broker.ok) {
        try {
          const recs = await client.auditRecords("MUSTER_AUDIT", 2000);
          if (recs === undefined) sources.push({ name: "audit stream MUSTER_AUDIT", ok: false, records: 0, error: "no such stream: nodes publish their records there with audit.stream (docs/security.md)" });
          else {
            rows.push(...recs.map((e) => auditRow(e, "node")));
            sources.push({ name: "audit stream MUSTER_AUDIT", ok: true, records: recs.length });
          }
        } catch (e) {
          sources.push({ name: "audit stream MUSTER_AUDIT", ok: false, records: 0, error: (e as Error).message });
        }
      } else sources.push({ name: "audit stream MUSTER_AUDIT", ok: false, records: 0, error: "the broker is not reachable" });
      return { rows, sources };
    },
    runResults: (id) => runs.results(id),
    async runallPreview(filterText) {
      const nodes = await registryNodes(filterText);
      return nodes.filter((n) => n.agents?.includes("puppet")).length;
    },
    async startRunall(filterText, concurrency, who, confirmed) {
      const c = needClient();
      const f = explorerFilter(filterText);
      const filter = f.agent.includes("puppet") ? f : { ...f, agent: [...f.agent, "puppet"] };
      const nodes = await c.discover({ filter, timeoutMs: 2000 });
      if (nodes.length === 0) {
        audit(who, "runall", "*", { filter: filterText, concurrency }, Status.Aborted, "no nodes discovered");
        throw new ApiError(422, "no_nodes", `no Puppet nodes match ${JSON.stringify(filterText)}`);
      }
      // A run on many nodes starts only once the operator has seen how many: the count they confirm
      // must be the count discovered now (a fleet that grew meanwhile asks again).
      if (nodes.length > cfg.runall.confirm_above && confirmed !== nodes.length) {
        if (confirmed !== undefined) audit(who, "runall", "*", { filter: filterText, concurrency, nodes: nodes.length, confirmed }, Status.Aborted, "the confirmed count differs from the nodes discovered");
        throw new ApiError(409, "confirm", `${nodes.length} nodes match ${filterText ? JSON.stringify(filterText) : "(every node)"}; confirm the count to start (confirm: ${nodes.length})`, { matches: nodes.length });
      }
      const id = randomUUID();
      audit(who, "runall", "*", { filter: filterText, concurrency, nodes: nodes.length, run: id }, Status.OK, "started");
      void runAll(c, { concurrency, nodes, runonce: { force: true }, announce: { id, identity: me, startedBy: `${who.name} (web console)`, filter: filterText } }).catch((e: unknown) => log.error({ run: id, err: (e as Error).message }, "runall failed"));
      return id;
    },
  };

  const app = await buildApp({ cfg, tokens, log, backend, https });
  const url = await app.listen({ host, port });
  if (!isLoopback(host)) log.warn({ listen: cfg.listen }, `the console listens on ${host}, reachable from other machines: every request still needs a token or client certificate${https ? "" : ", and without tls: they travel in clear text"}`);

  const setHealth = (h: Health) => {
    if (sameHealth(h, health)) return;
    const brokerBack = h.broker.ok && !health.broker.ok;
    health = h;
    for (const l of healthListeners) l(h);
    if (brokerBack && client) void feed.start(client).catch((e: unknown) => log.warn({ err: (e as Error).message }, "cannot follow the state bucket"));
  };
  // Probes overlap (the timer's and the one right after connecting): only the latest one started
  // may set the health, or an answer from before the connection could report the broker down again.
  let probes = 0;
  const probe = async () => {
    const n = ++probes;
    const [b, r] = await Promise.all([probeBroker(client, cfg.state_bucket, where), probeRegistry(cfg.registry.url, registryToken)]);
    if (n !== probes) return;
    // The bucket may appear later (the first provisioner run): follow it once it does.
    if (b.ok && client && feed.problem?.startsWith("no state bucket")) void feed.start(client).catch(() => undefined);
    setHealth({ broker: b, registry: r });
  };
  let timer: NodeJS.Timeout | undefined;
  const loop = () => {
    if (stopping) return;
    void probe().finally(() => {
      if (!stopping) timer = setTimeout(loop, opts.probeMs ?? 2000);
    });
  };

  // Connect in the background: the page says the broker is down meanwhile.
  let sub: { unsubscribe(): void } | undefined;
  const connecting = new AbortController();
  void (async () => {
    const c = await MusterClient.connect({ signal: connecting.signal, brokers: broker.servers, tls: broker.tls, from: broker.from, persistent: true, log, name: "muster-web", ...(cfg.collective ? { collective: cfg.collective } : {}) });
    if (stopping) return void (await c.close());
    client = c;
    // Runall progress comes from client processes (`muster puppet runall`, this console), which hold
    // no node key: display-only, not verified (docs/security.md, "Verifying replies").
    sub = c.onEvent(
      RUNALL_AGENT,
      "*",
      (e) => {
        const ev = asRunallEvent(e);
        const v = ev && runs.apply(ev);
        if (v) for (const l of runListeners) l(v);
      },
      { verify: false },
    );
    await probe(); // the broker's health turning ok starts the board's watch
  })().catch((e: unknown) => stopping || log.error({ err: (e as Error).message }, "cannot connect to the broker"));
  loop();

  return {
    url,
    app,
    async stop() {
      stopping = true;
      connecting.abort();
      clearTimeout(timer);
      feed.stop();
      insights.stop();
      sub?.unsubscribe();
      await app.close();
      await client?.close();
      await auditor.close();
    },
  };
}
