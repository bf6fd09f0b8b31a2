import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import { RpcError } from "../../../errors.js";
import { Status } from "../../../protocol/status.js";
import { writeHostsEntry } from "../../../puppet/index.js";
import type { ProvisionDDL } from "../ddl.js";
import { asRpcError, puppetAgentFor, type ProvisionRuntime } from "../state.js";

/**
 * Point the agent at a master. puppet.conf [main] gets `server = <ip>` (or `server = puppet`
 * with use_hosts_file, whose hosts file then maps `puppet` to the ip, as mcprovision did).
 */
export function setPuppetHost(rt: ProvisionRuntime): ActionHandler<ActionInput<ProvisionDDL, "set_puppet_host">> {
  return (input, ctx) => {
    const s = rt.settings(ctx);
    rt.ensureEnabled(s);
    if (input.port !== undefined && (input.port < 1 || input.port > 65535)) throw new RpcError(Status.InvalidData, `port must be 1-65535, got ${input.port}`);
    const agent = puppetAgentFor(s);
    try {
      if (s.useHostsFile) writeHostsEntry(s.hostsFile, input.ipaddress, ["puppet"]);
      const server = s.useHostsFile ? "puppet" : input.ipaddress;
      agent.setPuppetHost(server, input.port);
      ctx.log.info({ server, port: input.port }, "puppet master set");
      return { server, serverport: input.port ?? null, puppet_conf: agent.puppetConfPath, hosts_file: s.useHostsFile ? s.hostsFile : null };
    } catch (e) {
      throw asRpcError(e);
    }
  };
}
