import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import { RpcError } from "../../../errors.js";
import { Status } from "../../../protocol/status.js";
import type { ProvisionDDL } from "../ddl.js";
import { asRpcError, puppetTarget, type ProvisionRuntime } from "../state.js";

/**
 * Point the agent at a master. puppet.conf [main] gets `server = <ip>` (or `server = puppet`
 * with use_hosts_file, whose hosts file then maps `puppet` to the ip, as mcprovision did).
 */
export function setPuppetHost(rt: ProvisionRuntime): ActionHandler<ActionInput<ProvisionDDL, "set_puppet_host">> {
  return async (input, ctx) => {
    const s = rt.settings(ctx);
    rt.ensureEnabled(s);
    if (input.port !== undefined && (input.port < 1 || input.port > 65535)) throw new RpcError(Status.InvalidData, `port must be 1-65535, got ${input.port}`);
    try {
      const r = await rt.ops.setPuppetServer(puppetTarget(s), { host: input.ipaddress, ...(input.port !== undefined ? { port: input.port } : {}), useHostsFile: s.useHostsFile, hostsFile: s.hostsFile });
      ctx.log.info({ server: r.server, port: input.port }, "puppet master set");
      return { server: r.server, serverport: input.port ?? null, puppet_conf: r.puppetConf, hosts_file: r.hostsFile };
    } catch (e) {
      throw asRpcError(e);
    }
  };
}
