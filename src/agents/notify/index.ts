export { createNotifyAgent, type NotifyAgent, type NotifyDeps } from "./agent.js";
export { notifyDDL, type NotifyDDL } from "./ddl.js";
export type { DeliveryResult, SendInput, SendReply } from "./actions/send.js";
