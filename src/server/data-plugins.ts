import type { AgentDDL } from "../ddl/types.js";
import { lookupFact } from "../protocol/facts.js";
import type { DataPlugin } from "../agent/agent.js";

// Built-in data plugins for compound filters: fact('os.family').value=Debian, agent('puppet').present=true.
// Agents add their own through Agent.dataPlugins (e.g. provision()).

export const factDataPlugin: DataPlugin = {
  name: "fact",
  description: "A fact's value by name or dotted path: fact('os.family').value",
  query(argument, { metadata }) {
    if (!argument) return undefined;
    const value = lookupFact(metadata.facts, argument);
    return value === undefined ? undefined : { value };
  },
};

export function agentDataPlugin(ddls: () => AgentDDL[]): DataPlugin {
  return {
    name: "agent",
    description: "An agent's presence and metadata: agent('puppet').present, agent('puppet').version",
    query(argument, { metadata }) {
      if (!argument) return undefined;
      const present = metadata.agents.includes(argument);
      const ddl = ddls().find((d) => d.metadata.name === argument);
      return { present, name: argument, version: ddl?.metadata.version ?? null, description: ddl?.metadata.description ?? null, timeout: ddl?.metadata.timeout ?? null };
    },
  };
}
