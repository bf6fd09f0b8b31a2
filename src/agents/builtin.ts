import type { Agent } from "../server/agent.js";
import { createDiscoveryAgent } from "./discovery/index.js";
import { createNotifyAgent } from "./notify/index.js";
import { createNrpeAgent } from "./nrpe/index.js";
import { createProvisionAgent } from "./provision/index.js";
import { createPuppetcaAgent } from "./puppetca/index.js";
import { createResourceAgent } from "./resource/index.js";
import { createPuppetAgent } from "./puppet/index.js";
import { createRpcutilAgent, type NodeIntrospection } from "./rpcutil/index.js";

// The built-in agents by name. A node loads `discovery` and `rpcutil` always, plus those its config
// lists under agents.builtin: the others act on the machine (Puppet, the CA, notifications), so a
// node offers them only when its operator says so.

export interface BuiltinDeps {
  node: NodeIntrospection;
  identity: string;
  /** The agent's own settings (`plugins.<name>`). */
  config: Record<string, unknown>;
}

export type AgentFactory = (deps: BuiltinDeps) => Agent;

export const builtinAgentFactories: Record<string, AgentFactory> = {
  discovery: () => createDiscoveryAgent() as unknown as Agent,
  rpcutil: (d) => createRpcutilAgent(d.node) as unknown as Agent,
  notify: () => createNotifyAgent() as unknown as Agent,
  provision: (d) => createProvisionAgent({ config: d.config, identity: d.identity }) as unknown as Agent,
  puppetca: (d) => createPuppetcaAgent({ config: d.config }) as unknown as Agent,
  resource: (d) => createResourceAgent({ config: d.config }) as unknown as Agent,
  nrpe: (d) => createNrpeAgent({ config: d.config }) as unknown as Agent,
  puppet: (d) => createPuppetAgent({ config: d.config, identity: d.identity }) as unknown as Agent,
};

export const ALWAYS_LOADED = ["discovery", "rpcutil"] as const;
