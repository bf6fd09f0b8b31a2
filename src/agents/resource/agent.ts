import { defineAgent, type Agent } from "../../agent/agent.js";
import { apply } from "./actions/apply.js";
import { show } from "./actions/show.js";
import { resourceDDL, type ResourceDDL } from "./ddl.js";
import type { NodeOps } from "../../privileged/node-ops.js";

// The resource agent: any Puppet resource on demand, through the real `puppet resource` (no
// shell, no catalog, no master). Settings (`plugins.resource`) are documented in settings.ts.
// Deny by default: a type is refused unless allowed_types lists it, and a resource the node's
// last catalog manages is refused unless allow_managed is set (Puppet would undo the change).

export interface ResourceDeps {
  /** `plugins.resource` settings; ctx.config overlays them per request. */
  config?: Record<string, unknown>;
  /** Runs `puppet resource`: in process, or through the privileged helper (which checks again). */
  ops?: NodeOps;
}

export type ResourceAgent = Agent<ResourceDDL>;

export function createResourceAgent(deps: ResourceDeps = {}): ResourceAgent {
  const d: ResourceDeps = { config: { ...(deps.config ?? {}) }, ...(deps.ops ? { ops: deps.ops } : {}) };
  return defineAgent({ ddl: resourceDDL, actions: { apply: apply(d), show: show(d) } });
}
