import type { AgentDDL } from "../../ddl/types.js";

export const rpcutilDDL = {
  metadata: { name: "rpcutil", description: "General helpful actions that expose stats and internals to clients", version: "1.0.0", timeout: 10 },
  actions: {
    ping: {
      description: "Responds to requests with the node's time",
      input: {},
      output: { pong: { description: "The node's time in ms since epoch", display_as: "Timestamp" } },
    },
    inventory: {
      description: "The node's agents, facts, classes, data plugins and collectives",
      input: {},
      output: {
        agents: { description: "Agents this node offers", display_as: "Agents" },
        facts: { description: "All facts", display_as: "Facts" },
        classes: { description: "Puppet classes", display_as: "Classes" },
        data_plugins: { description: "Data plugins for compound filters", display_as: "Data Plugins" },
        collectives: { description: "Collectives this node belongs to", display_as: "All Collectives" },
        main_collective: { description: "The main collective", display_as: "Main Collective" },
        version: { description: "muster version", display_as: "Version" },
      },
    },
    get_fact: {
      description: "The value of one fact (dotted paths reach into structured facts)",
      input: { fact: { prompt: "Fact", description: "The fact to retrieve", type: "string", validation: "^[\\w\\-.]+$", maxlength: 256, optional: false } },
      output: { fact: { description: "The fact", display_as: "Fact" }, value: { description: "The value", display_as: "Value" } },
      aggregate: [{ function: "summary", output: "value" }],
    },
    get_facts: {
      description: "The values of several facts",
      input: { facts: { prompt: "Facts", description: "Comma-separated fact names", type: "string", validation: "^[\\w\\-.,\\s]+$", maxlength: 4096, optional: false } },
      output: { values: { description: "Fact name to value", display_as: "Values" } },
    },
    agent_inventory: {
      description: "Metadata of every agent on the node",
      input: {},
      output: { agents: { description: "Agent metadata", display_as: "Agents" } },
    },
    daemon_stats: {
      description: "Statistics of the node daemon",
      input: {},
      output: {
        total: { description: "Messages received", display_as: "Total Messages" },
        validated: { description: "Messages that passed verification", display_as: "Validated" },
        unvalidated: { description: "Garbled, mistyped or oversized messages", display_as: "Unvalidated" },
        badsig: { description: "Bad signature or untrusted caller", display_as: "Bad Signature" },
        ttlexpired: { description: "Expired or from the future", display_as: "TTL Expired" },
        replayed: { description: "Replayed request ids", display_as: "Replayed" },
        badfilter: { description: "Verified requests whose filter does not parse", display_as: "Bad Filter" },
        filtered: { description: "Did not match the filter", display_as: "Filtered" },
        passed: { description: "Dispatched to an agent", display_as: "Passed" },
        replies: { description: "Replies sent", display_as: "Replies" },
        unknown_agent: { description: "Requests for agents this node lacks", display_as: "Unknown Agent" },
        unknown_action: { description: "Requests for unknown actions", display_as: "Unknown Action" },
        invalid_input: { description: "Requests failing DDL validation", display_as: "Invalid Input" },
        aborted: { description: "Actions that aborted", display_as: "Aborted" },
        errors: { description: "Actions that failed unexpectedly", display_as: "Errors" },
        starttime: { description: "Start time (ms since epoch)", display_as: "Start Time" },
        uptime: { description: "Seconds since start", display_as: "Uptime" },
        rss: { description: "Resident memory of the process in bytes", display_as: "RSS" },
        version: { description: "muster version", display_as: "Version" },
        agents: { description: "Agents loaded", display_as: "Agents" },
      },
      aggregate: [{ function: "sum", output: "total" }, { function: "sum", output: "replies" }],
    },
    collective_info: {
      description: "The collectives this node belongs to",
      input: {},
      output: { collectives: { description: "All collectives", display_as: "All Collectives" }, main_collective: { description: "The main collective", display_as: "Main Collective" } },
      aggregate: [{ function: "summary", output: "main_collective" }],
    },
    get_data: {
      description: "Query a data plugin",
      input: {
        source: { prompt: "Data Source", description: "The data plugin", type: "string", validation: "^[a-z][a-z0-9_]*$", maxlength: 64, optional: false },
        query: { prompt: "Query", description: "The plugin's argument", type: "string", maxlength: 256, optional: true },
      },
      output: { data: { description: "The plugin's fields", display_as: "Data" } },
    },
  },
} as const satisfies AgentDDL;
