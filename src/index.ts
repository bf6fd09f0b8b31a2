// muster's public API: what users' scripts (and muster's own provisioner and CLI) build on.
// Everything else under src/ is internal and may change.
//
//   import { MusterClient, buildFilter, rpcutilDDL } from "muster";
//   const client = await MusterClient.connect({ broker: "nats://127.0.0.1:4222" });
//   const nodes = await client.discover({ filter: buildFilter({ fact: ["country=de"] }) });
//   const res = await client.agent(rpcutilDDL).call("get_fact", { fact: "os.family" }, { nodes });
//   await client.close();

export { MusterClient, type ClientOptions, type CallOptions, type DiscoverOptions, type RpcResult, type RpcStats, type TypedAgentClient } from "./client/client.js";
export type { NodeSource, DiscoveryOptions } from "./client/discovery/source.js";
export { FlatfileSource } from "./client/discovery/flatfile.js";
export { parseLimit, type LimitSpec } from "./client/limit.js";
export { buildFilter, FilterError, type FilterOptions } from "./filter/index.js";
export { aggregateReplies, formatAggregate, type AggregateResult } from "./ddl/index.js";
export type { AgentDDL, ActionSpec, InputSpec, OutputSpec, ActionInput, CallInput } from "./ddl/types.js";
export { defineAgent, type Agent, type ActionContext, type ActionHandler, type DataPlugin } from "./server/agent.js";
export { Status, statusName, type StatusCode } from "./protocol/status.js";
export type { Filter, FactFilter, NodeMetadata, Reply, Request } from "./protocol/types.js";
export { emptyFilter } from "./protocol/types.js";
export { MusterError, RpcError, ErrorCodes, type ErrorCode } from "./errors.js";
export { rpcutilDDL } from "./agents/rpcutil/ddl.js";
export { provisionDDL } from "./agents/provision/ddl.js";
export { puppetcaDDL } from "./agents/puppetca/ddl.js";
export { notifyDDL } from "./agents/notify/ddl.js";
export { VERSION } from "./version.js";
