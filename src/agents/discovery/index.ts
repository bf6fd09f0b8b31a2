import { defineAgent } from "../../agent/agent.js";
import type { AgentDDL } from "../../ddl/types.js";

// Broadcast discovery: a node whose filter matches answers `ping`; clients collect the identities.
export const discoveryDDL = {
  metadata: { name: "discovery", description: "Answers discovery requests from nodes that match the filter", version: "1.0.0", timeout: 5 },
  actions: {
    ping: { description: "Reply if this node matches", readonly: true, input: {}, output: { pong: { description: "Node time (ms since epoch)", display_as: "Pong" } } },
  },
} as const satisfies AgentDDL;

export function createDiscoveryAgent() {
  return defineAgent({ ddl: discoveryDDL, actions: { ping: () => ({ pong: Date.now() }) } });
}
