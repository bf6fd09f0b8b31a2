export { createResourceAgent, type ResourceAgent, type ResourceDeps } from "./agent.js";
export { resourceDDL, type ResourceDDL } from "./ddl.js";
export { resolveResourceSettings, type ResourceSettings } from "./settings.js";
export { parsePropertyArgs, resourceProperties } from "./validate.js";
