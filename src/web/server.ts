import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import type { TLSSocket } from "node:tls";
import fastifyCookie from "@fastify/cookie";
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from "fastify";
import type { Logger } from "pino";
import { FilterError } from "../filter/index.js";
import { afterLogin, allowed, certificateRole, Csrf, SessionStore, type Principal, type Role, type TokenTable } from "./auth.js";
import { boardNode, type BoardNode } from "./board.js";
import type { WebConfig } from "./config.js";
import { countBy, explorerFilter, filterProblem, page, parseColumns, type ExplorerNode } from "./explorer.js";
import { auditPage, type AuditRow } from "./audit-view.js";
import type { Insights } from "./insights.js";
import type { BoardFeed, Health } from "./live.js";
import type { RunView } from "./runs.js";
import { ASSETS_DIR, registerStatic } from "./static.js";

// The console's HTTP edge: authentication (bearer tokens, session cookies, TLS client
// certificates), CSRF, CSP, the JSON API and the server-sent event streams. Decisions live in
// auth.ts, board.ts, explorer.ts and runs.ts; I/O behind the `WebBackend` the daemon (web.ts) wires.

export const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";
export const SESSION_COOKIE = "muster_session";

/** What the edge needs from the rest of the console (daemon.ts wires the real ones). */
export interface WebBackend {
  feed: BoardFeed;
  /** Failure groups and progress computed from the feed's records. */
  insights: Insights;
  /** Retries a failure group's or a master's failed nodes (fleet/provision-state.ts retryFailed). */
  retryGroup(sel: { group?: string; master?: string }, who: Principal): Promise<{ retried: string[]; changed: string[] }>;
  health(): Health;
  onHealth(listener: (h: Health) => void): () => void;
  /** Registry nodes matching a wire filter built from the filter box's text. */
  registryNodes(filterText: string): Promise<ExplorerNode[]>;
  registryNode(identity: string): Promise<ExplorerNode | undefined>;
  lastRunSummary(identity: string): Promise<Record<string, unknown> | null>;
  /** The node's puppet agent status (enabled, applying, the last run it started: message, failed resources, errors). */
  puppetStatus(identity: string): Promise<Record<string, unknown> | null>;
  /** The node's last Puppet report: changed and failed resources with their messages. */
  lastRunReport(identity: string): Promise<Record<string, unknown> | null>;
  retry(identity: string, who: Principal): Promise<void>;
  runs(): RunView[];
  onRun(listener: (r: RunView) => void): () => void;
  /**
   * Starts a runall. Above the configured count the operator must confirm how many nodes it runs
   * on (`confirmed`, the count they were shown); otherwise it refuses with 409 code `confirm`.
   */
  startRunall(filter: string, concurrency: number, who: Principal, confirmed?: number): Promise<string>;
  /** Per-node results of a run (undefined: unknown run). */
  runResults(id: string): import("./runs.js").RunResult[] | undefined;
  /** The audit records the console can read: its own file and the nodes' audit stream (if any). */
  auditRecords(): Promise<{ rows: AuditRow[]; sources: { name: string; ok: boolean; records: number; error?: string }[] }>;
  /** How many registered nodes with the puppet agent a filter matches (the runall form's preview). */
  runallPreview(filter: string): Promise<number>;
  /** Records an action refused at the edge (the role or the CSRF check) in the audit trail. */
  refused(who: Principal, action: string, target: string, data: Record<string, unknown>, reason: string): void;
}

/** What an action route records when it is refused before it runs: its name and its target. */
interface AuditedAction {
  action: string;
  target(req: FastifyRequest): string;
  data?(req: FastifyRequest): Record<string, unknown>;
}

/** An error the API answers with its own status and code. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

interface Authed {
  principal?: Principal;
  /** What the CSRF token is bound to. */
  credential?: string;
}

declare module "fastify" {
  interface FastifyRequest {
    auth: Authed;
  }
}

export interface AppOptions {
  cfg: WebConfig;
  tokens?: TokenTable;
  log: Logger;
  backend: WebBackend;
  /** HTTPS options when tls is configured. */
  https?: { cert: Buffer; key: Buffer; ca?: Buffer };
}

