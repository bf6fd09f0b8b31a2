import { existsSync, readFileSync } from "node:fs";
import { MusterError } from "../errors.js";
import { PuppetAgent, writeHostsEntry, type CertificateRequest, type PuppetAgentSettings, type PuppetRunResult } from "./agent.js";
import { puppetFacts } from "./facter.js";
import { writeFactFile } from "./facts.js";
import { readLastRunReport, type ReportDetails } from "./report.js";
import { puppetResource, type PuppetResourceResult } from "./resource.js";
import { parseServer } from "./server-address.js";
import { disableAgent, enableAgent, puppetStateFile, puppetStatePaths, readStateText, type PuppetStateFile } from "./state.js";

// What a node's agents do that needs root, done in this process: directOps() is the direct
// implementation of the NodeOps contract (src/agent/node-ops.ts), for a daemon running as root,
// the lab's nodes (processes run directly as root on the host) and tests, and it is what the
// privileged helper runs once a request has passed its rules (docs/decisions/privileged-helper.md).
// The other implementation, helperOps (src/privileged/client.ts), asks the helper for the same.
// The request and reply types live here, beside the code that does them: they are Puppet's.

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

export interface FactsRequest {
  /** Facter, for a node without Puppet (facts.facter_command). */
  facterCommand: string;
  /** Told when the facts are partial or Facter's alone. */
  onPartial?: (reason: string) => void;
}

export interface DaemonizeResult {
  pid: number;
  alreadyRunning: boolean;
}

export interface SetServerResult {
  server: string;
  puppetConf: string;
  hostsFile: string | null;
}

export interface PemCredential {
  cert: string;
  key: string;
}

/** The node's PuppetAgent, with runonce's master when one was asked for. */
export function agentFor(s: PuppetAgentSettings, server?: string): PuppetAgent {
  if (server === undefined) return new PuppetAgent(s);
  const parsed = parseServer(server);
  if (!parsed) throw new MusterError("MUSTER_PUPPET_FAILED", `server ${JSON.stringify(server)} is not host[:port]`);
  const { serverport: _p, ...rest } = s;
  return new PuppetAgent({ ...rest, server: parsed.host, ...(parsed.port !== undefined ? { serverport: parsed.port } : {}) });
}

/**
 * Everything in this process, as root would (or the lab's nodes, whose Puppet is their own). Its
 * type is NodeOps' (src/agent/node-ops.ts), checked where it is used: puppet/ knows no agents.
 */
export function directOps() {
  return {
    via: "direct" as const,
    puppetRun: (t: PuppetTarget, r: RunRequest): Promise<PuppetRunResult> =>
      agentFor(t.settings, r.server).run({
        ...(r.environment !== undefined ? { environment: r.environment } : {}),
        ...(r.noop !== undefined ? { noop: r.noop } : {}),
        ...(r.tags ? { tags: r.tags } : {}),
        ...(r.facts ? { facts: r.facts } : {}),
        ...(r.signal ? { signal: r.signal } : {}),
        ...(r.timeoutMs !== undefined ? { timeoutMs: r.timeoutMs } : {}),
      }),
    puppetDaemonize: (t: PuppetTarget): Promise<DaemonizeResult> => new PuppetAgent(t.settings).daemonize(),
    puppetDisable: (t: PuppetTarget, message: string): Promise<{ changed: boolean }> => Promise.resolve({ changed: disableAgent(puppetStatePaths(new PuppetAgent(t.settings)).disabledLockfile, message) }),
    puppetEnable: (t: PuppetTarget): Promise<{ changed: boolean }> => Promise.resolve({ changed: enableAgent(puppetStatePaths(new PuppetAgent(t.settings)).disabledLockfile) }),
    async certStatus(t: PuppetTarget, o: { download: boolean; signal?: AbortSignal }): Promise<CertStatus> {
      const agent = new PuppetAgent(t.settings);
      let has = agent.hasCert();
      if (!has && o.download && agent.csrFingerprint() !== undefined) has = await agent.downloadCert({ ...(o.signal ? { signal: o.signal } : {}), timeoutMs: 120_000 });
      return { hasCert: has, certFingerprint: has ? agent.certFingerprint() : undefined, csrFingerprint: agent.csrFingerprint() };
    },
    requestCertificate: (t: PuppetTarget, o: { nodeKey?: string; signal?: AbortSignal }): Promise<CertificateRequest> => new PuppetAgent(t.settings).requestCertificate({ ...(o.signal ? { signal: o.signal } : {}), timeoutMs: 300_000, ...(o.nodeKey ? { nodeKey: o.nodeKey } : {}) }),
    setPuppetServer(t: PuppetTarget, h: HostSettings): Promise<SetServerResult> {
      const agent = new PuppetAgent(t.settings);
      if (h.useHostsFile) writeHostsEntry(h.hostsFile, h.host, ["puppet"]);
      const server = h.useHostsFile ? "puppet" : h.host;
      agent.setPuppetHost(server, h.port);
      return Promise.resolve({ server, puppetConf: agent.puppetConfPath, hostsFile: h.useHostsFile ? h.hostsFile : null });
    },
    tlsCredential(t: PuppetTarget): Promise<PemCredential> {
      const agent = new PuppetAgent(t.settings);
      if (!existsSync(agent.certPath) || !existsSync(agent.keyPath)) throw new MusterError("MUSTER_PKI_FAILED", `the node has no Puppet certificate yet (${agent.certPath})`);
      return Promise.resolve({ cert: readFileSync(agent.certPath, "utf8"), key: readFileSync(agent.keyPath, "utf8") });
    },
    puppetResource: (r: ResourceRequest): Promise<PuppetResourceResult> => puppetResource({ puppetBin: r.puppetBin, confdir: r.confdir, vardir: r.vardir }, r.type, r.name, r.properties, { ...(r.signal ? { signal: r.signal } : {}), timeoutMs: r.timeoutMs }),
    persistStage: (file: string, fact: string): Promise<boolean> => Promise.resolve(writeFactFile(file, fact, "production")),
    readPuppetState: async (t: PuppetTarget, file: PuppetStateFile): Promise<string | null> => readStateText(await puppetStateFile(new PuppetAgent(t.settings), file)),
    lastRunReport: (t: PuppetTarget): Promise<ReportDetails | null> => Promise.resolve(readLastRunReport(puppetStatePaths(new PuppetAgent(t.settings)).lastRunReport) ?? null),
    nodeFacts: (t: PuppetTarget, o: FactsRequest): Promise<Record<string, unknown>> => puppetFacts(t.settings, o),
  };
}
