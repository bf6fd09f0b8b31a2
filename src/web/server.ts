import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import type { TLSSocket } from "node:tls";
import fastifyCookie from "@fastify/cookie";
import Fastify, { type FastifyInstance, type FastifyRequest } from "fastify";
import type { Logger } from "pino";
import { afterLogin, allowed, certificateRole, Csrf, SessionStore, type Principal, type Role, type TokenTable } from "./auth.js";
import type { ConsoleBackend } from "./backend.js";
import type { WebConfig } from "./config.js";
import { ApiError, CSP, header } from "./http.js";
import { alertRoutes } from "./routes/alerts.js";
import { auditRoutes } from "./routes/audit.js";
import { boardRoutes } from "./routes/board.js";
import type { AuditedAction, RouteContext } from "./routes/context.js";
import { fleetRoutes } from "./routes/fleet.js";
import { healthRoutes } from "./routes/health.js";
import { runallRoutes } from "./routes/runall.js";
import { ASSETS_DIR, registerStatic } from "./static.js";

// The console's HTTP edge: authentication (bearer tokens, session cookies, TLS client
// certificates), CSRF, CSP, the login, and the route groups (routes/*.ts), each handed the backend
// (backend.ts) and the guard that checks roles and records refusals.

export { ApiError, CSP } from "./http.js";
export const SESSION_COOKIE = "muster_session";

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
  backend: ConsoleBackend;
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
      if (audited) backend.actions.refused(p, audited.action, audited.target(req), audited.data?.(req) ?? {}, `${e.code}: ${e.message}`);
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

  const ctx: RouteContext = { backend, cfg, need };
  for (const group of [healthRoutes, boardRoutes, fleetRoutes, runallRoutes, auditRoutes, alertRoutes]) group(app, ctx);

  return app;
}
