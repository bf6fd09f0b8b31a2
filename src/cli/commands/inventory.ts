import { Command } from "commander";
import { addCommonOptions, type RpcOpts } from "../options.js";

export function inventoryCommand(): Command {
  return addCommonOptions(new Command("inventory"))
    .description("Everything one node knows about itself: agents, facts, classes, collectives, data plugins")
    .argument("<identity>", "the node's identity")
    .action(async (identity: string, o: RpcOpts) => {
      const [{ executeRpc }, { formatValue }, { rpcutilDDL }, { Status }] = await Promise.all([import("../run-rpc.js"), import("../style.js"), import("../../agents/rpcutil/ddl.js"), import("../../protocol/status.js")]);
      await executeRpc({ ...o, wi: [identity], progress: false }, "rpcutil", "inventory", {}, rpcutilDDL, (r) => {
        const reply = r.replies[0];
        if (!reply) return "";
        if (reply.statuscode !== Status.OK) return `${reply.sender}: ${reply.statusmsg}`;
        const d = reply.data as { agents?: string[]; facts?: Record<string, unknown>; classes?: string[]; collectives?: string[]; main_collective?: string; data_plugins?: string[]; version?: string };
        const lines = [`Inventory for ${reply.sender}:`, "", `   Server Version: ${d.version ?? ""}`, "", "   Agents:", ...(d.agents ?? []).map((a) => `      ${a}`), "", "   Data Plugins:", ...(d.data_plugins ?? []).map((a) => `      ${a}`), "", `   Main Collective: ${d.main_collective ?? ""}`, "   Collectives:", ...(d.collectives ?? []).map((c) => `      ${c}`), "", "   Classes:", ...(d.classes ?? []).map((c) => `      ${c}`), "", "   Facts:"];
        const facts = d.facts ?? {};
        for (const k of Object.keys(facts).sort()) lines.push(`      ${k} => ${formatValue(facts[k])}`);
        return lines.join("\n");
      });
    });
}
