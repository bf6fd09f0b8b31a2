import { Stages, type NodeRecord, type Stage } from "../protocol/provision-record.js";
import type { ProvisionerConfig } from "./config.js";

// Which of the record's stages (protocol/provision-record.ts) run, and how they are paced: pure
// policy from the config. Each step is idempotent, so redoing a step cut short is safe.

/** Which steps run, from the mcprovision `steps` switches. Certificate steps are skipped when the node has a cert. */
export function enabledStages(steps: ProvisionerConfig["steps"]): Stage[] {
  const on: Record<Stage, boolean> = {
    lock: steps.lock,
    set_puppet_host: steps.set_puppet_hostname,
    clean_cert: steps.clean_node_certname,
    request_csr: steps.send_node_csr,
    sign_csr: steps.sign_node_csr,
    bootstrap: steps.puppet_bootstrap_stage,
    production: steps.puppet_final_run,
    daemonize: steps.puppet_daemonize,
    disable: steps.disable_provisioner,
    unlock: steps.unlock,
    notify: steps.notify,
  };
  return Stages.filter((s) => on[s]);
}

/** Stages that take seconds to minutes: the record names them before they start, for status displays. */
export const SLOW_STAGES: ReadonlySet<Stage> = new Set(["request_csr", "bootstrap", "production", "daemonize"]);

export const CERT_STAGES: ReadonlySet<Stage> = new Set(["clean_cert", "request_csr", "sign_csr"]);

/** Stages that wait on the node itself (the others talk to the masters or the notifier): its liveness is checked meanwhile. */
export const NODE_STAGES: ReadonlySet<Stage> = new Set(["lock", "set_puppet_host", "request_csr", "bootstrap", "production", "daemonize", "unlock", "disable"]);

/**
 * Stages that need the node's Puppet master to answer (the provisioner asks its CA, or the node's
 * Puppet talks to it): when one fails and the master no longer answers discovery, the failure is
 * the master's, not the node's (docs/provisioner.md#masters-that-do-not-answer).
 */
export const MASTER_STAGES: ReadonlySet<Stage> = new Set(["clean_cert", "request_csr", "sign_csr", "bootstrap", "production"]);

/** The stages still to run after `done` (the last completed one). */
export function remainingStages(enabled: readonly Stage[], done: Stage | undefined): Stage[] {
  if (!done) return [...enabled];
  const idx = Stages.indexOf(done);
  return enabled.filter((s) => Stages.indexOf(s) > idx);
}

/**
 * The notice is tried longer than a step: a lost one is never sent (the node is provisioned and
 * disabled, nothing retries it), and what makes it fail is most often passing, a broker failing
 * over or the notifier restarting. With the default backoff (2 s doubling, at most 60 s) 8 tries
 * span about 3 minutes.
 */
export const NOTIFY_ATTEMPTS = 8;

/** How many tries a stage gets: the policy's, and NOTIFY_ATTEMPTS at least for the notice. */
export const attemptsFor = (stage: Stage | undefined, attempts: number) => (stage === "notify" ? Math.max(attempts, NOTIFY_ATTEMPTS) : attempts);

/** Delay before retry `attempt` (1-based): exponential from `base`, capped, with ±20% jitter. */
export function backoffMs(attempt: number, baseSeconds: number, maxSeconds: number, rand = Math.random): number {
  const raw = Math.min(maxSeconds, baseSeconds * 2 ** (attempt - 1));
  return Math.round(raw * 1000 * (0.8 + 0.4 * rand()));
}

const DISABLE = Stages.indexOf("disable");

/**
 * The node switched provisioning off (its disable step completed): under provisioning isolation
 * it restarts onto its Puppet certificate and leaves the provisioning collective for good, and
 * what remains (notify) needs nothing of it.
 */
export function disabledAlready(rec: Pick<NodeRecord, "stage">): boolean {
  return rec.stage !== undefined && Stages.indexOf(rec.stage) >= DISABLE;
}

/** A node already disabled (its master recorded) is provisioned: what remains (notify) needs nothing from it. */
export const pastDisable = (rec: Pick<NodeRecord, "stage" | "master" | "masterAddress">): boolean => disabledAlready(rec) && rec.master !== undefined && rec.masterAddress !== undefined;

/** Whether `stage` (after disable: notify) needs nothing of the node, or the node is disabled already: then it is never gone. */
export function needsNothingOfNode(stage: Stage | undefined, rec: Pick<NodeRecord, "stage">): boolean {
  return disabledAlready(rec) || (stage !== undefined && Stages.indexOf(stage) > DISABLE);
}

/**
 * Whether the node stopping while `stage` runs is the restart its disable step causes, not the
 * node going away: during disable (the node restarts right after its reply, and its shutdown
 * event may overtake it) and after it. Such a node is never made gone by its own restart.
 */
export function restartExpected(stage: Stage | undefined, rec: Pick<NodeRecord, "stage">): boolean {
  return stage === "disable" || needsNothingOfNode(stage, rec);
}
