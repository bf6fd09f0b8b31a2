import { Command } from "commander";
import { MusterError, RpcError } from "../../errors.js";
import { addRpcOptions, type RpcOpts } from "../options.js";

export function rpcCommand(): Command {
  return addRpcOptions(new Command("rpc"))
    .description("Call any agent action on the matching nodes: muster rpc AGENT ACTION [key=value ...]")
    .argument("<agent>", "agent name (see `muster rpc rpcutil agent_inventory`)")
    .argument("[action]", "action name; omit to list the agent's actions")
    .argument("[inputs...]", "inputs as key=value, converted to the DDL's types")
    .option("--ddl <file>", "DDL JSON for an agent the client does not know")
    .option("--describe", "print the action's inputs and outputs from its DDL and exit")
    .addHelpText("after", "\nExamples:\n  muster rpc rpcutil ping -F country=de\n  muster rpc rpcutil get_fact fact=os.family --display ok\n  muster rpc provision is_locked -I web1 --json\n\nExit codes: 0 all ok, 1 nothing discovered, 2 some failed, 3 no responses, 4 no discovery and no responses.")
    .action(async (agent: string, action: string | undefined, inputs: string[], o: RpcOpts & { ddl?: string; describe?: boolean }) => {
      const [{ findDDL }, { coerceCliInputs, renderActionHelp, renderAgentHelp, validateInput }, { loadClientConfig }] = await Promise.all([import("../../agents/ddls.js"), import("../../ddl/index.js"), import("../config.js")]);
      const cfg = loadClientConfig(o.config);
      const ddl = findDDL(agent, cfg.ddl_directories, o.ddl);
      if (!action) {
        process.stdout.write(`${renderAgentHelp(ddl)}\n`);
        return;
      }
      if (!ddl.actions[action]) throw new MusterError("MUSTER_UNKNOWN_ACTION", `agent '${agent}' has no action '${action}'; it has: ${Object.keys(ddl.actions).join(", ")}`);
      if (o.describe) {
        process.stdout.write(`${renderActionHelp(ddl, action)}\n`);
        return;
      }
      const data = coerceCliInputs(ddl, action, inputs);
      try {
        validateInput(ddl, action, data); // nothing is sent when the inputs are wrong
      } catch (e) {
        if (e instanceof RpcError) throw new MusterError("MUSTER_INPUT_INVALID", `${e.message}\n\n${renderActionHelp(ddl, action)}`);
        throw e;
      }
      await (await import("../run-rpc.js")).executeRpc(o, agent, action, data, ddl);
    });
}
