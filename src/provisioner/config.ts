import { hostname } from "node:os";
import { z } from "zod";
import { tlsConfigSchema } from "../config/tls.js";
import { loadConfigFile } from "../config/load.js";
import { didYouMean } from "../suggest.js";
import { parseRecipient } from "../agents/notify/recipient.js";
import { MusterError } from "../errors.js";
import { dataPluginCatalogue } from "../agents/data-ddls.js";
import { FilterError, parseCompound } from "../filter/index.js";
import { DEFAULT_STATE_BUCKET } from "../protocol/buckets.js";

// mcprovision's YAML, accepted unchanged (logfile, loglevel, daemonize, sleeptime, steps, master,
// target, notify), plus muster's additions, each with a safe default (docs/provisioner.md).
// Unknown keys are refused, naming the nearest valid key: a typo must not silently switch a step off.

/** A strict object whose unknown keys are reported with the nearest valid one. */
function strict<S extends z.ZodRawShape>(what: string, shape: S) {
  const known = Object.keys(shape);
  return z.strictObject(shape, {
    error: (iss) => (iss.code === "unrecognized_keys" ? iss.keys.map((k) => unknownKey(what, k, known)).join("; ") : undefined),
  });
}

function unknownKey(what: string, key: string, known: string[]): string {
  const hint = didYouMean(key, known);
  // Without a close match, list the choices when there are few enough to read.
  const choices = !hint && known.length <= 12 ? ` (valid: ${known.join(", ")})` : "";
  return `unknown ${what} ${JSON.stringify(key)}${hint}${choices}`;
}

const stepShape = {
  lock: z.boolean().default(false),
  // mcprovision's own switch for releasing the lock; when absent it follows `lock`, so a lock
  // muster takes is also released unless the operator asks to keep it (unlock: false).
  unlock: z.boolean().optional(),
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
};

const Steps = strict("step", stepShape).transform((s) => ({ ...s, unlock: s.unlock ?? s.lock }));

const collectiveName = z.string().regex(/^[A-Za-z0-9_-]+$/, "collective names are letters, digits, - and _");

function role(defaults: { filter: string; agent: string }) {
  return {
    /** Where this role's nodes are; default: the top-level collective. Waiting nodes under provisioning isolation are in `provisioning`. */
    collective: collectiveName.optional(),
    filter: z.string().default(defaults.filter),
    agent: z.string().default(defaults.agent),
    ipaddress_fact: z.string().default("ipaddress"),
  };
}

/** The KV bucket of node records, unless state_bucket says otherwise. */
export { DEFAULT_STATE_BUCKET };

export const ProvisionerConfigSchema = strict("key", {
  logfile: z.string().optional(),
  loglevel: z.enum(["trace", "debug", "info", "warn", "error", "fatal"]).default("info"),
  daemonize: z.boolean().default(false),
  sleeptime: z.number().positive().default(5),
  steps: Steps.prefault({}),
  master: strict("master key", {
    ...role({ filter: "", agent: "puppetca" }),
    criteria: z.array(z.string()).default([]),
    /**
     * muster addition: act on a master's reply (its facts, a certificate signed or cleaned) only
     * when the node-key directory names the key that signed it. Off by default: a master installed
     * before its key was enrolled still works; a site whose masters are enrolled turns it on.
     */
    require_verified: z.boolean().default(false),
  }).prefault({}),
  target: strict("target key", role({ filter: "provision().disabled=false and provision().locked=false", agent: "provision" })).prefault({}),
  notify: strict("notify key", { collective: collectiveName.optional(), filter: z.string().default(""), agent: z.string().default("notify"), targets: z.array(z.string()).default([]) }).prefault({}),

  // ---- muster additions ----
  /** Who this provisioner is: owner of node locks and KV claims. Stable across restarts so a restarted one resumes its own work. */
  id: z.string().default(() => `provisioner@${hostname()}`),
  broker: z.union([z.string(), z.array(z.string())]).optional(),
  /** TLS to the broker (docs/security.md#tls); MUSTER_TLS_* when absent. */
  tls: tlsConfigSchema(z).optional(),
  /** The collective of the masters and notifiers, and of the targets unless target.collective says otherwise. */
  collective: z.string().default("muster"),
  concurrency: z.number().int().positive().default(10),
  per_master_limit: z.number().int().positive().default(5),
  retries: strict("retries key", { attempts: z.number().int().positive().default(3), backoff: z.number().nonnegative().default(2), max_backoff: z.number().positive().default(60) }).prefault({}),
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
  metrics: strict("metrics key", { port: z.number().int().nonnegative(), host: z.string().default("127.0.0.1") }).optional(),
  pidfile: z.string().optional(),
  /**
   * A node that goes away while provisioned (docs/provisioner.md#machines-that-die): while a step
   * waits on it, it is asked rpcutil#ping every check_interval seconds (0: never); after `checks`
   * unanswered in a row it counts as gone, its wait is abandoned and its slot freed; it is
   * provisioned on from that step when it comes back, and failed if it is not back within timeout.
   */
  gone: strict("gone key", { check_interval: z.number().nonnegative().default(5), checks: z.number().int().positive().default(3), timeout: z.number().positive().default(3600) }).prefault({}),
  /**
   * Seconds a node waits for a Puppet master that does not answer (none at all, or its own gone
   * mid-provisioning) before it fails; 0: wait forever. A waiting node holds no slot and spends no
   * attempt (docs/provisioner.md#masters-that-do-not-answer).
   */
  master_wait: z.number().nonnegative().default(3600),
  /** Seconds SIGTERM waits for in-flight steps before abandoning them (locks are released either way). */
  shutdown_grace: z.number().nonnegative().default(30),
  /** Where DDLs of your own data plugins are (`<dir>/data/<name>.json`), for checking the role filters. */
  ddl_directories: z.array(z.string()).default([]),
});

