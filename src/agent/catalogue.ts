import type { AgentDDL } from "../ddl/types.js";
import type { NodeMetadata } from "../protocol/types.js";
import type { PuppetAgentSettings } from "../puppet/agent.js";
import type { Agent, AgentKvOpener } from "./agent.js";
import type { NodeOps } from "./node-ops.js";

// How a host (the node daemon, the emulator) is handed its agents. The command that starts it
// passes an AgentCatalogue (src/agents/builtin.ts: the built-in agents); the host knows only this
// contract, as go-choria's server knows agents only through its agent manager. The catalogue also
// answers what the host asks about its node that only the agents know (where the node's Puppet
// lives, whether provisioning has finished), so the host never reads the agents' settings.

/** What an agent may see of the node hosting it (rpcutil's inventory, stats, data plugins). */
export interface NodeIntrospection {
  metadata(): NodeMetadata;
  stats(): Record<string, number>;
  agentDDLs(): AgentDDL[];
  dataPluginNames(): string[];
  queryData(plugin: string, argument: string | undefined): Promise<Record<string, unknown> | undefined>;
  mainCollective: string;
  version: string;
  startedAt: number;
}

/** What the host gives each agent it makes. */
export interface AgentDeps {
  node: NodeIntrospection;
  identity: string;
  /** The agent's own settings (`plugins.<name>`). */
  config: Record<string, unknown>;
  /** The provision agent calls this once it has marked the node provisioned. */
  onProvisioned?: () => void;
  /** Key-value buckets the host keeps for agents (the notify agent's dedupe keys); absent in the emulator. */
  kv?: AgentKvOpener;
  /** How the agents do what needs root: in process, or through the privileged helper (docs/decisions/privileged-helper.md). */
  ops?: NodeOps;
}

export type AgentFactory = (deps: AgentDeps) => Agent;

/** The node's settings the catalogue's questions need. */
export interface NodeAgentsConfig {
  identity: string;
  /** `plugins.<agent>` settings of the server config. */
  plugins: Record<string, Record<string, unknown>>;
  /** agents.builtin of the server config. */
  builtin?: readonly string[];
  /** The node starts in provisioning isolation (its provision agent runs its Puppet). */
  provisioning?: boolean;
}

export interface AgentCatalogue {
  /** Agents every node hosts, whatever its config says. */
  readonly always: readonly string[];
  /** Every agent the catalogue offers, by name. */
  readonly names: readonly string[];
  /** Factories for `always` plus the named agents (loaded on demand); an unknown name is MUSTER_CONFIG_INVALID. */
  load(names: readonly string[]): Promise<Record<string, AgentFactory>>;
  /** Where the node's own Puppet lives, as its puppet and provision agents see it; undefined when it runs neither. A bad setting throws, naming it. */
  nodePuppet(c: NodeAgentsConfig): Promise<PuppetAgentSettings | undefined>;
  /** nodePuppet, or Puppet's defaults for the node when it configures none. */
  nodePuppetOrDefaults(c: NodeAgentsConfig): Promise<PuppetAgentSettings>;
  /** Whether the node's provision agent has finished provisioning it (before or since a restart). */
  isProvisioned(c: NodeAgentsConfig): Promise<boolean>;
}
