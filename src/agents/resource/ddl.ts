import type { AgentDDL } from "../../ddl/types.js";

// The resource agent's contract: one Puppet resource on demand, with the real `puppet resource`.
// The DDL checks the shapes; the agent checks the property names and values (see validate.ts),
// the node's allowed_types and whether the node's catalog manages the resource.

export const RESOURCE_TYPE = "^[a-z][a-z0-9_:]*$";
/** No leading '-' (puppet would read it as an option), no line breaks or NUL. */
export const RESOURCE_NAME = "^(?!-)[^\\x00\\n\\r]+$";

const resourceInputs = {
  type: { prompt: "Type", description: "Puppet resource type, e.g. file, package, service, user", type: "string", validation: RESOURCE_TYPE, maxlength: 64, optional: false },
  name: { prompt: "Name", description: "The resource's title (namevar), e.g. a path for file", type: "string", validation: RESOURCE_NAME, maxlength: 1024, optional: false },
} as const;

export const resourceDDL = {
  metadata: {
    name: "resource",
    description: "Applies or inspects one Puppet resource with the real `puppet resource`; types must be allowed by the node, catalog-managed resources are refused",
    author: "muster",
    license: "Apache-2.0",
    version: "0.1.0",
    // puppet resource takes a few seconds; the timeout setting (default 120 s) stays below this.
    timeout: 180,
  },
  actions: {
    apply: {
      description: "Set properties of a resource (`puppet resource TYPE NAME key=value ...`) and reply its resulting state",
      display: "always",
      input: {
        ...resourceInputs,
        properties: {
          prompt: "Properties",
          description: "Properties to set: a hash {ensure: \"file\", mode: \"0644\"} (names ^[a-z][a-z0-9_]*$, scalar values without line breaks)",
          type: "hash",
          optional: false,
        },
      },
      output: {
        type: { description: "The resource type", display_as: "Type", type: "string" },
        name: { description: "The resource name", display_as: "Name", type: "string" },
        state: { description: "The resource's state after the change, as puppet resource reports it", display_as: "State", type: "hash", default: {} },
        changed: { description: "Puppet changed something", display_as: "Changed", type: "boolean", default: false },
        changes: { description: "What Puppet changed (its notices)", display_as: "Changes", type: "array", default: [] },
        errors: { description: "Puppet's errors (the reply is then Aborted)", display_as: "Errors", type: "array", default: [] },
        warnings: { description: "Puppet's warnings", display_as: "Warnings", type: "array", default: [] },
        duration: { description: "Seconds puppet took", display_as: "Duration", type: "float" },
      },
      aggregate: [{ function: "boolean_summary", output: "changed" }],
    },
    show: {
      description: "The current state of a resource (`puppet resource TYPE NAME`)",
      readonly: true,
      display: "always",
      input: { ...resourceInputs },
      output: {
        type: { description: "The resource type", display_as: "Type", type: "string" },
        name: { description: "The resource name", display_as: "Name", type: "string" },
        state: { description: "The resource's state as puppet resource reports it", display_as: "State", type: "hash", default: {} },
        managed: { description: "The node's Puppet catalog manages this resource", display_as: "Managed", type: "boolean", default: false },
        duration: { description: "Seconds puppet took", display_as: "Duration", type: "float" },
      },
    },
  },
} as const satisfies AgentDDL;

export type ResourceDDL = typeof resourceDDL;