export type ProvisionerConfig = z.output<typeof ProvisionerConfigSchema>;

/**
 * notify.targets the notifier cannot deliver to, one message each naming the target and the
 * schemes it can deliver. The provisioner sends targets as `recipients` of notify#send, which
 * refuses the whole request for one bad recipient: caught here, at start-up, not at the first node.
 */
export function undeliverableTargets(cfg: Pick<ProvisionerConfig, "notify">): string[] {
  const out: string[] = [];
  cfg.notify.targets.forEach((target, i) => {
    try {
      parseRecipient(target);
    } catch (e) {
      // parseRecipient's message repeats the target: keep only why, which names the schemes.
      const why = (e as Error).message.replace(/^invalid recipient "(?:[^"\\]|\\.)*": /, "");
      out.push(`notify.targets[${i}] ${JSON.stringify(target)} cannot be delivered: ${why}`);
    }
  });
  return out;
}

/**
 * The role filters checked as the CLI checks -S: syntax, and data plugins and fields the
 * provisioner knows (built-in, or DDLs in ddl_directories). A typo such as provision().lockd
 * would otherwise match no node, and the provisioner would wait for ever without saying why.
 */
export function filterProblems(cfg: Pick<ProvisionerConfig, "master" | "target" | "notify" | "ddl_directories">): string[] {
  const dataPlugins = dataPluginCatalogue(cfg.ddl_directories);
  const out: string[] = [];
  for (const role of ["master", "target", "notify"] as const) {
    const text = cfg[role].filter;
    if (!text) continue;
    try {
      parseCompound(text, dataPlugins);
    } catch (e) {
      if (!(e instanceof FilterError)) throw e;
      out.push(`${role}.filter: ${e.render().replace(/\n/g, "\n  ")}`);
    }
  }
  return out;
}

/**
 * Reads and checks the config. An undeliverable notify target is fatal only when the notify step
 * is on (every node would fail at its last step); otherwise the daemon warns once at start-up.
 */
export function loadProvisionerConfig(path: string): ProvisionerConfig {
  const cfg = loadConfigFile(path, ProvisionerConfigSchema, "provisioner config");
  const badFilters = filterProblems(cfg);
  if (badFilters.length) throw new MusterError("MUSTER_CONFIG_INVALID", `provisioner config ${path} is invalid:\n${badFilters.map((b) => `  ${b}`).join("\n")}`);
  const bad = undeliverableTargets(cfg);
  if (bad.length && cfg.steps.notify) {
    throw new MusterError("MUSTER_CONFIG_INVALID", `provisioner config ${path} is invalid (steps.notify is on):\n${bad.map((b) => `  ${b}`).join("\n")}\nFix or remove the target, or set steps.notify: false.`);
  }
  return cfg;
}
