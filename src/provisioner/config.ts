import { hostname } from "node:os";
import { z } from "zod";
import { TlsConfigSchema } from "../broker/connect.js";
import { loadConfigFile } from "../config/load.js";

// mcprovision's YAML, accepted unchanged (logfile, loglevel, daemonize, sleeptime, steps, master,
// target, notify), plus muster's additions, each with a safe default (docs/provisioner.md).

const Steps = z
  .object({
    lock: z.boolean().default(false),
    set_puppet_hostname: z.boolean().default(false),
    clean_node_certname: z.boolean().default(false),
    send_node_csr: z.boolean().default(false),
    sign_node_csr: z.boolean().default(false),
    puppet_bootstrap_stage: z.boolean().default(false),
    puppet_final_run: z.boolean().default(false),
    puppet_daemonize: z.boolean().default(false),
    notify: z.boolean().default(false),
    // muster addition: turn the provision agent off once the node is done (mcprovision did this in the agent)
    disable_provisioner: z.boolean().default(true),
  })
  .strict();

const Role = z
  .object({
    /** Where this role's nodes are; default: the top-level collective. Waiting nodes under provisioning isolation are in `provisioning`. */
    collective: z.string().regex(/^[A-Za-z0-9_-]+$/, "collective names are letters, digits, - and _").optional(),
    filter: z.string().default(""),
    agent: z.string().default("provision"),
    ipaddress_fact: z.string().default("ipaddress"),
  })
  .strict();

/** The KV bucket of node records, unless state_bucket says otherwise. */
export const DEFAULT_STATE_BUCKET = "muster_provision";

export const ProvisionerConfigSchema = z
  .object({
    logfile: z.string().optional(),
    loglevel: z.enum(["trace", "debug", "info", "warn", "error", "fatal"]).default("info"),
    daemonize: z.boolean().default(false),
    sleeptime: z.number().positive().default(5),
    steps: Steps.default(Steps.parse({})),
    master: Role.extend({ criteria: z.array(z.string()).default([]), agent: z.string().default("puppetca") }).default({ filter: "", agent: "puppetca", ipaddress_fact: "ipaddress", criteria: [] }),
    target: Role.default({ filter: "provision().disabled=false and provision().locked=false", agent: "provision", ipaddress_fact: "ipaddress" }),
    notify: z
      .object({ collective: z.string().regex(/^[A-Za-z0-9_-]+$/, "collective names are letters, digits, - and _").optional(), filter: z.string().default(""), agent: z.string().default("notify"), targets: z.array(z.string()).default([]) })
      .strict()
      .default({ filter: "", agent: "notify", targets: [] }),

    // ---- muster additions ----
    /** Who this provisioner is: owner of node locks and KV claims. Stable across restarts so a restarted one resumes its own work. */
    id: z.string().default(() => `provisioner@${hostname()}`),
    broker: z.union([z.string(), z.array(z.string())]).optional(),
    /** TLS to the broker (docs/security.md#tls); MUSTER_TLS_* when absent. */
    tls: TlsConfigSchema.optional(),
    /** The collective of the masters and notifiers, and of the targets unless target.collective says otherwise. */
    collective: z.string().default("muster"),
    concurrency: z.number().int().positive().default(10),
    per_master_limit: z.number().int().positive().default(5),
    retries: z
      .object({ attempts: z.number().int().positive().default(3), backoff: z.number().nonnegative().default(2), max_backoff: z.number().positive().default(60) })
      .strict()
      .default({ attempts: 3, backoff: 2, max_backoff: 60 }),
    lock_lease: z.number().int().positive().default(600),
    bootstrap_environment: z.string().default("bootstrap"),
    production_environment: z.string().default("production"),
    stage_fact: z.string().default("lifecycle_stage"),
    state_bucket: z.string().regex(/^[A-Za-z0-9_-]+$/).default(DEFAULT_STATE_BUCKET),
    /** Replicas of the state bucket when it is created: 3 on a clustered broker so losing one server loses no state. */
    state_replicas: z.number().int().min(1).max(5).default(1),
    discovery_timeout: z.number().positive().default(2),
    /** Seconds to wait for a Puppet run (bootstrap or production) to answer. */
    puppet_timeout: z.number().positive().default(900),
    /** Seconds to wait for any other step's answer before retrying it (a request lost in a broker failover costs this). */
    step_timeout: z.number().positive().default(60),
    metrics: z.object({ port: z.number().int().nonnegative(), host: z.string().default("127.0.0.1") }).strict().optional(),
    pidfile: z.string().optional(),
    /** Seconds SIGTERM waits for in-flight steps before abandoning them (locks are released either way). */
    shutdown_grace: z.number().nonnegative().default(30),
  })
  .strict();

export type ProvisionerConfig = z.output<typeof ProvisionerConfigSchema>;

export function loadProvisionerConfig(path: string): ProvisionerConfig {
  return loadConfigFile(path, ProvisionerConfigSchema, "provisioner config");
}
