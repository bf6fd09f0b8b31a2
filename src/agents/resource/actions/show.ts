import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import { RpcError } from "../../../errors.js";
import { Status } from "../../../protocol/status.js";
import { isManagedResource, readManagedResources } from "../../../puppet/resource.js";
import type { ResourceDDL } from "../ddl.js";
import { ensureResourceAllowed, resolveResourceSettings } from "../settings.js";
import { runPuppetResource, type ResourceDeps } from "./run.js";

/** puppet resource TYPE NAME: reading is still limited to allowed types (a user resource shows password hashes). */
export function show(deps: ResourceDeps): ActionHandler<ActionInput<ResourceDDL, "show">> {
  return async (input, ctx) => {
    const s = resolveResourceSettings({ ...deps.config, ...ctx.config });
    ensureResourceAllowed(s, input.type, input.name);
    const r = await runPuppetResource(deps.ops, s, ctx, input.type, input.name, []);
    // the privileged helper tells, as root (Puppet keeps its list 0640 where it provisioned nothing)
    let managed = r.managed ?? false;
    if (r.managed === undefined) {
      try {
        managed = isManagedResource(readManagedResources(s.resourcesFile), input.type, input.name);
      } catch (e) {
        ctx.log.warn({ err: (e as Error).message }, "cannot tell whether the resource is managed");
      }
    }
    const reply = { type: input.type, name: input.name, state: r.state, managed, duration: r.durationMs / 1000 };
    if (!r.ok) throw new RpcError(Status.Aborted, `puppet resource ${input.type} ${input.name} failed: ${r.errors[0] ?? "see errors"}`, { ...reply, errors: r.errors });
    return reply;
  };
}
