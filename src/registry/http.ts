import { timingSafeEqual, createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import Fastify, { type FastifyInstance } from "fastify";
import { Gauge, Registry } from "prom-client";
import { buildFilter, FilterError } from "../filter/index.js";
import { isValidCollective } from "../protocol/subjects.js";
import type { RegistrationReceiver } from "./receiver.js";
import { MusterError } from "../errors.js";
import { nodeView } from "./record.js";
import { registryWarning } from "./select.js";
import { discoverInPuppetDb } from "../puppetdb/discover.js";
import type { PuppetDb } from "../puppetdb/http.js";
import { str } from "../puppetdb/pql.js";
import type { RegistryStore } from "./store.js";

// The registry over HTTP (read only). With http.token_file set, every route but /healthz wants
// `Authorization: Bearer <token>` (401 without it); /healthz carries counts only, for probes.
//
//   GET /nodes?fact=country=de&class=web&identity=/^web/&agent=puppet&with=...&select=...&collective=muster
//       every parameter repeatable and written as on the command line (-F -C -I -A -W -S): the
//       query goes through buildFilter and compileFilter, the same parser nodes use (no eval)
//       -> 200 {"count": N, "nodes": [{identity, facts, classes, agents, collectives, version, sent_at, last_seen, age_seconds}],
//               "registry": {nodes, newest_seen, started_at, expire_after_ms}, "warning"?: "empty / filling / stale ..."}
//       -> 400 {"error": "MUSTER_FILTER_INVALID", "message": "..."} for a filter that does not parse
//          or that the registry cannot answer (data plugins other than fact() and agent())
//       source=puppetdb: the same filter answered from PuppetDB (docs/puppetdb.md): {count, nodes: [{identity}],
//       puppetdb, warning?}, with each node's facts too when full=true; 502 when PuppetDB cannot answer
//   GET /nodes/<identity>  -> 200 one node, 404 when unknown or expired
//   GET /healthz           -> 200 {"ok": true, "bucket", "nodes", "received", "accepted", "rejected", "written", ...}
//   GET /metrics           -> Prometheus text

const FILTER_PARAMS = ["fact", "class", "identity", "agent", "with", "select", "collective", "source", "full"] as const;

function list(v: unknown): string[] | undefined {
  if (v === undefined) return undefined;
  if (Array.isArray(v)) return v.map(String);
  return [String(v)];
}

export function registryMetrics(store: RegistryStore, receiver: RegistrationReceiver): Registry {
  const registry = new Registry();
  const s = receiver.stats;
  const gauge = (name: string, help: string, value: () => number) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      collect() {
        this.set(value());
      },
    });
  gauge("muster_registry_nodes", "Current (unexpired) nodes in the registry", () => [...store.current()].length);
  gauge("muster_registry_registrations_received_total", "Registration messages received", () => s.received);
  gauge("muster_registry_registrations_accepted_total", "Registration messages accepted", () => s.accepted);
  new Gauge({
    name: "muster_registry_registrations_rejected_total",
    help: "Registration messages rejected, by reason",
    labelNames: ["reason"],
    registers: [registry],
    collect() {
      for (const [reason, n] of Object.entries(s.rejected)) this.set({ reason }, n);
    },
  });
  gauge("muster_registry_writes_total", "Records written to the bucket", () => s.written);
  gauge("muster_registry_unchanged_total", "Registrations not written because nothing changed (coalesced)", () => s.unchanged);
  gauge("muster_registry_merged_total", "Registrations merged with one already waiting to be written", () => s.merged);
  gauge("muster_registry_dropped_total", "Registrations dropped because too many nodes waited to be written", () => s.dropped);
  gauge("muster_registry_write_errors_total", "Failed bucket writes", () => s.writeErrors);
  return registry;
}

/** The bearer token in a token file (surrounding whitespace ignored). */
export function readToken(file: string): string {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    throw new MusterError("MUSTER_CONFIG_INVALID", `http.token_file: cannot read ${file}: ${(e as Error).message}`);
  }
  const token = text.trim();
  if (token.length < 16 || /\s/.test(token)) throw new MusterError("MUSTER_CONFIG_INVALID", `http.token_file: ${file} must hold one token of at least 16 characters (e.g. openssl rand -hex 32 > ${file})`);
  return token;
}

// Compared as digests so the comparison takes the same time whatever the length.
const digest = (s: string) => createHash("sha256").update(s).digest();

export interface HttpOptions {
  host: string;
  port: number;
  /** Bearer token clients must send; none: no authentication (loopback only, config.ts). */
  token?: string;
  /** When the daemon started (ms epoch), to say when it is still filling. */
  startedAt?: number;
  /** PuppetDB, for `source=puppetdb`. */
  puppetdb?: PuppetDb;
}

