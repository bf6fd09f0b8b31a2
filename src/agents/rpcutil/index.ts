import { memoryUsage } from "node:process";
import { RpcError } from "../../errors.js";
import { Status } from "../../protocol/status.js";
import { defineAgent } from "../../agent/agent.js";
import type { NodeIntrospection } from "../../agent/catalogue.js";
import { lookupFact } from "../../protocol/facts.js";
import { rpcutilDDL } from "./ddl.js";

export { rpcutilDDL };



export function createRpcutilAgent(node: NodeIntrospection) {
  return defineAgent({
    ddl: rpcutilDDL,
    actions: {
      ping: () => ({ pong: Date.now() }),
      inventory: () => {
        const md = node.metadata();
        return { agents: md.agents, facts: md.facts, classes: md.classes, data_plugins: node.dataPluginNames(), collectives: md.collectives, main_collective: node.mainCollective, version: node.version };
      },
      get_fact: (input) => ({ fact: input.fact, value: lookupFact(node.metadata().facts, input.fact) ?? null }),
      get_facts: (input) => {
        const facts = node.metadata().facts;
        const values: Record<string, unknown> = {};
        for (const f of input.facts.split(",").map((s) => s.trim()).filter(Boolean)) values[f] = lookupFact(facts, f) ?? null;
        return { values };
      },
      agent_inventory: () => ({
        agents: node.agentDDLs().map((d) => ({ agent: d.metadata.name, name: d.metadata.name, description: d.metadata.description, version: d.metadata.version, timeout: d.metadata.timeout, author: d.metadata.author ?? null, license: d.metadata.license ?? null })),
      }),
      daemon_stats: () => ({
        ...node.stats(),
        starttime: node.startedAt,
        uptime: Math.round((Date.now() - node.startedAt) / 1000),
        rss: memoryUsage.rss(),
        version: node.version,
        agents: node.metadata().agents,
      }),
      collective_info: () => ({ collectives: node.metadata().collectives, main_collective: node.mainCollective }),
      get_data: async (input) => {
        if (!node.dataPluginNames().includes(input.source)) throw new RpcError(Status.InvalidData, `no data plugin '${input.source}' on this node; it has: ${node.dataPluginNames().join(", ") || "none"}`);
        const data = await node.queryData(input.source, input.query);
        return { data: data ?? null };
      },
    },
  });
}
