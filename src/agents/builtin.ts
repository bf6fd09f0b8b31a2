import type { Agent } from "../server/agent.js";
import { createDiscoveryAgent } from "./discovery/index.js";
import { createNotifyAgent } from "./notify/index.js";
import { createRpcutilAgent, type NodeIntrospection } from "./rpcutil/index.js";

// The built-in agents by name. A node loads `discovery` and `rpcutil` always, plus those its config
// lists under agents.builtin: the others act on the machine (Puppet, the CA, notifications), so a
// node offers them only when its operator says so.

export interface BuiltinDeps {
  node: NodeIntrospection;
}

export const builtinAgentFactories: Record<string, (deps: BuiltinDeps) => Agent> = {
  discovery: () => createDiscoveryAgent() as unknown as Agent,
  rpcutil: (d) => createRpcutilAgent(d.node) as unknown as Agent,
  notify: () => createNotifyAgent() as unknown as Agent,
};

export const ALWAYS_LOADED = ["discovery", "rpcutil"] as const;
