import { Command } from "commander";
import { rpcutilDDL } from "../../agents/rpcutil/ddl.js";
import { Status } from "../../protocol/status.js";
import { addRpcOptions, type RpcOpts } from "../options.js";

export function factsCommand(): Command {
  return addRpcOptions(new Command("facts"))
    .description("Show how a fact's values are distributed across the matching nodes")
    .argument("<fact>", "fact name or dotted path (os.family)")
    .option("--verbose", "list the nodes under each value")
    .addHelpText("after", "\nExample:\n  muster facts country -C web")
    .action(async (fact: string, o: RpcOpts & { verbose?: boolean }) => {
      const [{ executeRpc }, { formatValue }] = await Promise.all([import("../run-rpc.js"), import("../output.js")]);
      await executeRpc(o, "rpcutil", "get_fact", { fact }, rpcutilDDL, (result) => {
        const byValue = new Map<string, string[]>();
        for (const r of result.replies) {
          if (r.statuscode !== Status.OK) continue;
          const v = r.data.value === null || r.data.value === undefined ? "(missing)" : formatValue(r.data.value);
          byValue.set(v, [...(byValue.get(v) ?? []), r.sender]);
        }
        const rows = [...byValue.entries()].sort((a, b) => b[1].length - a[1].length || a[0].localeCompare(b[0]));
        const w = Math.max(0, ...rows.map(([v]) => v.length));
        const lines = [`Report for fact: ${fact}`, ""];
        for (const [v, nodes] of rows) {
          lines.push(`        ${v.padEnd(w)}   found ${nodes.length} times`);
          if (o.verbose) lines.push(...nodes.sort().map((n) => `            ${n}`), "");
        }
        return lines.join("\n");
      }, { aggregates: false });
    });
}
