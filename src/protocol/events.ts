import { isValidAgentName, isValidIdentity, subjects } from "./subjects.js";

// Node events (ActionContext.emit): `muster.event.<agent>.<event>`, JSON
// `{identity, agent, event, time, data}`, e.g. the puppet agent's run_complete. Built by the
// server's runtime, parsed here for every subscriber.

export interface NodeEvent<D = Record<string, unknown>> {
  identity: string;
  agent: string;
  event: string;
  time: number;
  data: D;
  /** The node's ed25519 public key and its signature over the rest (protocol/signing.ts signMessage). */
  pubkey?: string;
  signature?: string;
}

export const MAX_NODE_EVENT_BYTES = 1024 * 1024;
const EVENT_RE = /^[a-z][a-z0-9_]*$/;

export function isValidEventName(name: string): boolean {
  return EVENT_RE.test(name) && name.length <= 64;
}

export type NodeEventParse = { ok: true; event: NodeEvent } | { ok: false; reason: string };

const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: true });

export function encodeNodeEvent(e: NodeEvent): Uint8Array {
  return enc.encode(JSON.stringify({ identity: e.identity, agent: e.agent, event: e.event, time: e.time, data: e.data, pubkey: e.pubkey, signature: e.signature }));
}

/** Decode and check one node event; with `subject`, it must be the event the subject names. */
export function parseNodeEvent(payload: Uint8Array | string, subject?: string): NodeEventParse {
  const refuse = (reason: string): NodeEventParse => ({ ok: false, reason });
  const size = typeof payload === "string" ? enc.encode(payload).length : payload.length;
  if (size > MAX_NODE_EVENT_BYTES) return refuse(`too large: ${size} bytes, at most ${MAX_NODE_EVENT_BYTES}`);
  let v: unknown;
  try {
    v = JSON.parse(typeof payload === "string" ? payload : dec.decode(payload));
  } catch (e) {
    return refuse(`not UTF-8 JSON: ${(e as Error).message}`);
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) return refuse("not a JSON object");
  const o = v as Record<string, unknown>;
  if (typeof o.identity !== "string" || !isValidIdentity(o.identity)) return refuse("identity must be a valid identity");
  if (typeof o.agent !== "string" || !isValidAgentName(o.agent)) return refuse("agent must be a valid agent name");
  if (typeof o.event !== "string" || !isValidEventName(o.event)) return refuse("event must be a valid event name");
  if (typeof o.data !== "object" || o.data === null || Array.isArray(o.data)) return refuse("data must be a JSON object");
  if (o.time !== undefined && (typeof o.time !== "number" || !Number.isFinite(o.time))) return refuse("time must be a number of ms");
  if (o.pubkey !== undefined && (typeof o.pubkey !== "string" || o.pubkey.length > 64)) return refuse("pubkey must be a base64 string of at most 64 characters");
  if (o.signature !== undefined && (typeof o.signature !== "string" || o.signature.length > 128)) return refuse("signature must be a base64 string of at most 128 characters");
  const event: NodeEvent = { identity: o.identity, agent: o.agent, event: o.event, time: typeof o.time === "number" ? o.time : 0, data: o.data as Record<string, unknown> };
  if (typeof o.pubkey === "string") event.pubkey = o.pubkey;
  if (typeof o.signature === "string") event.signature = o.signature;
  if (subject !== undefined && subject !== subjects.event(event.agent, event.event)) return refuse(`event ${event.agent}.${event.event} arrived on ${subject}`);
  return { ok: true, event };
}

// Runall progress (`muster puppet runall`, or a run the web console started): node events of the
// pseudo-agent `runall` (`muster.event.runall.<started|progress|finished>`), published by the
// process running the scheduler, `identity` naming that process's caller. Every event names its
// run by `data.id`, so watchers (the web console) follow runs started anywhere. docs/protocol.md.

export const RUNALL_AGENT = "runall";
export const RunallEventTypes = ["started", "progress", "finished"] as const;
export type RunallEventType = (typeof RunallEventTypes)[number];

export interface RunallStarted {
  id: string;
  started_by: string;
  /** ms epoch */
  started: number;
  /** The filter, as the starter wrote it (text; informational). */
  filter: string;
  concurrency: number;
  total: number;
}

/** One scheduler progress event (src/fleet/runall.ts ProgressEvent), under the run's id. */
export interface RunallProgress {
  id: string;
  type: "start" | "finish" | "skip";
  identity: string;
  at: number;
  outcome?: string;
  /** Why, in a line (finish and skip): the run's message, the refusal, the timeout. */
  detail?: string;
  /** How long the node's run took, sent to finished (finish). */
  duration_ms?: number;
  done?: number;
  total?: number;
}

export interface RunallFinished {
  id: string;
  at: number;
  counts: Record<string, number>;
}

export type RunallEvent = { event: "started"; data: RunallStarted } | { event: "progress"; data: RunallProgress } | { event: "finished"; data: RunallFinished };

const isStr = (x: unknown): x is string => typeof x === "string" && x.length > 0 && x.length <= 4096;
const isNum = (x: unknown): x is number => typeof x === "number" && Number.isFinite(x);

/** A node event as a runall event, or undefined when it is not a well-formed one. */
export function asRunallEvent(e: NodeEvent): RunallEvent | undefined {
  if (e.agent !== RUNALL_AGENT) return undefined;
  const d = e.data as Record<string, unknown>;
  if (!isStr(d.id)) return undefined;
  switch (e.event) {
    case "started":
      if (!isStr(d.started_by) || !isNum(d.started) || typeof d.filter !== "string" || !isNum(d.concurrency) || !isNum(d.total)) return undefined;
      return { event: "started", data: { id: d.id, started_by: d.started_by, started: d.started, filter: d.filter, concurrency: d.concurrency, total: d.total } };
    case "progress":
      if (!["start", "finish", "skip"].includes(d.type as string) || !isStr(d.identity) || !isNum(d.at)) return undefined;
      return {
        event: "progress",
        data: { id: d.id, type: d.type as RunallProgress["type"], identity: d.identity, at: d.at, ...(isStr(d.outcome) ? { outcome: d.outcome } : {}), ...(isStr(d.detail) ? { detail: d.detail.slice(0, 1000) } : {}), ...(isNum(d.duration_ms) ? { duration_ms: d.duration_ms } : {}), ...(isNum(d.done) ? { done: d.done } : {}), ...(isNum(d.total) ? { total: d.total } : {}) },
      };
    case "finished":
      if (!isNum(d.at) || typeof d.counts !== "object" || d.counts === null) return undefined;
      return { event: "finished", data: { id: d.id, at: d.at, counts: Object.fromEntries(Object.entries(d.counts).filter(([, v]) => isNum(v))) as Record<string, number> } };
    default:
      return undefined;
  }
}
