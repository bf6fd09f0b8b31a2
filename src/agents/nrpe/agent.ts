import { defineAgent, type Agent } from "../../agent/agent.js";
import { runcommand } from "./actions/runcommand.js";
import { nrpeDDL, type NrpeDDL } from "./ddl.js";
import type { NrpeDeps } from "./settings.js";

export type { NrpeDeps } from "./settings.js";

// The nrpe agent: Nagios checks from the node's NRPE configuration (nrpe.d/*.cfg), run without a
// shell (command.ts), read as Nagios reads them (plugin.ts). Settings (`plugins.nrpe`) are
// documented in settings.ts.

export type NrpeAgent = Agent<NrpeDDL>;

export function createNrpeAgent(deps: NrpeDeps = {}): NrpeAgent {
  const d: NrpeDeps = { config: { ...(deps.config ?? {}) } };
  return defineAgent({ ddl: nrpeDDL, actions: { runcommand: runcommand(d) } });
}
