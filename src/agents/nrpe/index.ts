export { createNrpeAgent, type NrpeAgent, type NrpeDeps } from "./agent.js";
export { nrpeDDL, type NrpeDDL } from "./ddl.js";
export { loadNrpeConfig, parseNrpeConfig, type NrpeCommand, type NrpeConfig } from "./config.js";
export { argumentsProblem, commandArgv, splitArgs, splitCommandLine, substituteArgs, NASTY_METACHARS } from "./command.js";
export { parsePluginOutput, runPlugin, State as NagiosState, stateName } from "./plugin.js";
export { resolveNrpeSettings, type NrpeSettings } from "./settings.js";
