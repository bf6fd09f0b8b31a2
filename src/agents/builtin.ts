import { MusterError } from "../errors.js";
import type { AgentCatalogue, AgentFactory } from "../agent/catalogue.js";
import { createDiscoveryAgent } from "./discovery/index.js";
import { isProvisioned, nodePuppet, nodePuppetOrDefaults } from "./node.js";
import { createRpcutilAgent } from "./rpcutil/index.js";

// The built-in agents by name, as the catalogue (src/agent/catalogue.ts) `muster server` and
// `muster emulate` hand their host. A node loads `discovery` and `rpcutil` always, plus those its
// config lists under agents.builtin: the others act on the machine (Puppet, the CA,
// notifications), so a node offers them only when its operator says so. Their code is imported
// only when listed, which keeps an idle `muster server` small (docs/bench.md).

/** The agents every node hosts. */
export const coreAgentFactories: Record<string, AgentFactory> = {
  discovery: () => createDiscoveryAgent(),
  rpcutil: (d) => createRpcutilAgent(d.node),
};

const optionalAgentLoaders: Record<string, () => Promise<AgentFactory>> = {
  notify: async () => {
    const { createNotifyAgent } = await import("./notify/index.js");
    return (d) => createNotifyAgent({ kv: d.kv });
  },
  provision: async () => {
    const { createProvisionAgent } = await import("./provision/index.js");
    return (d) => createProvisionAgent({ config: d.config, identity: d.identity, onProvisioned: d.onProvisioned, ops: d.ops });
  },
  puppetca: async () => {
    const { createPuppetcaAgent } = await import("./puppetca/index.js");
    return (d) => createPuppetcaAgent({ config: d.config });
  },
  resource: async () => {
    const { createResourceAgent } = await import("./resource/index.js");
    return (d) => createResourceAgent({ config: d.config, ops: d.ops });
  },
  nrpe: async () => {
    const { createNrpeAgent } = await import("./nrpe/index.js");
    return (d) => createNrpeAgent({ config: d.config });
  },
  puppet: async () => {
    const { createPuppetAgent } = await import("./puppet/index.js");
    return (d) => createPuppetAgent({ config: d.config, identity: d.identity, ops: d.ops });
  },
};

export const BUILTIN_AGENT_NAMES = [...Object.keys(coreAgentFactories), ...Object.keys(optionalAgentLoaders)].sort();

/** Factories for the core agents plus the named optional ones; an unknown name is a config error. */
export async function loadBuiltinFactories(names: readonly string[]): Promise<Record<string, AgentFactory>> {
  const out: Record<string, AgentFactory> = { ...coreAgentFactories };
  for (const name of new Set(names)) {
    if (out[name]) continue;
    const load = optionalAgentLoaders[name];
    if (!load) throw new MusterError("MUSTER_CONFIG_INVALID", `unknown built-in agent '${name}'; known: ${BUILTIN_AGENT_NAMES.join(", ")}`);
    out[name] = await load();
  }
  return out;
}

export const ALWAYS_LOADED = ["discovery", "rpcutil"] as const;

/** The built-in agents, as a host is handed them. */
export const builtinAgents: AgentCatalogue = {
  always: ALWAYS_LOADED,
  names: BUILTIN_AGENT_NAMES,
  load: loadBuiltinFactories,
  nodePuppet,
  nodePuppetOrDefaults,
  isProvisioned,
};
