export { createPuppetcaAgent, type PuppetcaAgent } from "./agent.js";
export { puppetcaDDL, type PuppetcaDDL } from "./ddl.js";
export type { PuppetcaDeps } from "./settings.js";