const PUBLIC = new Set(["/", "/login", "/assets/login.css", "/assets/login.js", "/favicon.ico"]);

const digest = (s: string) => createHash("sha256").update(s).digest("base64url");

export async function buildApp(o: AppOptions): Promise<FastifyInstance> {
  const { cfg, backend } = o;
  const https = o.https ? { https: { cert: o.https.cert, key: o.https.key, ...(o.https.ca ? { ca: o.https.ca, requestCert: true, rejectUnauthorized: true } : {}) } } : {};
  const app = Fastify({ logger: false, bodyLimit: 64 * 1024, routerOptions: { maxParamLength: 300 }, ...https }) as unknown as FastifyInstance;
  const sessions = new SessionStore(cfg.auth.session_hours * 3600_000);
  const csrf = new Csrf();
  const secure = Boolean(o.https);

  await app.register(fastifyCookie);
  app.decorateRequest("auth", null as unknown as Authed);
  // The login form posts urlencoded; no plugin needed for one small form.
  app.addContentTypeParser("application/x-www-form-urlencoded", { parseAs: "string" }, (_req, body, done) => done(null, Object.fromEntries(new URLSearchParams(body as string))));

  app.addHook("onRequest", async (req, reply) => {
    reply.header("content-security-policy", CSP);
    reply.header("x-content-type-options", "nosniff");
    reply.header("referrer-policy", "no-referrer");
    reply.header("cache-control", "no-store");
    req.auth = authenticate(req);
    const path = req.url.split("?")[0]!;
    if (req.auth.principal || PUBLIC.has(path)) return;
    const bearer = req.headers.authorization !== undefined;
    return reply
      .code(401)
      .header("www-authenticate", 'Bearer realm="muster-web"')
      .send({ error: { code: "unauthenticated", message: bearer ? "the bearer token is not one of this console's (auth.tokens_file)" : "sign in at / with your console token, or send Authorization: Bearer <token>" } });
  });

  function authenticate(req: FastifyRequest): Authed {
    // A verified client certificate (tls.ca set: the TLS layer already refused unsigned ones).
    if (cfg.tls?.ca) {
      const sock = req.raw.socket as TLSSocket;
      const cert = typeof sock.getPeerCertificate === "function" && sock.authorized ? sock.getPeerCertificate() : undefined;
      const cn = cert?.subject?.CN;
      const role = certificateRole(cfg.tls.roles, Array.isArray(cn) ? cn[0] : cn);
      if (cn && role) return { principal: { name: String(cn), role, via: "certificate" }, credential: `c:${String(cn)}` };
    }
    const m = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? "");
    if (m && o.tokens) {
      const who = o.tokens.lookup(m[1]!);
      return who ? { principal: { ...who, via: "token" }, credential: `t:${digest(m[1]!)}` } : {};
    }
    const s = sessions.get(req.cookies?.[SESSION_COOKIE]);
    if (s) return { principal: { name: s.name, role: s.role, via: "session" }, credential: `s:${s.id}` };
    return {};
  }

  // An action refused here (the role, the CSRF token) is recorded as the backend records the ones
  // it refuses itself (docs/web.md: refusals are audited).
  const need = (role: Role, audited?: AuditedAction) => async (req: FastifyRequest) => {
    const p = req.auth.principal!;
    const refuse = (e: ApiError) => {
      if (audited) backend.refused(p, audited.action, audited.target(req), audited.data?.(req) ?? {}, `${e.code}: ${e.message}`);
      return e;
    };
    if (!allowed(p.role, role)) throw refuse(new ApiError(403, "forbidden", `${p.name} is a ${p.role}; this needs the ${role} role`));
    if (req.method === "POST" && !csrf.check(req.auth.credential!, header(req, "x-csrf-token"))) {
      throw refuse(new ApiError(403, "csrf", "missing or wrong x-csrf-token header: send the csrf value of GET /api/session"));
    }
  };

  app.setErrorHandler((err, _req, reply) => {
    if (err instanceof ApiError) return reply.code(err.status).send({ error: { code: err.code, message: err.message, ...err.extra } });
    const e = err as { statusCode?: number; message: string };
    if (e.statusCode && e.statusCode < 500) return reply.code(e.statusCode).send({ error: { code: "bad_request", message: e.message } });
    o.log.error({ err: e.message }, "web request failed");
    return reply.code(500).send({ error: { code: "internal", message: e.message } });
  });
  app.setNotFoundHandler((req, reply) => reply.code(404).send({ error: { code: "not_found", message: `no such page: ${req.method} ${req.url.split("?")[0]!.slice(0, 200)}` } }));

  await registerStatic(app);

  const loginPage = (failed: boolean) => {
    const html = readFileSync(`${ASSETS_DIR}login.html`, "utf8");
    return failed ? html.replace(/(id="login-error")\s+hidden/, "$1") : html;
  };

  app.get("/", async (req, reply) => {
    if (!req.auth.principal) return reply.type("text/html; charset=utf-8").send(loginPage(false));
    return reply.type("text/html; charset=utf-8").send(readFileSync(`${ASSETS_DIR}index.html`, "utf8"));
  });

  app.post("/login", async (req, reply) => {
    // A cross-site form cannot log a browser into someone else's session: the origin must be ours.
    const origin = header(req, "origin");
    if (origin && origin !== "null" && new URL(origin).host !== req.headers.host) throw new ApiError(403, "csrf", "login from another site refused");
    const body = (req.body ?? {}) as Record<string, unknown>;
    const token = typeof body.token === "string" ? body.token.trim() : "";
    const who = token && o.tokens ? o.tokens.lookup(token) : undefined;
    if (!who) return reply.code(401).type("text/html; charset=utf-8").send(loginPage(true));
    const s = sessions.create(who.name, who.role);
    reply.setCookie(SESSION_COOKIE, s.id, { httpOnly: true, sameSite: "strict", secure, path: "/", maxAge: cfg.auth.session_hours * 3600 });
    return reply.redirect(afterLogin(body.next), 303);
  });

  app.post("/logout", { preHandler: need("viewer") }, async (req, reply) => {
    sessions.delete(req.cookies?.[SESSION_COOKIE]);
    reply.clearCookie(SESSION_COOKIE, { path: "/" });
    return { ok: true };
  });

  app.get("/api/session", async (req) => {
    const p = req.auth.principal!;
    return { name: p.name, role: p.role, via: p.via, csrf: csrf.tokenFor(req.auth.credential!) };
  });

  app.get("/api/health", async () => backend.health());

  app.get("/api/board", async () => {
    await backend.feed.whenReady(5000);
    return { nodes: backend.feed.snapshot() };
  });

  app.get("/api/board/events", async (req, reply) => {
    const sse = openStream(req, reply);
    const snapshot = () => sse.send("snapshot", { nodes: backend.feed.snapshot() });
    const node = (n: BoardNode) => sse.send("node", n);
    const remove = (identity: string) => sse.send("remove", { identity });
    const failures = (groups: unknown) => sse.send("failures", { groups });
    const progress = (p: unknown) => sse.send("progress", p);
    sse.send("health", backend.health());
    if (backend.feed.ready) {
      snapshot();
      failures(backend.insights.failures());
      progress(backend.insights.progress());
    }
    backend.feed.on("snapshot", snapshot);
    backend.feed.on("node", node);
    backend.feed.on("remove", remove);
    backend.insights.on("failures", failures);
    backend.insights.on("progress", progress);
    const offHealth = backend.onHealth((h) => sse.send("health", h));
    sse.onClose(() => {
      backend.feed.off("snapshot", snapshot);
      backend.feed.off("node", node);
      backend.feed.off("remove", remove);
      backend.insights.off("failures", failures);
      backend.insights.off("progress", progress);
      offHealth();
    });
  });

  const retryAudit: AuditedAction = { action: "retry", target: (req) => String((req.params as { identity?: string }).identity ?? "").slice(0, 253) };
  app.post<{ Params: { identity: string } }>("/api/board/:identity/retry", { preHandler: need("operator", retryAudit) }, async (req) => {
    await backend.retry(req.params.identity, req.auth.principal!);
    return { ok: true };
  });

  app.get("/api/failures", async () => {
    await backend.feed.whenReady(5000);
    return { groups: backend.insights.failures() };
  });

  const groupAudit: AuditedAction = { action: "retry_group", target: (req) => groupTarget(req.body), data: (req) => groupSelection(req.body) };
  app.post("/api/failures/retry", { preHandler: need("operator", groupAudit) }, async (req) => {
    const sel = groupSelection(req.body);
    if (sel.group === undefined && sel.master === undefined) throw new ApiError(400, "bad_request", "name a failure group (group: its id from GET /api/failures) or a master (master: its name), or both");
    const r = await backend.retryGroup(sel, req.auth.principal!);
    return { retried: r.retried.length, changed: r.changed.length, nodes: r.retried, changed_nodes: r.changed };
  });

  app.get("/api/audit", { preHandler: need("operator") }, async (req) => {
    const q = req.query as Record<string, string | undefined>;
    const limit = intParam(q.limit, 500, "limit");
    const { rows, sources } = await backend.auditRecords();
    return { ...auditPage(rows, { ...(q.user ? { user: q.user } : {}), ...(q.action ? { action: q.action } : {}), refused: q.refused === "true" || q.refused === "1", limit }), sources };
  });

  app.get("/api/progress", async () => {
    await backend.feed.whenReady(5000);
    return backend.insights.progress(true);
  });

  app.get("/api/progress/events", async (req, reply) => {
    const sse = openStream(req, reply);
    const progress = (p: unknown) => sse.send("progress", p);
    if (backend.feed.ready) progress(backend.insights.progress());
    backend.insights.on("progress", progress);
    sse.onClose(() => backend.insights.off("progress", progress));
  });

  app.get("/api/nodes", async (req) => {
    const q = req.query as Record<string, string | undefined>;
    const filter = q.filter ?? "";
    checkFilter(filter);
    let columns: string[];
    try {
      columns = parseColumns(q.columns);
    } catch (e) {
      throw new ApiError(400, "bad_request", (e as Error).message);
    }
    const offset = intParam(q.offset, 0, "offset");
    const limit = intParam(q.limit, 200, "limit");
    return page(await backend.registryNodes(filter), columns, offset, limit);
  });

  app.get("/api/counts", async (req) => {
    const q = req.query as Record<string, string | undefined>;
    const fact = (q.fact ?? "").trim();
    if (!fact) throw new ApiError(400, "bad_request", "fact= names the fact to count by (e.g. fact=os.family)");
    const filter = q.filter ?? "";
    checkFilter(filter);
    return { fact, counts: countBy(await backend.registryNodes(filter), fact) };
  });

  app.get<{ Params: { identity: string } }>("/api/nodes/:identity", async (req) => {
    const id = req.params.identity;
    // As /api/board: a console just started (or back from a broker outage) reads the bucket first,
    // so a node it has not caught up on yet is not reported unknown.
    const [node, summary, status, report] = await Promise.all([backend.registryNode(id), backend.lastRunSummary(id).catch(() => null), backend.puppetStatus(id).catch(() => null), backend.lastRunReport(id).catch(() => null), backend.feed.whenReady(5000)]);
    const r = backend.feed.record(id);
    const rec = r ? boardNode(r) : null;
    if (!node && !rec) throw new ApiError(404, "not_found", `neither the registry nor the provisioner knows ${JSON.stringify(id.slice(0, 253))}`);
    return { identity: id, facts: node?.facts ?? {}, classes: node?.classes ?? [], agents: node?.agents ?? [], collectives: node?.collectives ?? [], provisioning: rec, last_run_summary: summary, puppet_status: status, last_run_report: report };
  });

  app.get("/api/runall", async () => ({ runs: backend.runs(), confirm_above: cfg.runall.confirm_above }));

  app.get("/api/runall/preview", async (req) => {
    const filter = (req.query as Record<string, string | undefined>).filter ?? "";
    checkFilter(filter);
    return { filter, matches: await backend.runallPreview(filter), confirm_above: cfg.runall.confirm_above };
  });

  app.get<{ Params: { id: string } }>("/api/runall/:id", async (req) => {
    const run = backend.runs().find((r) => r.id === req.params.id);
    const results = backend.runResults(req.params.id);
    if (!run || !results) throw new ApiError(404, "not_found", `no run ${JSON.stringify(req.params.id.slice(0, 64))} here (the console keeps the last runs since it started)`);
    return { run, results };
  });

  app.get("/api/runall/events", async (req, reply) => {
    const sse = openStream(req, reply);
    for (const r of backend.runs()) sse.send("run", r);
    sse.onClose(backend.onRun((r) => sse.send("run", r)));
  });

  const runallAudit: AuditedAction = {
    action: "runall",
    target: () => "*",
    data: (req) => {
      const b = (req.body ?? {}) as Record<string, unknown>;
      return { filter: typeof b.filter === "string" ? b.filter.slice(0, 4096) : "", concurrency: typeof b.concurrency === "number" ? b.concurrency : null };
    },
  };
  app.post("/api/runall", { preHandler: need("operator", runallAudit) }, async (req) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    const filter = typeof body.filter === "string" ? body.filter : "";
    const concurrency = body.concurrency;
    if (typeof concurrency !== "number" || !Number.isInteger(concurrency) || concurrency < 1 || concurrency > 10_000) throw new ApiError(400, "bad_request", "concurrency must be a whole number from 1 to 10000");
    checkFilter(filter);
    const confirmed = typeof body.confirm === "number" && Number.isInteger(body.confirm) ? body.confirm : undefined;
    return { id: await backend.startRunall(filter, concurrency, req.auth.principal!, confirmed) };
  });

  return app;
}

