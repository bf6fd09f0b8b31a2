import type { PuppetAgentSettings } from "../puppet/agent.js";
import type { PuppetUser } from "../puppet/node-ops.js";
import type { ResourceRuleSettings } from "../puppet/resource-rule.js";

// What the privileged helper knows about its node: root's server config as the agents read it.
// `muster privileged serve` hands the helper a reader (src/agents/helper-settings.ts reads
// /etc/muster/server.yaml with the agents' own settings readers), called afresh for every request;
// the helper itself imports neither the agents nor the server. Each part is read when an operation
// needs it, so a bad plugins.resource setting refuses puppet.resource and nothing else.

export interface PuppetRunSettings {
  /** The Puppet the agent runs: binary, directories, certname, master. */
  settings: PuppetAgentSettings;
  runTimeoutMs: number;
  /** runonce may name another master (plugins.puppet.allow_server_override). */
  allowServerOverride: boolean;
}

export interface ProvisionFiles {
  stageFactFile: string;
  stageFact: string;
  useHostsFile: boolean;
  hostsFile: string;
}

export interface ResourceSettingsView extends ResourceRuleSettings {
  puppetBin: string;
  confdir: string;
  vardir: string;
  resourcesFile: string;
  allowManaged: boolean;
  timeoutMs: number;
}

export interface NodeSettings {
  /** Where these settings come from, for messages (root's config file). */
  source: string;
  identity: string;
  /** The agents the node hosts: agents.builtin, and provision while it provisions. */
  agents: ReadonlySet<string>;
  /** tls.use_puppet_cert: the node connects to the broker with its Puppet certificate. */
  usePuppetCert: boolean;
  /** facts.facter (the node gathers facts at all) and facts.facter_command (Facter, where Puppet is not installed). */
  facts: { enabled: boolean; facterCommand: string };
  puppet(agent: PuppetUser): PuppetRunSettings;
  provision(): ProvisionFiles;
  resource(): ResourceSettingsView;
  /** Where the node's own Puppet lives (its key, its facts), as configured or Puppet's defaults. */
  nodePuppet(): Promise<PuppetAgentSettings>;
}

/** Reads the node's settings now (a bad file throws, and the request is refused with why). */
export type NodeSettingsReader = () => NodeSettings;
