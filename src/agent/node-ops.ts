import type { CertificateRequest, PuppetRunResult } from "../puppet/agent.js";
import type { CertStatus, DaemonizeResult, FactsRequest, HostSettings, PemCredential, PuppetTarget, ResourceRequest, RunRequest, SetServerResult } from "../puppet/node-ops.js";
import type { ReportDetails } from "../puppet/report.js";
import type { PuppetResourceResult } from "../puppet/resource.js";
import type { PuppetStateFile } from "../puppet/state.js";

export type { CertStatus, DaemonizeResult, FactsRequest, HostSettings, PemCredential, PuppetTarget, PuppetUser, ResourceRequest, RunRequest, SetServerResult } from "../puppet/node-ops.js";
export type { PuppetStateFile } from "../puppet/state.js";

// What the node's agents do that needs root, as one contract with two ways to do it
// (docs/decisions/privileged-helper.md):
//
//   directOps()        src/puppet/node-ops.ts: in this process, with the agent's own settings (a
//                      daemon running as root, the lab's nodes, tests)
//   helperOps(socket)  src/privileged/client.ts: asked of the privileged helper, which does the
//                      same operations with the settings it reads itself from root's server config
//
// The host hands its agents one of them (AgentDeps.ops); the agents call these and nothing else for
// what needs root, reading Puppet's state included (root's alone on a node muster did not
// provision: the helper reads it for a daemon that cannot).

export interface NodeOps {
  readonly via: "direct" | "helper";
  puppetRun(t: PuppetTarget, r: RunRequest): Promise<PuppetRunResult>;
  puppetDaemonize(t: PuppetTarget): Promise<DaemonizeResult>;
  /** Puppet's disable lock; `changed` false when it was already disabled (its message kept). */
  puppetDisable(t: PuppetTarget, message: string): Promise<{ changed: boolean }>;
  puppetEnable(t: PuppetTarget): Promise<{ changed: boolean }>;
  certStatus(t: PuppetTarget, o: { download: boolean; signal?: AbortSignal }): Promise<CertStatus>;
  requestCertificate(t: PuppetTarget, o: { nodeKey?: string; signal?: AbortSignal }): Promise<CertificateRequest>;
  /** puppet.conf's server (and the hosts file with use_hosts_file). */
  setPuppetServer(t: PuppetTarget, h: HostSettings): Promise<SetServerResult>;
  /** The node's Puppet certificate and key as PEM text. */
  tlsCredential(t: PuppetTarget): Promise<PemCredential>;
  puppetResource(r: ResourceRequest): Promise<PuppetResourceResult>;
  /** Write `<fact>: production` to the stage fact file; false when it already said so. */
  persistStage(file: string, fact: string): Promise<boolean>;
  /** One of Puppet's state files as root reads it: its text, or null when there is none. */
  readPuppetState(t: PuppetTarget, file: PuppetStateFile): Promise<string | null>;
  /** What the last run's report says (bounded), or null when there is none. */
  lastRunReport(t: PuppetTarget): Promise<ReportDetails | null>;
  /** The facts Puppet uses on this node (`puppet facts show`, as root), Facter's where Puppet is missing. */
  nodeFacts(t: PuppetTarget, o: FactsRequest): Promise<Record<string, unknown>>;
}