/** A group retry's body: `group` (an id) and/or `master` (a name; "" for nodes without one). */
function groupSelection(body: unknown): { group?: string; master?: string } {
  const b = (body ?? {}) as Record<string, unknown>;
  const out: { group?: string; master?: string } = {};
  if (typeof b.group === "string" && /^[0-9a-f]{1,64}$/.test(b.group)) out.group = b.group;
  if (typeof b.master === "string" && b.master.length <= 253) out.master = b.master;
  return out;
}

function groupTarget(body: unknown): string {
  const s = groupSelection(body);
  return [s.group !== undefined ? `group:${s.group}` : "", s.master !== undefined ? `master:${s.master || "(none)"}` : ""].filter(Boolean).join(" ") || "*";
}

function header(req: FastifyRequest, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function checkFilter(text: string): void {
  if (text.length > 4096) throw new ApiError(400, "filter", "the filter is longer than 4096 characters", { column: 4097 });
  try {
    explorerFilter(text);
  } catch (e) {
    if (e instanceof FilterError) {
      const p = filterProblem(e);
      throw new ApiError(400, "filter", p.message, { column: p.column });
    }
    throw e;
  }
}

function intParam(v: string | undefined, dflt: number, name: string): number {
  if (v === undefined || v === "") return dflt;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new ApiError(400, "bad_request", `${name} must be a whole number >= 0`);
  return n;
}

const HEARTBEAT_MS = 15_000;

/**
 * A server-sent event stream on the raw response. Plain SSE over reply.raw: the protocol is a few
 * header lines and `event:`/`data:` frames, and the fastify SSE plugins add little but a dependency.
 */
function openStream(req: FastifyRequest, reply: FastifyReply): { send(event: string, data: unknown): void; onClose(f: () => void): void } {
  reply.hijack();
  const res = reply.raw;
  res.writeHead(200, {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-store",
    connection: "keep-alive",
    "x-accel-buffering": "no",
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
  });
  res.write("retry: 2000\n\n"); // browsers reconnect after 2 s; each reconnect starts with a snapshot
  let closed = false;
  const closers: (() => void)[] = [];
  const beat = setInterval(() => res.write(": keep-alive\n\n"), HEARTBEAT_MS);
  const close = () => {
    if (closed) return;
    closed = true;
    clearInterval(beat);
    for (const c of closers) c();
  };
  req.raw.on("close", close);
  res.on("error", close);
  return {
    send(event, data) {
      if (closed) return;
      res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    },
    onClose(f) {
      if (closed) f();
      else closers.push(f);
    },
  };
}
