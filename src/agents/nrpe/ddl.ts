import type { AgentDDL } from "../../ddl/types.js";

// The nrpe agent's contract: run a Nagios check defined in the node's nrpe.d/*.cfg
// (`command[name]=...`), as NRPE would, but without a shell.

export const NRPE_COMMAND = "^[A-Za-z0-9_-]+$";
/** NRPE's nasty_metachars plus " $ and NUL: refused in arguments. */
export const NRPE_ARGS = "^[^|`&><'\"\\\\\\[\\]{};$\\r\\n\\x00]*$";

export const nrpeDDL = {
  metadata: {
    name: "nrpe",
    description: "Runs Nagios checks defined in the node's NRPE configuration (nrpe.d/*.cfg) and returns their state, output and perfdata",
    author: "muster",
    license: "Apache-2.0",
    version: "0.1.0",
    // The timeout setting (default 10 s, at most 55) bounds each check below this.
    timeout: 60,
  },
  actions: {
    runcommand: {
      description: "Run one NRPE command; a WARNING, CRITICAL or UNKNOWN result is a failed reply (statusmsg the state) carrying the same data",
      display: "failed",
      input: {
        command: { prompt: "Command", description: "Name of the command in nrpe.d/*.cfg (command[NAME]=...)", type: "string", validation: NRPE_COMMAND, maxlength: 128, optional: false },
        args: {
          prompt: "Arguments",
          description: "Arguments for $ARG1$, $ARG2$, ... separated by '!' as check_nrpe -a sends them; no shell metacharacters (| ` & > < ' \" \\ [ ] { } ; $)",
          type: "string",
          validation: NRPE_ARGS,
          maxlength: 1024,
          optional: true,
        },
      },
      output: {
        command: { description: "The command run", display_as: "Command", type: "string" },
        exitcode: { description: "Nagios state: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN", display_as: "Exit Code", type: "integer" },
        output: { description: "The plugin's output (text before '|', long output lines included)", display_as: "Output", type: "string" },
        perfdata: { description: "Performance data (after '|')", display_as: "Performance Data", type: "string", default: "" },
      },
      aggregate: [{ function: "summary", output: "exitcode" }],
    },
  },
} as const satisfies AgentDDL;

export type NrpeDDL = typeof nrpeDDL;
