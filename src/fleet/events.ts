import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { subjects } from "../protocol/subjects.js";

// Node events (ActionContext.emit): `muster.event.<agent>.<event>`, JSON {identity, agent, event, time, data}.

export interface NodeEvent<D = Record<string, unknown>> {
  identity: string;
  agent: string;
  event: string;
  time: number;
  data: D;
}

/** Parse one event payload; undefined when it is not a well-formed event. */
export function parseNodeEvent(payload: Uint8Array | string): NodeEvent | undefined {
  let v: unknown;
  try {
    v = JSON.parse(typeof payload === "string" ? payload : new TextDecoder().decode(payload));
  } catch {
    return undefined;
  }
  if (typeof v !== "object" || v === null) return undefined;
  const o = v as Record<string, unknown>;
  if (typeof o.identity !== "string" || typeof o.agent !== "string" || typeof o.event !== "string") return undefined;
  if (typeof o.data !== "object" || o.data === null || Array.isArray(o.data)) return undefined;
  return { identity: o.identity, agent: o.agent, event: o.event, time: typeof o.time === "number" ? o.time : 0, data: o.data as Record<string, unknown> };
}

/**
 * Call `onEvent` for every `agent`/`event` published from now on (subscribe before starting the work
 * whose end the events report). Malformed payloads are dropped. Returns the subscription.
 */
export function subscribeNodeEvents(nc: NatsConnection, agent: string, event: string, onEvent: (e: NodeEvent) => void): Subscription {
  return nc.subscribe(subjects.event(agent, event), {
    callback: (err, msg) => {
      if (err) return;
      const e = parseNodeEvent(msg.data);
      if (e) onEvent(e);
    },
  });
}
