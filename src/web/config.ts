import { z } from "zod";
import { loadConfigFile, validateConfig } from "../config/load.js";
import { DEFAULT_STATE_BUCKET } from "../protocol/buckets.js";
import { isValidCollective } from "../protocol/subjects.js";
import { Roles } from "./auth.js";

// `muster web --config FILE` (YAML or JSON). docs/web.md describes each key. The broker comes from
// the usual client settings (--broker, MUSTER_BROKER, the client config), as for every command.

export const DEFAULT_LISTEN = "127.0.0.1:8480";

const HOST_PORT = /^(\[[0-9a-fA-F:]+\]|[^:\s]+):(\d{1,5})$/;

export function parseListen(s: string): { host: string; port: number } {
  const m = HOST_PORT.exec(s.trim());
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535) throw new Error(`listen must be HOST:PORT (e.g. ${DEFAULT_LISTEN}), got ${JSON.stringify(s)}`);
  return { host: m[1]!.replace(/^\[|\]$/g, ""), port };
}

const listen = z.string().refine((s) => {
  try {
    parseListen(s);
    return true;
  } catch {
    return false;
  }
}, `HOST:PORT, e.g. ${DEFAULT_LISTEN}`);

export const WebConfigSchema = z
  .object({
    /** Where the console listens; --listen wins. Loopback by default. */
    listen: listen.default(DEFAULT_LISTEN),
    /** HTTPS. With `ca`, browsers and API clients must present a client certificate it signed; `roles` maps its common name to a role. */
    tls: z
      .object({
        cert: z.string().min(1),
        key: z.string().min(1),
        ca: z.string().min(1).optional(),
        /** Certificate common name (or "CN=name") -> viewer | operator. */
        roles: z.record(z.string(), z.enum(Roles)).default({}),
      })
      .strict()
      .optional(),
    auth: z
      .object({
        /** Lines of `<token> <role> <name>`; role viewer or operator. */
        tokens_file: z.string().min(1).optional(),
        /** Hours a browser session lasts. */
        session_hours: z.number().positive().max(24 * 30).default(12),
      })
      .strict()
      .default({ session_hours: 12 }),
    /** The registry's HTTP API (registry config http:), for the fleet explorer and node pages. */
    registry: z
      .object({
        url: z.string().url().default("http://127.0.0.1:8089"),
        token_file: z.string().min(1).optional(),
      })
      .strict()
      .default({ url: "http://127.0.0.1:8089" }),
    /** The provisioner's state bucket (provisioner config state_bucket). */
    state_bucket: z.string().min(1).default(DEFAULT_STATE_BUCKET),
    /** Copies of the stores the console creates (heartbeats, Puppet runs, runall history, audit) in a JetStream cluster: the number of brokers, up to 3 (docs/deploy.md §3). Existing stores keep theirs. */
    store_replicas: z.number().int().min(1).max(5).optional(),
    /** Collective runall addresses. */
    collective: z.string().refine(isValidCollective, "a collective name").optional(),
    /** Broker URL(s); --broker, MUSTER_BROKER and the client config as for every command. */
    broker: z.union([z.string(), z.array(z.string())]).optional(),
    /** Runall from the console: above this many matching nodes, the operator confirms the count before it starts. */
    runall: z
      .object({ confirm_above: z.number().int().min(0).max(1_000_000).default(10) })
      .strict()
      .default({ confirm_above: 10 }),
    /**
     * Where the console's own actions (retry, runall, alerts) and refusals are recorded: the audit
     * stream the nodes publish to (`stream`, on by default: `muster.audit.web`, replicated as the
     * stream is), and a file of JSON lines too with `file`.
     */
    audit: z.object({ file: z.string().min(1).optional(), stream: z.boolean().default(true) }).strict().default({ stream: true }),
    /** Fleet health (docs/fleet.md#health): when a node counts as unreachable, and Puppet as stale. */
    health: z
      .object({
        /** Seconds without a heartbeat (at least 2.5 of the node's own intervals). */
        unreachable_after: z.number().positive().max(86_400).default(25),
        /** Seconds since the last Puppet run; unset: twice each node's own runinterval. */
        stale_after: z.number().positive().optional(),
        /**
         * The brokers' monitoring ports (`http://nats1.example.net:8222`): the console watches each
         * member there (answers, routes, meta group, stream copies) and health lists them as
         * services (docs/fleet.md#the-sites-services). None by default: unlisted, no broker is watched.
         */
        broker_monitoring: z.array(z.string().url().refine((u) => /^https?:\/\//.test(u), "an http(s) URL")).max(16).default([]),
      })
      .strict()
      .default({ unreachable_after: 25, broker_monitoring: [] }),
    /** Telling the admins about nodes' health through the notify agent (docs/fleet.md#alerts). */
    alerts: z
      .object({
        enabled: z.boolean().default(true),
        /** Seconds since its last heartbeat before an unreachable node is reported (0: as soon as it is unreachable; never before 20 s of silence, health/alerts.ts RESTART_GRACE_S). */
        unreachable_after: z.number().nonnegative().default(0),
        /** Failed Puppet runs in a row that are reported (0: none). */
        puppet_failures: z.number().int().nonnegative().default(3),
        notify: z
          .object({
            agent: z.string().regex(/^[a-z][a-z0-9_]*$/, "an agent name").default("notify"),
            /** A compound filter narrowing the notifiers (e.g. "role=notifier"). */
            filter: z.string().default(""),
            /** Recipients passed to the notifier; default its own. */
            recipients: z.array(z.string().min(1)).default([]),
          })
          .strict()
          .default({ agent: "notify", filter: "", recipients: [] }),
      })
      .strict()
      .default({ enabled: true, unreachable_after: 0, puppet_failures: 3, notify: { agent: "notify", filter: "", recipients: [] } }),
  })
  .strict()
  .refine((c) => c.auth.tokens_file !== undefined || c.tls?.ca !== undefined, {
    message: "the console authenticates every request: set auth.tokens_file, or tls.ca with tls.roles for client certificates",
    path: ["auth", "tokens_file"],
  });

export type WebConfig = z.output<typeof WebConfigSchema>;

export function loadWebConfig(path: string | undefined): WebConfig {
  return path ? loadConfigFile(path, WebConfigSchema, "web config") : validateConfig({}, WebConfigSchema, "web config (no --config given)");
}

export function configuredBrokers(c: WebConfig): string[] {
  return typeof c.broker === "string" ? c.broker.split(",").map((s) => s.trim()).filter(Boolean) : (c.broker ?? []);
}
