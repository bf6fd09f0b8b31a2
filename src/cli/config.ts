// The client config lives in src/config/client.ts (daemons find the broker with it too).
export { clientConfigSchema, findClientConfig, loadClientConfig, resolveBrokerSettings, type BrokerSettings, type ClientConfig } from "../config/client.js";
