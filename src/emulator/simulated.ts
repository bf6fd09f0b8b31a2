import { createHash, randomBytes } from "node:crypto";
import type { AgentFactory } from "../agent/catalogue.js";
import { coreAgentFactories } from "../agents/builtin.js";
import { notifyDDL } from "../agents/notify/ddl.js";
import { provisionDDL } from "../agents/provision/ddl.js";
import { puppetcaDDL } from "../agents/puppetca/ddl.js";
import { RpcError } from "../errors.js";
import { Status } from "../protocol/status.js";
import { defineAgent } from "../agent/agent.js";

// Simulated provision, puppetca and notify agents for emulated fleets (benchmarks, demos): the real
// DDLs (so requests are validated exactly as on real nodes) with Puppet's work replaced by timed
// waits and an in-process CA that enforces the same fingerprint rule. One process only.

export interface SimulationOptions {
  /** Duration of one simulated Puppet run, ms: uniformly in [min, max]. */
  puppetRunMs: [number, number];
  /** Duration of a simulated CSR submission, ms. */
  csrMs: number;
  /** Failure injection: return true to make this node's action fail (a broken manifest, say). */
  fail?: (identity: string, action: string) => boolean;
  /** Delay injection, ms before this node answers this action: past the caller's timeout it is a reply lost in transit. */
  stallMs?: (identity: string, action: string) => number;
  /**
   * Whether the Puppet master at `address` (set_puppet_host's) can be reached from the node: when
   * false, the node's CSR submission and Puppet runs fail as Puppet's do against a master that is
   * down (a run fails at its end if the master went away meanwhile). Default: always.
   */
  masterUp?: (address: string) => boolean;
  /** Delay injection, ms between a master signing `certname` and its reply: past the caller's timeout it is a master that died before it answered. */
  signReplyDelayMs?: (certname: string) => number;
  /** Where a node's CSR goes when the CA lives in another process (default: this process's `ca`), as Puppet submits it over the network. */
  submitCsr?: (identity: string, fingerprint: string, nodeKey: string | undefined) => Promise<void> | void;
  /** Called once a node's provisioning is disabled (its reply on its way), as a real node then leaves for production. */
  onDisabled?: (identity: string) => void;
}

interface SimCert {
  state: "requested" | "signed" | "revoked";
  fingerprint: string;
  /** The node key the simulated CSR names (the requesting node's own). */
  nodeKey?: string;
  signedBy?: string;
  signings: number;
}

export class SimulatedCA {
  readonly certs = new Map<string, SimCert>();
  notifications = 0;
  /** dedupe_keys already delivered (one fleet process: one notifier's memory). */
  readonly notified = new Set<string>();
  /** What each delivered notice said, by dedupe_key: what the admins read. */
  readonly notices = new Map<string, { subject: string; message: string }>();
  /** Certificates signed more than once (must stay 0). */
  get doubleSigned(): number {
    return [...this.certs.values()].filter((c) => c.signings > 1).length;
  }
}

const wait = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      reject(new RpcError(Status.Aborted, "aborted"));
    }, { once: true });
  });

function fingerprint(seed: string): string {
  return createHash("sha256").update(seed).digest("hex").toUpperCase().match(/../g)!.join(":");
}

/** A CSR arriving at the simulated CA: pending, unless the name's certificate is signed already. */
export function submitCsr(ca: SimulatedCA, identity: string, fingerprint: string, nodeKey: string | undefined): void {
  if (ca.certs.get(identity)?.state !== "signed") ca.certs.set(identity, { state: "requested", fingerprint, signings: 0, nodeKey });
}

