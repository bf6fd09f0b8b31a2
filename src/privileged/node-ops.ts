import { existsSync, readFileSync } from "node:fs";
import { MusterError } from "../errors.js";
import {
  disableAgent,
  enableAgent,
  PuppetAgent,
  puppetStatePaths,
  writeFactFile,
  writeHostsEntry,
  type CertificateRequest,
  type PuppetAgentSettings,
  type PuppetRunResult,
} from "../puppet/index.js";
import { puppetResource, type PuppetResourceResult } from "../puppet/resource.js";
import { parseServer } from "./operations.js";

// What the node's agents do that needs root, as one interface with two ways to do it
// (docs/decisions/privileged-helper.md):
//
//   directOps()        in this process, with the agent's own settings: a daemon running as root,
//                      the lab's nodes (processes run directly as root on the host), tests
//   helperOps(socket)  asked of the privileged helper (client.ts), which does the same operations
//                      with the settings it reads itself from root's server config
//
// The agents call these and nothing else for what needs root; reading what Puppet leaves readable
// (its state directory, last_run_summary) stays in the agents.

/** Which agent's Puppet settings an operation uses (plugins.provision or plugins.puppet). */
export type PuppetUser = "provision" | "puppet";

export interface PuppetTarget {
  agent: PuppetUser;
  /** The agent's own resolved settings: what directOps acts on. The helper uses its own. */
  settings: PuppetAgentSettings;
}

export interface RunRequest {
  environment?: string;
  noop?: boolean;
  tags?: string[];
  facts?: Record<string, string>;
  /** runonce's `server` ("host[:port]"), already allowed by the agent's own settings. */
  server?: string;
  signal?: AbortSignal;
  timeoutMs?: number;
}

export interface CertStatus {
  hasCert: boolean;
  certFingerprint: string | undefined;
  csrFingerprint: string | undefined;
}

export interface HostSettings {
  host: string;
  port?: number;
  useHostsFile: boolean;
  hostsFile: string;
}

export interface ResourceRequest {
  puppetBin: string;
  confdir: string;
  vardir: string;
  type: string;
  name: string;
  properties: [string, string][];
  signal?: AbortSignal;
  timeoutMs: number;
}

export interface NodeOps {
  readonly via: "direct" | "helper";
  puppetRun(t: PuppetTarget, r: RunRequest): Promise<PuppetRunResult>;
  puppetDaemonize(t: PuppetTarget): Promise<{ pid: number; alreadyRunning: boolean }>;
  /** Puppet's disable lock; `changed` false when it was already disabled (its message kept). */
  puppetDisable(t: PuppetTarget, message: string): Promise<{ changed: boolean }>;
  puppetEnable(t: PuppetTarget): Promise<{ changed: boolean }>;
  certStatus(t: PuppetTarget, o: { download: boolean; signal?: AbortSignal }): Promise<CertStatus>;
  requestCertificate(t: PuppetTarget, o: { nodeKey?: string; signal?: AbortSignal }): Promise<CertificateRequest>;
  /** puppet.conf's server (and the hosts file with use_hosts_file). */
  setPuppetServer(t: PuppetTarget, h: HostSettings): Promise<{ server: string; puppetConf: string; hostsFile: string | null }>;
  /** The node's Puppet certificate and key as PEM text. */
  tlsCredential(t: PuppetTarget): Promise<{ cert: string; key: string }>;
  puppetResource(r: ResourceRequest): Promise<PuppetResourceResult>;
  /** Write `<fact>: production` to the stage fact file; false when it already said so. */
  persistStage(file: string, fact: string): Promise<boolean>;
}

/** The node's PuppetAgent, with runonce's master when one was asked for. */
export function agentFor(s: PuppetAgentSettings, server?: string): PuppetAgent {
  if (server === undefined) return new PuppetAgent(s);
  const parsed = parseServer(server);
  if (!parsed) throw new MusterError("MUSTER_PUPPET_FAILED", `server ${JSON.stringify(server)} is not host[:port]`);
  const { serverport: _p, ...rest } = s;
  return new PuppetAgent({ ...rest, server: parsed.host, ...(parsed.port !== undefined ? { serverport: parsed.port } : {}) });
}

/** Everything in this process, as root would (or the lab's nodes, whose Puppet is their own). */
export function directOps(): NodeOps {
  return {
    via: "direct",
    puppetRun: (t, r) =>
      agentFor(t.settings, r.server).run({
        ...(r.environment !== undefined ? { environment: r.environment } : {}),
        ...(r.noop !== undefined ? { noop: r.noop } : {}),
        ...(r.tags ? { tags: r.tags } : {}),
        ...(r.facts ? { facts: r.facts } : {}),
        ...(r.signal ? { signal: r.signal } : {}),
        ...(r.timeoutMs !== undefined ? { timeoutMs: r.timeoutMs } : {}),
      }),
    puppetDaemonize: (t) => new PuppetAgent(t.settings).daemonize(),
    puppetDisable: (t, message) => Promise.resolve({ changed: disableAgent(puppetStatePaths(new PuppetAgent(t.settings)).disabledLockfile, message) }),
    puppetEnable: (t) => Promise.resolve({ changed: enableAgent(puppetStatePaths(new PuppetAgent(t.settings)).disabledLockfile) }),
    async certStatus(t, o) {
      const agent = new PuppetAgent(t.settings);
      let has = agent.hasCert();
      if (!has && o.download && agent.csrFingerprint() !== undefined) has = await agent.downloadCert({ ...(o.signal ? { signal: o.signal } : {}), timeoutMs: 120_000 });
      return { hasCert: has, certFingerprint: has ? agent.certFingerprint() : undefined, csrFingerprint: agent.csrFingerprint() };
    },
    requestCertificate: (t, o) => new PuppetAgent(t.settings).requestCertificate({ ...(o.signal ? { signal: o.signal } : {}), timeoutMs: 300_000, ...(o.nodeKey ? { nodeKey: o.nodeKey } : {}) }),
    setPuppetServer(t, h) {
      const agent = new PuppetAgent(t.settings);
      if (h.useHostsFile) writeHostsEntry(h.hostsFile, h.host, ["puppet"]);
      const server = h.useHostsFile ? "puppet" : h.host;
      agent.setPuppetHost(server, h.port);
      return Promise.resolve({ server, puppetConf: agent.puppetConfPath, hostsFile: h.useHostsFile ? h.hostsFile : null });
    },
    tlsCredential(t) {
      const agent = new PuppetAgent(t.settings);
      if (!existsSync(agent.certPath) || !existsSync(agent.keyPath)) throw new MusterError("MUSTER_PKI_FAILED", `the node has no Puppet certificate yet (${agent.certPath})`);
      return Promise.resolve({ cert: readFileSync(agent.certPath, "utf8"), key: readFileSync(agent.keyPath, "utf8") });
    },
    puppetResource: (r) => puppetResource({ puppetBin: r.puppetBin, confdir: r.confdir, vardir: r.vardir }, r.type, r.name, r.properties, { ...(r.signal ? { signal: r.signal } : {}), timeoutMs: r.timeoutMs }),
    persistStage: (file, fact) => Promise.resolve(writeFactFile(file, fact, "production")),
  };
}
