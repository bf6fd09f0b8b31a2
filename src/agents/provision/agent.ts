import { existsSync } from "node:fs";
import { RpcError } from "../../errors.js";
import { Status } from "../../protocol/status.js";
import { defineAgent, type ActionContext, type Agent, type DataPlugin } from "../../agent/agent.js";
import { bootstrapPuppet } from "./actions/bootstrap_puppet.js";
import { daemonizePuppet } from "./actions/daemonize_puppet.js";
import { disableProvisioner } from "./actions/disable_provisioner.js";
import { hasCert } from "./actions/has_cert.js";
import { isDisabled } from "./actions/is_disabled.js";
import { isLocked } from "./actions/is_locked.js";
import { lockDeploy } from "./actions/lock_deploy.js";
import { requestCertificate } from "./actions/request_certificate.js";
import { runPuppet } from "./actions/run_puppet.js";
import { setPuppetHost } from "./actions/set_puppet_host.js";
import { unlockDeploy } from "./actions/unlock_deploy.js";
import { provisionDDL, type ProvisionDDL } from "./ddl.js";
import { Mutex, readLock, resolveSettings, type ProvisionRuntime, type ProvisionSettings } from "./state.js";
import type { NodeOps } from "../../agent/node-ops.js";
import { directOps } from "../../puppet/node-ops.js";

// The provision agent: the node side of the provisioner (mcprovision's agent).
//
// Settings (`plugins.provision` in the server config, passed as ctx.config; also given to
// createProvisionAgent({config}) so the data plugin and isActive() know the paths before any
// request arrives). Every key is optional; strings from config files are coerced:
//
//   puppet_bin              "puppet"                 the puppet binary
//   confdir                 "/etc/puppet"            the node's Puppet confdir (puppet.conf lives here)
//   vardir                  "/var/cache/puppet"      Puppet vardir (state/, last_run_report.yaml)
//   ssldir                  "/var/lib/puppet/ssl"    Puppet ssldir (keys, CSR, certificate)
//   logdir, rundir, publicdir  <vardir>/log, <vardir>/run, <vardir>/public
//   certname                ctx.identity             the node's Puppet certname
//   server, serverport      (puppet.conf)            override the master for every puppet command
//   lock_file               "/var/lib/muster/provision/deploy.lock"   deploy lock (JSON: owner, expires)
//   disable_file            "/var/lib/muster/provision/disabled"      exists once provisioning is done
//   lock_lease              600                      seconds a deploy lock lasts unless renewed
//   bootstrap_environment   "bootstrap"              environment of bootstrap_puppet
//   production_environment  "production"             environment of run_puppet
//   hosts_file              "/etc/hosts"             written only when use_hosts_file is true
//   use_hosts_file          false                    set_puppet_host maps `puppet` to the master in
//                                                    hosts_file and writes `server = puppet`
//   stage_fact              "lifecycle_stage"        fact (FACTER_<name>) set to bootstrap/production
//   stage_fact_file         "/etc/facter/facts.d/muster_<stage_fact>.yaml"  Facter fact file that
//                                                    makes every later run production: written once the
//                                                    bootstrap run succeeded (docs/puppet.md); .rb for a
//                                                    custom fact on Puppet's factpath (the lab: <vardir>/facts)
//   run_timeout             840                      seconds a Puppet run may take (the DDL allows 900)
//   export_facts            []                       facts of the node daemon (facts file, facter) that
//                                                    Puppet runs see too, as FACTER_<name>: e.g. facts
//                                                    only cloud metadata or the operator's file know
//
// Once disabled (disable_provisioner), the agent stops offering itself (isActive() is false)
// and refuses the actions that change the node (set_puppet_host, request_certificate,
// bootstrap_puppet, run_puppet, daemonize_puppet, lock_deploy); the read-only ones still answer.
// Remove the disable file and restart the server to provision the node again.

export interface ProvisionDeps {
  /** `plugins.provision` settings; ctx.config overlays them per request. */
  config?: Record<string, unknown>;
  /** The node's identity, the certname default for the data plugin before any request. */
  identity?: string;
  /** Clock (ms since epoch) for lock expiry. */
  now?: () => number;
  /**
   * Called once when this agent marks the node provisioned (disable_provisioner), while that
   * request is still in flight: a node under provisioning isolation switches to production on it.
   */
  onProvisioned?: () => void;
  /** What needs root (Puppet, puppet.conf, the hosts and stage fact files): default in process. */
  ops?: NodeOps;
}

/** Whether provisioning has finished on this node: the marker disable_provisioner writes exists. */
export function isProvisioned(config: Record<string, unknown>, identity: string): boolean {
  return existsSync(resolveSettings(config, identity).disableFile);
}

export type ProvisionAgent = Agent<ProvisionDDL>;

export function createProvisionAgent(deps: ProvisionDeps = {}): ProvisionAgent {
  const now = deps.now ?? Date.now;
  // This instance's state: the latest settings seen, the lock mutex, the disabled flag.
  let known: Record<string, unknown> = { ...(deps.config ?? {}) };
  let knownIdentity = deps.identity ?? "localhost";
  let disabled = false;

  const rt: ProvisionRuntime = {
    now,
    ops: deps.ops ?? directOps(),
    lockMutex: new Mutex(),
    settings(ctx: ActionContext): ProvisionSettings {
      known = { ...(deps.config ?? {}), ...ctx.config };
      knownIdentity = ctx.identity;
      return resolveSettings(known, ctx.identity);
    },
    ensureEnabled(s: ProvisionSettings): void {
      if (disabled || existsSync(s.disableFile)) {
        throw new RpcError(Status.Aborted, `provisioning is disabled on this node (${s.disableFile} exists); remove it and restart the server to provision again`, {
          disabled: true,
        });
      }
    },
    markDisabled(): void {
      const first = !disabled;
      disabled = true;
      if (first) deps.onProvisioned?.();
    },
  };

  const current = (identity?: string): ProvisionSettings | undefined => {
    try {
      return resolveSettings(known, identity ?? knownIdentity);
    } catch {
      return undefined;
    }
  };

  const dataPlugin: DataPlugin = {
    name: "provision",
    description: "Provisioning state of the node: locked (deploy lock held and unexpired), disabled (provisioning finished)",
    query(_argument, { metadata }) {
      const s = current(metadata.identity);
      if (!s) return undefined;
      const lock = readLock(s.lockFile);
      return { locked: lock !== undefined && lock.expires > now(), disabled: disabled || existsSync(s.disableFile) };
    },
  };

  return defineAgent({
    ddl: provisionDDL,
    actions: {
      set_puppet_host: setPuppetHost(rt),
      has_cert: hasCert(rt),
      request_certificate: requestCertificate(rt),
      bootstrap_puppet: bootstrapPuppet(rt),
      run_puppet: runPuppet(rt),
      daemonize_puppet: daemonizePuppet(rt),
      lock_deploy: lockDeploy(rt),
      unlock_deploy: unlockDeploy(rt),
      is_locked: isLocked(rt),
      disable_provisioner: disableProvisioner(rt),
      is_disabled: isDisabled(rt),
    },
    dataPlugins: [dataPlugin],
    isActive(): boolean {
      if (disabled) return false;
      const s = current();
      return !(s && existsSync(s.disableFile));
    },
  });
}
