import type { AgentDDL } from "../../src/ddl/index.js";

// One DDL that uses every input type, validator, output default and aggregate function.
export const sampleDDL = {
  metadata: {
    name: "sample",
    description: "Exercises every DDL feature",
    author: "muster",
    license: "Apache-2.0",
    version: "1.0.0",
    url: "https://example.invalid/sample",
    timeout: 10,
  },
  actions: {
    configure: {
      description: "Takes every input type",
      display: "always",
      input: {
        name: { prompt: "Name", description: "Service name", type: "string", optional: false, validation: "^[a-z][a-z0-9-]*$", maxlength: 16 },
        command: { description: "Command to run", type: "string", optional: true, validation: "shellsafe" },
        ipaddress: { description: "IPv4 address", type: "string", optional: true, validation: "ipv4address" },
        ip6: { description: "IPv6 address", type: "string", optional: true, validation: "ipv6address" },
        note: { description: "Free text", type: "string", optional: true, maxlength: 0 },
        count: { description: "How many", type: "integer", optional: true, default: 1 },
        ratio: { description: "A ratio", type: "float", optional: true },
        load: { description: "A load", type: "number", optional: true },
        force: { description: "Force it", type: "boolean", optional: true, default: false },
        mode: { description: "Mode", type: "list", optional: true, list: ["fast", "safe"], default: "safe" },
        port: { description: "Port", type: "list", optional: true, list: [80, 443] },
        settings: { description: "Settings", type: "hash", optional: true, default: {} },
        tags: { description: "Tags", type: "array", optional: true },
      },
      output: {
        result: { description: "What happened", display_as: "Result", type: "string" },
      },
    },
    status: {
      description: "Reports node facts",
      input: {},
      output: {
        os: { description: "Operating system", display_as: "Operating System", type: "string" },
        classes: { description: "Puppet classes", display_as: "Classes", type: "array", default: [] },
        load: { description: "Load average", display_as: "Load", type: "float", default: 0 },
        packages: { description: "Installed packages", display_as: "Packages", type: "integer" },
        enabled: { description: "Agent enabled", display_as: "Enabled", type: "boolean", default: false },
        message: { description: "A message", display_as: "Message", default: "none" },
      },
      aggregate: [
        { function: "summary", output: "os" },
        { function: "summary", output: "classes" },
        { function: "average", output: "load", format: "%.2f" },
        { function: "sum", output: "packages" },
        { function: "boolean_summary", output: "enabled" },
      ],
    },
  },
} as const satisfies AgentDDL;

/** A deep, mutable, JSON-only copy, as an external agent's DDL file would parse. */
export function sampleJson(): any {
  return JSON.parse(JSON.stringify(sampleDDL));
}
