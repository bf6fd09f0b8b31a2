import { defineAgent, type Agent } from "../../agent/agent.js";
import { apply } from "./actions/apply.js";
import { show } from "./actions/show.js";
import type { ResourceDeps } from "./actions/run.js";
import { resourceDDL, type ResourceDDL } from "./ddl.js";

export type { ResourceDeps } from "./actions/run.js";

// The resource agent: any Puppet resource on demand, through the real `puppet resource` (no
// shell, no catalog, no master). Settings (`plugins.resource`) are documented in settings.ts.
// Deny by default: a type is refused unless allowed_types lists it and muster has a rule for it
// (titles, properties and values: src/puppet/resource-rule.ts), and a resource the node's last
// catalog manages is refused unless allow_managed is set (Puppet would undo the change).

export type ResourceAgent = Agent<ResourceDDL>;

export function createResourceAgent(deps: ResourceDeps = {}): ResourceAgent {
  const d: ResourceDeps = { config: { ...(deps.config ?? {}) }, ...(deps.ops ? { ops: deps.ops } : {}) };
  return defineAgent({ ddl: resourceDDL, actions: { apply: apply(d), show: show(d) } });
}
