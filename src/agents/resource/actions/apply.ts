import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import { RpcError } from "../../../errors.js";
import { Status } from "../../../protocol/status.js";
import { isManagedResource, readManagedResources } from "../../../puppet/resource.js";
import type { ResourceDDL } from "../ddl.js";
import { ensureResourceAllowed, resolveResourceSettings } from "../settings.js";
import { resourceProperties } from "../validate.js";
import { runPuppetResource, type ResourceDeps } from "./run.js";

/** puppet resource TYPE NAME key=value ...: type allowed, not catalog-managed (unless allowed), then the real Puppet. */
export function apply(deps: ResourceDeps): ActionHandler<ActionInput<ResourceDDL, "apply">> {
  return async (input, ctx) => {
    const s = resolveResourceSettings({ ...deps.config, ...ctx.config });
    const params = resourceProperties(input.properties);
    if (params.length === 0) throw new RpcError(Status.MissingData, "no properties to set; use the show action to read a resource");
    ensureResourceAllowed(s, input.type, input.name, params);
    // Through the privileged helper the catalog's list is checked there, as root (Puppet keeps it 0640).
    if (!s.allowManaged && deps.ops?.via !== "helper") {
      let managed: boolean;
      try {
        managed = isManagedResource(readManagedResources(s.resourcesFile), input.type, input.name);
      } catch (e) {
        throw new RpcError(Status.Aborted, `${(e as Error).message}; refusing to change resources while the catalog's list is unknown`, { type: input.type, name: input.name });
      }
      if (managed) {
        throw new RpcError(Status.Aborted, `${input.type}[${input.name}] is managed by this node's Puppet catalog (${s.resourcesFile}); change it in Puppet code, or set plugins.resource.allow_managed`, {
          type: input.type,
          name: input.name,
          reason: "managed",
        });
      }
    }
    const r = await runPuppetResource(deps.ops, s, ctx, input.type, input.name, params);
    const reply = {
      type: input.type,
      name: input.name,
      state: r.state,
      changed: r.changes.length > 0,
      changes: r.changes,
      errors: r.errors,
      warnings: r.warnings,
      duration: r.durationMs / 1000,
    };
    ctx.log.info({ type: input.type, name: input.name, properties: params.map(([k]) => k), changed: reply.changed, ok: r.ok }, "puppet resource applied");
    if (!r.ok) throw new RpcError(Status.Aborted, `puppet resource ${input.type} ${input.name} failed: ${r.errors[0] ?? "see errors"}`, reply);
    return reply;
  };
}
