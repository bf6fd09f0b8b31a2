// muster's public API: what users' scripts (and muster's own provisioner and CLI) build on.
// Everything else under src/ is internal and may change.
//
//   import { MusterClient, buildFilter, rpcutilDDL } from "muster";
//   const client = await MusterClient.connect({ broker: "nats://127.0.0.1:4222" });
//   const nodes = await client.discover({ filter: buildFilter({ fact: ["country=de"] }) });
//   const res = await client.agent(rpcutilDDL).call("get_fact", { fact: "os.family" }, { nodes });
//   await client.close();

export {
  MusterClient,
  DiscoveryMethods,
  type ClientOptions,
  type CallOptions,
  type DiscoverOptions,
  type DiscoveryMethod,
  type EventSubscription,
  type RejectedReply,
  type RpcResult,
  type RpcStats,
  type SourceSpec,
  type TypedAgentClient,
  type TypedReply,
  type TypedRpcResult,
} from "./client/client.js";
export type { NodeSource, DiscoveryOptions } from "./client/discovery/source.js";
export { FlatfileSource } from "./client/discovery/flatfile.js";
export { parseLimit, type LimitSpec } from "./client/limit.js";
export { buildFilter, FilterError, type FilterOptions } from "./filter/index.js";
export { aggregateReplies, formatAggregate, type AggregateResult } from "./ddl/index.js";
export type { AgentDDL, ActionSpec, InputSpec, OutputSpec, ActionInput, ActionOutput, CallInput } from "./ddl/types.js";
export { defineAgent, type Agent, type ActionContext, type ActionHandler, type DataPlugin } from "./agent/agent.js";
export { Status, statusName, type StatusCode } from "./protocol/status.js";
export type { Filter, FactFilter, NodeMetadata, Reply, Request } from "./protocol/types.js";
export { emptyFilter } from "./protocol/types.js";
export { parseLifecycleEvent, LifecycleTypes, type LifecycleEvent, type LifecycleType, type StartupEvent, type ShutdownEvent } from "./protocol/lifecycle.js";
export { parseNodeEvent, type NodeEvent } from "./protocol/events.js";
export { DEFAULT_STATE_BUCKET, DEFAULT_REGISTRY_BUCKET, DEFAULT_NODE_KEYS_BUCKET } from "./protocol/buckets.js";
export { MusterError, RpcError, ErrorCodes, type ErrorCode } from "./errors.js";
export { rpcutilDDL } from "./agents/rpcutil/ddl.js";
export { provisionDDL } from "./agents/provision/ddl.js";
export { puppetcaDDL } from "./agents/puppetca/ddl.js";
export { puppetDDL } from "./agents/puppet/ddl.js";
export { notifyDDL } from "./agents/notify/ddl.js";
export { VERSION } from "./version.js";
