import type { ProvisionDDL } from "../agents/provision/ddl.js";
import type { PuppetcaDDL } from "../agents/puppetca/ddl.js";
import type { ActionName, ActionOutput, AgentDDL, CallInput } from "../ddl/types.js";
import { noticeKey, type NodeRecord, type Stage } from "../protocol/provision-record.js";
import type { DeployLock } from "./deploy-lock.js";

// What each stage does, one entry per stage: the agent action it calls and what it records. The
// engine (engine.ts) decides when a step runs and what a failure costs; a step only does its one
// thing and throws StepError when it did not work. Every step is idempotent, so the engine may
// repeat one that was cut short. Agents are called through their DDLs (Caller): a misspelt action
// or a wrong input does not compile, and replies arrive checked against the declared outputs.

export class StepError extends Error {
  constructor(message: string, readonly data: Record<string, unknown> = {}) {
    super(message);
  }
}

export interface MasterInfo {
  identity: string;
  address: string;
  port?: number;
  facts: Record<string, unknown>;
}

/** An agent on one node, through its DDL: the reply's data, or StepError. */
export type Caller<D extends AgentDDL> = <A extends ActionName<D>>(action: A, input: CallInput<D, A>, opts?: { timeoutMs?: number }) => Promise<ActionOutput<D, A>>;

/** What a step may use: the node, its master, and the edge's helpers (all I/O goes through them). */
export interface StepContext {
  rec: NodeRecord;
  master: MasterInfo;
  lock: DeployLock;
  /** The node's provision agent (the config's target.agent). */
  node: Caller<ProvisionDDL>;
  /** One master's CA agent (the config's master.agent). */
  ca(master: string): Caller<PuppetcaDDL>;
  /** Clean the node's certificate on every master at once; names those that did not answer OK, and those skipped because they went away. */
  cleanEverywhere(certname: string): Promise<{ masters: number; bad: string[]; skipped?: string[]; firstError?: string }>;
  /** Send one notification (deduplicated by `key`). */
  notify(subject: string, message: string, key: string): Promise<void>;
  puppetTimeoutMs: number;
}

/** Runs the step; resolves with a note for the node's log. */
export type Step = (ctx: StepContext) => Promise<string | void>;

export const steps: Record<Stage, Step> = {
  async lock({ rec, lock }) {
    await lock.take(rec);
  },

  async set_puppet_host({ master, node }) {
    await node("set_puppet_host", master.port ? { ipaddress: master.address, port: master.port } : { ipaddress: master.address });
    return `${master.address}${master.port ? `:${master.port}` : ""}`;
  },

  // One signed request to every master at once (as mcprovision, clean everywhere: a node may have
  // been provisioned against another master before).
  async clean_cert({ rec, cleanEverywhere }) {
    const res = await cleanEverywhere(rec.identity);
    if (res.bad.length) throw new StepError(`clean of ${rec.identity} failed on ${res.bad.join(", ")}: ${res.firstError ?? "no reply"}`);
    return `on ${res.masters} master(s)${res.skipped?.length ? `; skipped ${res.skipped.join(", ")}, which no longer answer` : ""}`;
  },

  async request_csr({ rec, node }) {
    const data = await node("request_certificate", {});
    if (typeof data.fingerprint !== "string") throw new StepError("request_certificate did not return a fingerprint");
    rec.fingerprint = data.fingerprint;
    return data.fingerprint;
  },

  async sign_csr({ rec, master, ca }) {
    if (!rec.fingerprint) throw new StepError("no CSR fingerprint recorded; the request_csr step must run first");
    const onMaster = ca(master.identity);
    try {
      // with the pinned key: the CA signs only a CSR naming it (docs/security.md, the trust model)
      await onMaster("sign", { certname: rec.identity, fingerprint: rec.fingerprint, ...(rec.nodeKey ? { node_key: rec.nodeKey } : {}) });
    } catch (e) {
      // Idempotent after a crash between signing and recording it: never sign twice.
      const st = await onMaster("status", { certname: rec.identity }).catch(() => undefined);
      if (st?.state === "signed") return "already signed";
      throw e;
    }
    rec.signedBy = master.identity;
    return `by ${master.identity}`;
  },

  async bootstrap({ node, puppetTimeoutMs }) {
    await node("bootstrap_puppet", {}, { timeoutMs: puppetTimeoutMs });
  },

  async production({ node, puppetTimeoutMs }) {
    await node("run_puppet", {}, { timeoutMs: puppetTimeoutMs });
  },

  async daemonize({ node }) {
    await node("daemonize_puppet", {});
  },

  async unlock({ rec, lock }) {
    await lock.unlock(rec);
  },

  async disable({ node }) {
    await node("disable_provisioner", {});
  },

  async notify({ rec, master, notify }) {
    // a node that did not get the master its criteria picked says so, and why: the admins may want it moved
    const fb = rec.masterFallback && rec.masterFallback.from !== master.identity ? `\nIt fell back to ${master.identity}: ${rec.masterFallback.reason}.` : "";
    await notify(`Provisioned ${rec.identity} against ${master.identity}${fb ? ` (fell back from ${rec.masterFallback!.from})` : ""}`, `muster provisioned ${rec.identity} (${rec.nodeAddress}) against Puppet master ${master.identity} (${master.address}).${fb}`, noticeKey(rec, "provisioned"));
  },
};
