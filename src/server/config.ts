import { hostname } from "node:os";
import { z } from "zod";
import { loadConfigFile, validateConfig } from "../config/load.js";
import { isValidCollective, isValidIdentity } from "../protocol/subjects.js";
import { AuditConfigSchema } from "../security/audit.js";
import { PoliciesSchema } from "../security/policy.js";

// `muster server` configuration. Every key has a safe default, so an empty file is a working node.

const identity = z.string().refine(isValidIdentity, "identity may hold letters, digits, - _ . : @ only");
const collective = z.string().refine(isValidCollective, "collective names are letters, digits, - and _");

export const ServerConfigSchema = z
  .object({
    identity: identity.default(() => hostname()),
    collectives: z.array(collective).min(1).default(["muster"]),
    main_collective: collective.optional(),
    brokers: z.array(z.string().regex(/^(nats|tls):\/\//, "broker URLs look like nats://host:port")).default([]),
    facts: z
      .object({
        facter: z.boolean().default(true),
        facter_command: z.string().default("facter"),
        file: z.string().optional(),
        refresh_interval: z.number().positive().default(300),
        // Puppet's view of the facts changes with its runs: gathered after each run, and
        // otherwise this often (each gather starts the root helper and a Ruby process). Longer
        // than Puppet's runinterval (30 minutes), so a node whose Puppet runs gathers once a run
        gather_interval: z.number().positive().default(3600),
        extra: z.record(z.string(), z.unknown()).default({}),
      })
      .strict()
      .default({ facter: true, facter_command: "facter", refresh_interval: 300, gather_interval: 3600, extra: {} }),
    classes_file: z.string().optional(),
    agents: z
      .object({
        builtin: z.array(z.string()).optional(),
        directory: z.string().optional(),
      })
      .strict()
      .default({}),
    plugins: z.record(z.string(), z.record(z.string(), z.unknown())).default({}),
    registration: z
      .object({ interval: z.number().nonnegative().default(300), splay: z.boolean().default(true) })
      .strict()
      .default({ interval: 300, splay: true }),
    /**
     * Heartbeats (docs/fleet.md#health): every `interval` seconds the node writes its heartbeat to
     * the alive bucket, carrying the values of the data plugins in `status`; 0 turns them off.
     */
    heartbeat: z
      .object({ interval: z.number().nonnegative().max(3600).default(10), status: z.array(z.string().regex(/^[a-z][a-z0-9_]*$/, "a data plugin name")).default(["puppet"]) })
      .strict()
      .default({ interval: 10, status: ["puppet"] }),
    security: z
      .object({
        trusted_keys: z.array(z.object({ name: z.string(), key: z.string() }).strict()).default([]),
        trusted_keys_dir: z.string().optional(),
        trust_local_user: z.boolean().optional(),
        max_clock_skew: z.number().nonnegative().default(60),
        /** The node's own signing key (replies and events); created 0600 at first start. Default <config dir>/nodes/<identity>.key. */
        node_key: z.string().min(1).optional(),
      })
      .strict()
      .default({ trusted_keys: [], max_clock_skew: 60 }),
    log: z
      .object({ level: z.enum(["trace", "debug", "info", "warn", "error", "fatal"]).default("info"), file: z.string().optional() })
      .strict()
      .default({ level: "info" }),
    /**
     * The privileged helper's socket (docs/decisions/privileged-helper.md). Set, the agents ask it
     * for what needs root (Puppet runs, `puppet resource`, puppet.conf and hosts edits, the stage
     * fact file, the node's Puppet key) and the daemon runs unprivileged; unset, they act
     * directly, as a root daemon or the lab's nodes do.
     */
    privileged_helper: z.string().min(1).optional(),
    max_message_bytes: z.number().int().positive().max(64 * 1024 * 1024).default(1024 * 1024),
    /** Action policies by agent (docs/security.md); an agent without one allows every trusted caller. */
    policies: PoliciesSchema.default({}),
    /** More policies, one <agent>.yaml each. */
    policy_dir: z.string().optional(),
    /** Audit trail destinations; without them each request is logged at debug only. */
    audit: AuditConfigSchema.optional(),
    /**
     * TLS to the broker (docs/security.md#tls). `use_puppet_cert` makes the node's Puppet
     * certificate and key (ssldir and certname from plugins.provision, else plugins.puppet) its
     * client credential: what a provisioned node connects with.
     */
    tls: z
      .object({
        ca: z.string().min(1).optional(),
        cert: z.string().min(1).optional(),
        key: z.string().min(1).optional(),
        use_puppet_cert: z.boolean().default(false),
      })
      .strict()
      .refine((t) => !t.cert === !t.key, { message: "cert and key go together: set both or neither" })
      .refine((t) => !(t.use_puppet_cert && t.cert), { message: "use_puppet_cert replaces cert and key: set one or the other" })
      .optional(),
    /**
     * Provisioning isolation (docs/security.md#provisioning-isolation): until the provision agent
     * is disabled, the node joins only `collective`, hosts only the provision agent (with
     * discovery and rpcutil), answers only `callers`, and connects with the restricted `cert`/`key`.
     * Once provisioned it reconnects on its own with its production credential (`tls`).
     */
    provisioning: z
      .object({
        collective: collective.default("provisioning"),
        callers: z.array(z.string().min(1)).min(1, "name the provisioner's caller name (its key's name), e.g. [provisioner]"),
        cert: z.string().min(1).optional(),
        key: z.string().min(1).optional(),
      })
      .strict()
      .refine((t) => !t.cert === !t.key, { message: "cert and key go together: set both or neither" })
      .optional(),
  })
  .strict()
  .superRefine((c, ctx) => {
    if (c.provisioning && c.collectives.includes(c.provisioning.collective)) {
      ctx.addIssue({ code: "custom", path: ["provisioning", "collective"], message: `must differ from the production collectives (${c.collectives.join(", ")}): isolation means a provisioning node shares no subjects with the fleet` });
    }
  });

export type ServerConfig = z.output<typeof ServerConfigSchema>;

export function loadServerConfig(path: string | undefined, overrides: Partial<Record<string, unknown>> = {}): ServerConfig {
  if (!path) return validateConfig(overrides, ServerConfigSchema, "server config");
  const cfg = loadConfigFile(path, ServerConfigSchema, "server config");
  if (Object.keys(overrides).length === 0) return cfg;
  // command-line overrides (--identity) obey the same rules as the file
  return validateConfig({ ...cfg, ...overrides }, ServerConfigSchema, `server config ${path} with command-line overrides`);
}

export function mainCollective(cfg: Pick<ServerConfig, "collectives" | "main_collective">): string {
  return cfg.main_collective ?? cfg.collectives[0] ?? "muster";
}
