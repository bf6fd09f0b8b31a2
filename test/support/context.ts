import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { pino } from "pino";
import type { ActionContext, ReplyData } from "../../src/agent/agent.js";
import { validateInput } from "../../src/ddl/validate.js";
import type { AgentDDL } from "../../src/ddl/types.js";
import { RpcError } from "../../src/errors.js";
import type { NodeMetadata } from "../../src/protocol/types.js";

export type TestContext = ActionContext & {
  /** Abort the context's signal, as the server does on timeout or shutdown. */
  abort(reason?: unknown): void;
  /** Events the handler emitted (ctx.emit), in order. */
  emitted: { event: string; data: Record<string, unknown> }[];
};

export type ContextOverrides = Partial<Omit<ActionContext, "metadata">> & {
  /** Node metadata, or a function returning it. */
  metadata?: NodeMetadata | (() => NodeMetadata);
};

/**
 * An ActionContext for calling an agent's handlers directly: silent logger, a fresh
 * AbortController (use `abort()`), empty config, and metadata for the context's identity.
 * Anything passed in wins.
 */
export function makeContext(overrides: ContextOverrides = {}): TestContext {
  const controller = new AbortController();
  const emitted: { event: string; data: Record<string, unknown> }[] = [];
  const identity = overrides.identity ?? "node1.test";
  const agent = overrides.agent ?? "test";
  const metadata: NodeMetadata | (() => NodeMetadata) = overrides.metadata ?? {
    identity,
    facts: {},
    classes: [],
    agents: [agent],
    collectives: ["muster"],
  };
  const { metadata: _m, ...rest } = overrides;
  return {
    requestId: randomUUID(),
    caller: "user=test",
    sender: "test-client",
    identity,
    agent,
    action: "test",
    config: {},
    log: pino({ level: "silent" }),
    signal: controller.signal,
    emit: (event: string, data: Record<string, unknown>) => emitted.push({ event, data }),
    ...rest,
    metadata: typeof metadata === "function" ? metadata : () => metadata,
    abort: (reason?: unknown) => controller.abort(reason),
    emitted,
  };
}

/** Calls an action as the server would: the input validated against the agent's DDL, then its handler. */
export async function callAction(agent: { ddl: AgentDDL; actions: object }, action: string, input: Record<string, unknown>, ctx: ActionContext): Promise<ReplyData> {
  const validated = validateInput(agent.ddl, action, input);
  const handler = (agent.actions as Record<string, (i: unknown, c: unknown) => Promise<ReplyData> | ReplyData>)[action];
  assert.ok(handler, `no handler for ${action}`);
  return handler(validated, ctx);
}

/** Expects `p` to fail with an RpcError of `status` (and a message matching `re`); returns the error. */
export async function rejectsWith(p: Promise<unknown> | unknown, status: number, re?: RegExp): Promise<RpcError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof RpcError, `expected RpcError, got ${String(e)}`);
    assert.equal(e.status, status, e.message);
    if (re) assert.match(e.message, re);
    return e;
  }
  assert.fail(`expected RpcError with status ${status}, got success`);
}
