export { createProvisionAgent, isProvisioned, type ProvisionAgent, type ProvisionDeps } from "./agent.js";
export { provisionDDL, type ProvisionDDL } from "./ddl.js";
export { DEFAULTS as provisionDefaults, resolveSettings as resolveProvisionSettings, type ProvisionSettings } from "./state.js";
