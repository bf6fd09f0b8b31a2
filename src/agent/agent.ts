import type { Logger } from "pino";
import type { AgentDDL, ActionInput, ActionName } from "../ddl/types.js";
import type { ServiceStatus } from "../protocol/service.js";
import type { NodeMetadata } from "../protocol/types.js";

// An agent is `(request, context) -> reply`: it never touches NATS. The server owns transport,
// verification, filtering, validation against the DDL and audit; a handler sees validated input.

export interface ActionContext {
  requestId: string;
  caller: string;
  sender: string;
  identity: string;
  agent: string;
  action: string;
  /** The agent's own settings from the server config (`plugins.<agent>`). */
  config: Record<string, unknown>;
  log: Logger;
  /** Aborted when the DDL timeout expires or the server shuts down. */
  signal: AbortSignal;
  metadata(): NodeMetadata;
  /** This node's own public key (base64 ed25519), the one its replies are signed with; absent when it has none. */
  nodeKey?: string;
  /**
   * Publish an event about this node (subject `muster.event.<agent>.<event>`, JSON
   * `{identity, agent, event, time, data}`), e.g. a Puppet run that ended after the request that
   * started it was answered. Usable after the handler returned; a no-op when nothing is connected.
   */
  emit(event: string, data: Record<string, unknown>): void;
  /**
   * Re-read the node's facts-independent metadata (its Puppet classes) now, e.g. right after a
   * Puppet run the agent started, and publish a registration if it changed. Resolves once the new
   * metadata is in place. Absent where nothing backs it (emulated nodes, direct handler calls).
   */
  refreshMetadata?: () => Promise<void>;
}

/**
 * A key-value store the server keeps for an agent (a JetStream KV bucket): for state that must
 * survive a restart of the node. Entries expire after the bucket's TTL. Absent where nothing backs
 * it (emulated nodes, direct handler calls); an agent must work, less durably, without it.
 */
export interface AgentKv {
  get(key: string): Promise<Uint8Array | undefined>;
  put(key: string, value: Uint8Array | string): Promise<void>;
}

/** Opens (creating it when missing) an agent's bucket; rejects when the node has no JetStream reach. */
export type AgentKvOpener = (bucket: string, o: { ttlMs: number }) => Promise<AgentKv>;

export type ReplyData = Record<string, unknown>;

/**
 * Throw RpcError (src/errors.ts) to reply with a non-zero status and optional data.
 *
 * Declared through a method signature, whose parameters TypeScript compares bivariantly, so that
 * an `Agent<SomeDDL>` is an `Agent` without a cast: the runtime hosts agents of every DDL side by
 * side and calls a handler only with input validated against that agent's own DDL, which is what
 * makes the wider view sound.
 */
export type ActionHandler<I = Record<string, unknown>> = {
  handle(input: I, ctx: ActionContext): Promise<ReplyData> | ReplyData;
}["handle"];

export type Handlers<D extends AgentDDL> = { [A in ActionName<D>]: ActionHandler<ActionInput<D, A>> };

/** A data plugin for compound filters: `name('argument').field OP value`. */
export interface DataPlugin {
  name: string;
  description: string;
  /** Resolve the plugin for one node. Return undefined when the argument names nothing. */
  query(argument: string | undefined, ctx: { metadata: NodeMetadata }): Promise<Record<string, unknown> | undefined> | Record<string, unknown> | undefined;
}

export interface Agent<D extends AgentDDL = AgentDDL> {
  ddl: D;
  actions: Handlers<D>;
  dataPlugins?: DataPlugin[];
  /**
   * An agent that makes its node one of the site's services (puppetca: a master; notify: the
   * notifier) says how that service is, check by check; the node's every heartbeat carries it
   * (docs/fleet.md#the-sites-services). Called every heartbeat: answer from what is known, and
   * look things up in the background.
   */
  service?(ctx: { identity: string; config: Record<string, unknown>; log: Logger }): ServiceStatus | Promise<ServiceStatus>;
  /**
   * Whether the node currently offers this agent (it shows in `agents` and answers `-A`).
   * The provision agent turns itself off once provisioning is disabled.
   */
  isActive?(): boolean;
}

/** Identity helper that keeps the DDL's literal types for the handlers. */
export function defineAgent<const D extends AgentDDL>(agent: Agent<D>): Agent<D> {
  return agent;
}
