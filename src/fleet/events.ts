// Node events moved to protocol/events.ts (the wire contract) and the client (client.onEvent).
export type { NodeEvent } from "../protocol/events.js";