export async function serveHttp(store: RegistryStore, receiver: RegistrationReceiver, o: HttpOptions): Promise<{ app: FastifyInstance; address: string }> {
  const app = Fastify({ logger: false, routerOptions: { maxParamLength: 300 } });
  const metrics = registryMetrics(store, receiver);
  if (o.token !== undefined) {
    const want = digest(o.token);
    app.addHook("onRequest", async (req, reply) => {
      if (req.url === "/healthz" || req.url.startsWith("/healthz?")) return;
      const m = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? "");
      if (m && timingSafeEqual(digest(m[1]!), want)) return;
      return reply
        .code(401)
        .header("www-authenticate", 'Bearer realm="muster-registry"')
        .send({ error: "unauthorized", message: m ? "the bearer token is not this registry's (http.token_file)" : "send Authorization: Bearer <token> (the registry's http.token_file)" });
    });
  }

  app.get("/nodes", async (req, reply) => {
    const q = (req.query ?? {}) as Record<string, unknown>;
    const unknown = Object.keys(q).filter((k) => !(FILTER_PARAMS as readonly string[]).includes(k));
    if (unknown.length) return reply.code(400).send({ error: "MUSTER_USAGE", message: `unknown parameter ${unknown.map((k) => JSON.stringify(k.slice(0, 40))).join(", ")}; use ${FILTER_PARAMS.join(", ")}` });
    const collective = list(q["collective"]);
    if (collective && (collective.length !== 1 || !isValidCollective(collective[0]!))) return reply.code(400).send({ error: "MUSTER_USAGE", message: "collective takes one collective name" });
    const source = list(q["source"]) ?? ["registry"];
    if (source.length !== 1 || !["registry", "puppetdb"].includes(source[0]!)) return reply.code(400).send({ error: "MUSTER_USAGE", message: "source is registry (the default) or puppetdb" });
    try {
      const filter = buildFilter({ fact: list(q["fact"]), class: list(q["class"]), identity: list(q["identity"]), agent: list(q["agent"]), with: list(q["with"]), select: list(q["select"]) });
      if (source[0] === "puppetdb") {
        if (!o.puppetdb) return reply.code(400).send({ error: "MUSTER_PUPPETDB_UNAVAILABLE", message: "this registry has no PuppetDB: add a puppetdb: section to its config (docs/puppetdb.md)" });
        const found = await discoverInPuppetDb(o.puppetdb, filter, { collective: collective?.[0] });
        const full = list(q["full"])?.[0] === "true";
        const facts = new Map<string, unknown>();
        for (let i = 0; full && i < found.identities.length; i += 1000) {
          const part = found.identities.slice(i, i + 1000);
          for (const row of await o.puppetdb.query(`inventory[certname, facts] { certname in [${part.map(str).join(", ")}] }`)) {
            const r = (row ?? {}) as { certname?: unknown; facts?: unknown };
            if (typeof r.certname === "string") facts.set(r.certname, r.facts);
          }
        }
        const nodes = found.identities.map((identity) => (full ? { identity, facts: facts.get(identity) ?? {} } : { identity }));
        return { count: nodes.length, nodes, puppetdb: o.puppetdb.url, ...(found.warnings.length ? { warning: found.warnings.join("; ") } : {}) };
      }
      const now = Date.now();
      const nodes = store.select(filter, collective?.[0], now).map((r) => nodeView(r, now));
      const status = store.status(collective?.[0], o.startedAt, now);
      const warning = registryWarning(status, now, `bucket ${store.bucket}`);
      return { count: nodes.length, nodes, registry: status, ...(warning ? { warning } : {}) };
    } catch (e) {
      if (e instanceof FilterError) return reply.code(400).send({ error: e.code, message: e.message });
      if (e instanceof MusterError && e.code === "MUSTER_PUPPETDB_UNAVAILABLE") return reply.code(502).send({ error: e.code, message: e.message });
      throw e;
    }
  });

  app.get<{ Params: { identity: string } }>("/nodes/:identity", async (req, reply) => {
    const r = store.get(req.params.identity);
    if (!r) return reply.code(404).send({ error: "not_found", message: `no current registration for ${JSON.stringify(req.params.identity.slice(0, 253))}` });
    return nodeView(r, Date.now());
  });

  app.get("/healthz", async () => {
    const s = receiver.stats;
    return { ok: true, bucket: store.bucket, nodes: [...store.current()].length, received: s.received, accepted: s.accepted, rejected: s.rejected, written: s.written, unchanged: s.unchanged, merged: s.merged, dropped: s.dropped, write_errors: s.writeErrors };
  });

  app.get("/metrics", async (_req, reply) => {
    reply.header("content-type", metrics.contentType);
    return metrics.metrics();
  });

  const address = await app.listen({ host: o.host, port: o.port });
  return { app, address };
}
