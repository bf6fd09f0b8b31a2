import { defineAgent, type Agent } from "../../agent/agent.js";
import { runcommand } from "./actions/runcommand.js";
import { nrpeDDL, type NrpeDDL } from "./ddl.js";

// The nrpe agent: Nagios checks from the node's NRPE configuration (nrpe.d/*.cfg), run without a
// shell (command.ts), read as Nagios reads them (plugin.ts). Settings (`plugins.nrpe`) are
// documented in settings.ts.

export interface NrpeDeps {
  /** `plugins.nrpe` settings; ctx.config overlays them per request. */
  config?: Record<string, unknown>;
}

export type NrpeAgent = Agent<NrpeDDL>;

export function createNrpeAgent(deps: NrpeDeps = {}): NrpeAgent {
  const d: NrpeDeps = { config: { ...(deps.config ?? {}) } };
  return defineAgent({ ddl: nrpeDDL, actions: { runcommand: runcommand(d) } });
}