export function simulatedFactories(ca: SimulatedCA, opt: SimulationOptions): Record<string, AgentFactory> {
  const runMs = () => opt.puppetRunMs[0] + Math.random() * (opt.puppetRunMs[1] - opt.puppetRunMs[0]);
  const provision: AgentFactory = (d) => {
    let lock: { owner: string; expires: number } | undefined;
    let disabled = false;
    let csr: string | undefined;
    /** The master the node's Puppet talks to (set_puppet_host). */
    let server: { address: string; port: number } | undefined;
    const reachMaster = (what: string) => {
      if (server && opt.masterUp && !opt.masterUp(server.address)) {
        throw new RpcError(Status.Aborted, `${what} failed (exit 1): Failed to open TCP connection to ${server.address}:${server.port} (Connection refused - connect(2) for "${server.address}" port ${server.port})`, { exitcode: 1 });
      }
    };
    const enabled = () => {
      if (disabled) throw new RpcError(Status.Aborted, "provisioning is disabled on this node", { disabled: true });
    };
    const run = async (which: "bootstrap" | "production", signal: AbortSignal) => {
      enabled();
      if (opt.fail?.(d.identity, which === "bootstrap" ? "bootstrap_puppet" : "run_puppet")) {
        throw new RpcError(Status.Aborted, `puppet ${which} run failed (exit 4): 1 resource(s) failed: File[/simulated]`, { exitcode: 4, failed_resources: [{ resource: "File[/simulated]" }] });
      }
      reachMaster(`puppet ${which} run`);
      const ms = runMs();
      await wait(ms, signal);
      reachMaster(`puppet ${which} run`); // the master went away during the run
      return { exitcode: 2, changed: true, environment: which, stage: which, resources: {}, failed_resources: [], errors: [], retryable: false, duration: ms / 1000, output: "" };
    };
    return defineAgent({
      ddl: provisionDDL,
      dataPlugins: [{ name: "provision", description: "simulated provisioning state", query: () => ({ locked: !!lock && lock.expires > Date.now(), disabled }) }],
      isActive: () => !disabled,
      actions: {
        set_puppet_host: (i) => {
          enabled();
          server = { address: i.ipaddress, port: i.port ?? 8140 };
          return { server: i.ipaddress, serverport: i.port ?? null, puppet_conf: "(simulated)", hosts_file: null };
        },
        has_cert: async (_i, ctx) => {
          const stall = opt.stallMs?.(d.identity, "has_cert") ?? 0;
          if (stall > 0) await wait(stall, ctx.signal);
          return { has_cert: ca.certs.get(d.identity)?.state === "signed", certname: d.identity, fingerprint: null };
        },
        request_certificate: async (_i, ctx) => {
          enabled();
          await wait(opt.csrMs, ctx.signal);
          reachMaster("puppet ssl submit_request");
          csr ??= fingerprint(`${d.identity}:${randomBytes(8).toString("hex")}`);
          if (opt.submitCsr) await opt.submitCsr(d.identity, csr, ctx.nodeKey);
          else submitCsr(ca, d.identity, csr, ctx.nodeKey);
          return { certname: d.identity, fingerprint: csr, submitted: true };
        },
        bootstrap_puppet: (_i, ctx) => run("bootstrap", ctx.signal),
        run_puppet: (_i, ctx) => run("production", ctx.signal),
        daemonize_puppet: () => (enabled(), { pid: 1, already_running: false }),
        lock_deploy: (i) => {
          enabled();
          const now = Date.now();
          if (lock && lock.expires > now && lock.owner !== i.owner) throw new RpcError(Status.Aborted, `locked by ${lock.owner}`, { locked: true, owner: lock.owner, expires: lock.expires });
          const taken = !lock ? "new" : lock.owner === i.owner ? "renewed" : "expired";
          lock = { owner: i.owner, expires: now + (i.lease ?? 600) * 1000 };
          return { locked: true, owner: i.owner, expires: lock.expires, taken };
        },
        unlock_deploy: (i) => {
          if (lock && i.owner && lock.owner !== i.owner && !i.force) throw new RpcError(Status.Aborted, `locked by ${lock.owner}`);
          const previous = lock?.owner ?? null;
          lock = undefined;
          return { unlocked: previous !== null, previous_owner: previous };
        },
        is_locked: () => ({ locked: !!lock && lock.expires > Date.now(), owner: lock?.owner ?? null, expires: lock?.expires ?? null }),
        disable_provisioner: () => {
          disabled = true;
          if (opt.onDisabled) setImmediate(() => opt.onDisabled?.(d.identity)); // after this request, as a real server switches
          return { disabled: true, disable_file: "(simulated)" };
        },
        is_disabled: () => ({ disabled, since: null, reason: null }),
      },
    });
  };
  const puppetca: AgentFactory = (d) =>
    defineAgent({
      ddl: puppetcaDDL,
      actions: {
        list: () => ({ requests: [...ca.certs].filter(([, c]) => c.state === "requested").map(([name, c]) => ({ name, fingerprint: c.fingerprint })), signed: [...ca.certs].filter(([, c]) => c.state === "signed").map(([name, c]) => ({ name, fingerprint: c.fingerprint })) }),
        sign: async (i, ctx) => {
          const c = ca.certs.get(i.certname);
          if (!c || c.state !== "requested") throw new RpcError(Status.Aborted, `no pending request for ${i.certname}`);
          if (c.fingerprint !== i.fingerprint) throw new RpcError(Status.Aborted, `fingerprint mismatch for ${i.certname}`);
          // as the real CA: the CSR must name the node key the provisioner pinned (puppet/ca.ts vet)
          if (i.node_key !== undefined && c.nodeKey !== i.node_key) throw new RpcError(Status.Aborted, `node key mismatch for ${i.certname}: the CSR names ${c.nodeKey ?? "no key"}, ${i.node_key} is pinned`, { reason: "node_key_mismatch" });
          c.state = "signed";
          c.signedBy = d.identity;
          c.signings++;
          const delay = opt.signReplyDelayMs?.(i.certname) ?? 0;
          if (delay > 0) await wait(delay, ctx.signal);
          return { certname: i.certname, state: "signed", fingerprint: c.fingerprint };
        },
        clean: (i) => {
          const c = ca.certs.get(i.certname);
          ca.certs.delete(i.certname);
          return { certname: i.certname, cleaned: c !== undefined, revoked: c?.state === "signed", previous_state: c?.state ?? null };
        },
        // a simulated master sends to no PuppetDB, as a master without puppetdb.conf
        deactivate: (i) => ({ certname: i.certname, puppetdb: null, deactivated: false, previous_state: null }),
        revoke: (i) => {
          const c = ca.certs.get(i.certname);
          const was = c?.state ?? null;
          if (c?.state === "signed") c.state = "revoked";
          return { certname: i.certname, revoked: was === "signed", previous_state: was, serial: null };
        },
        status: (i) => {
          const c = ca.certs.get(i.certname);
          return { certname: i.certname, state: c?.state ?? "unknown", fingerprint: c?.fingerprint ?? null };
        },
      },
    });
  const notify: AgentFactory = () =>
    defineAgent({
      ddl: notifyDDL,
      // dedupe_key as the real agent keeps it: a repeat is acknowledged, not counted
      actions: {
        send: (i) => {
          const duplicate = i.dedupe_key !== undefined && ca.notified.has(i.dedupe_key);
          if (i.dedupe_key !== undefined) ca.notified.add(i.dedupe_key);
          if (!duplicate) ca.notifications++;
          if (!duplicate && i.dedupe_key !== undefined) ca.notices.set(i.dedupe_key, { subject: i.subject, message: i.message });
          return { duplicate, delivered: duplicate ? 0 : (i.recipients ?? []).length || 1, failed: 0, results: [] };
        },
      },
    });
  return { ...coreAgentFactories, provision, puppetca, notify };
}
