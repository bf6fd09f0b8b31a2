import type { ActionHandler } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import { RpcError } from "../../../errors.js";
import { Status } from "../../../protocol/status.js";
import { argumentsProblem, CommandLineError, commandArgv, splitArgs } from "../command.js";
import { COMMAND_NAME, loadNrpeConfig } from "../config.js";
import type { NrpeDDL } from "../ddl.js";
import { runPlugin, State, stateName, type PluginResult } from "../plugin.js";
import { pluginEnv, resolveNrpeSettings, type NrpeDeps } from "../settings.js";

/**
 * Runs one command from nrpe.d. As MCollective's nrpe agent: an OK check is an OK reply; any
 * other state is a failed reply (Aborted, statusmsg WARNING/CRITICAL/UNKNOWN) with the same data,
 * so `muster rpc` shows the failing checks by default and `muster nrpe` reads exitcode from both.
 */
export function runcommand(deps: NrpeDeps): ActionHandler<ActionInput<NrpeDDL, "runcommand">> {
  return async (input, ctx) => {
    const s = resolveNrpeSettings({ ...deps.config, ...ctx.config });
    const command = input.command;
    const unknown = (status: typeof Status.InvalidData | typeof Status.Aborted, why: string): never => {
      throw new RpcError(status, why, { command, exitcode: State.UNKNOWN, output: `UNKNOWN: ${why}`, perfdata: "" });
    };
    if (!COMMAND_NAME.test(command)) unknown(Status.InvalidData, `invalid command name ${JSON.stringify(command)}: it must match ${COMMAND_NAME.source}`);
    const args = splitArgs(input.args);
    if (args.length > 0 && !s.allowArguments) unknown(Status.InvalidData, "this node does not accept command arguments (plugins.nrpe.allow_arguments is false)");
    const problem = argumentsProblem(args);
    if (problem) unknown(Status.InvalidData, problem);

    const cfg = loadNrpeConfig(s.confDir);
    const def = cfg.commands.get(command);
    if (!def) {
      const known = [...cfg.commands.keys()].sort();
      const detail = cfg.problems.length ? `; problems in the configuration: ${cfg.problems.slice(0, 5).join("; ")}` : "";
      unknown(Status.Aborted, `no such command: ${command} in ${s.confDir} (defined: ${known.join(", ") || "none"})${detail}`);
    }
    let argv: string[] = [];
    try {
      argv = commandArgv(def!.line, args);
    } catch (e) {
      if (e instanceof CommandLineError) unknown(Status.Aborted, `command[${command}] at ${def!.source} cannot run: ${e.message}`);
      throw e;
    }

    const r = await runPlugin(argv, { timeoutMs: s.timeoutMs, signal: ctx.signal, env: pluginEnv(s) });
    const reply: Record<string, unknown> & PluginResult = { command, exitcode: r.exitcode, output: r.output, perfdata: r.perfdata };
    ctx.log.debug({ command, exitcode: r.exitcode }, "nrpe check ran");
    if (r.aborted) throw new RpcError(Status.Aborted, "check cancelled", reply);
    if (r.exitcode !== State.OK) throw new RpcError(Status.Aborted, stateName[r.exitcode] ?? "UNKNOWN", reply);
    return reply;
  };
}
