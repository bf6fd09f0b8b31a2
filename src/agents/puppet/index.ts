export { createPuppetAgent, type MusterPuppetAgent, type PuppetAgentDeps } from "./agent.js";
export { puppetDDL, RUN_COMPLETE_EVENT, type PuppetDDL, type RunCompleteData } from "./ddl.js";
export { DEFAULTS as puppetDefaults, resolveSettings as resolvePuppetSettings, type PuppetSettings } from "./settings.js";
