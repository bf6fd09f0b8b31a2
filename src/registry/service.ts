import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import type { Logger } from "pino";
import { FilterError, validateWireFilter } from "../filter/index.js";
import { subjects } from "../protocol/subjects.js";
import type { RegistryStatus } from "./select.js";
import type { RegistryStore } from "./store.js";

// The registry's query subject, `muster.registry.<bucket>.query`: a filter in, the matching
// identities out, answered from the daemon's memory. This is what makes `--dm registry` fast:
// one small request and one reply instead of reading every record from the bucket. Clients that
// get no answer (no daemon, an old one, a reply too large for the broker) read the bucket instead.
//
//   request: {"filter": <wire Filter>, "collective": "muster"}
//   reply:   {"identities": ["a", "b"], "status": {nodes, newest_seen, started_at, expire_after_ms}}
//            |  {"error": "...", "code": "MUSTER_FILTER_INVALID" | "too_large" | "bad_request"}
// status (select.ts RegistryStatus) lets the client say when the registry is empty, filling or stale.
//
// Requests are untrusted: the filter goes through validateWireFilter like one arriving at a node.

export interface QueryRequest {
  filter: unknown;
  collective?: unknown;
}

export type QueryReply = { identities: string[]; status?: RegistryStatus } | { error: string; code: string };

const enc = new TextEncoder();
const dec = new TextDecoder();
const MAX_REQUEST_BYTES = 256 * 1024;

/** Answers one query (pure apart from reading the store). */
export function answerQuery(store: RegistryStore, data: Uint8Array, startedAt?: number): QueryReply {
  if (data.length > MAX_REQUEST_BYTES) return { error: `request of ${data.length} bytes; the limit is ${MAX_REQUEST_BYTES}`, code: "bad_request" };
  let req: QueryRequest;
  try {
    req = JSON.parse(dec.decode(data)) as QueryRequest;
  } catch {
    return { error: "request is not JSON", code: "bad_request" };
  }
  if (req === null || typeof req !== "object") return { error: "request is not an object", code: "bad_request" };
  if (req.collective !== undefined && typeof req.collective !== "string") return { error: "collective must be a string", code: "bad_request" };
  try {
    const filter = validateWireFilter(req.filter);
    const now = Date.now();
    return { identities: store.select(filter, req.collective, now).map((r) => r.identity), status: store.status(req.collective, startedAt, now) };
  } catch (e) {
    if (e instanceof FilterError) return { error: e.message, code: e.code };
    throw e;
  }
}

export function serveQueries(nc: NatsConnection, store: RegistryStore, log: Logger, startedAt?: number): Subscription {
  return nc.subscribe(subjects.registryQuery(store.bucket), {
    queue: `muster-registry-${store.bucket}`,
    callback: (err, msg) => {
      if (err || !msg.reply) return;
      let reply: QueryReply;
      try {
        reply = answerQuery(store, msg.data, startedAt);
      } catch (e) {
        log.error({ err: (e as Error).message }, "unexpected error answering a registry query");
        reply = { error: "internal error", code: "bad_request" };
      }
      let bytes = enc.encode(JSON.stringify(reply));
      if (bytes.length > nc.info!.max_payload) bytes = enc.encode(JSON.stringify({ error: `${bytes.length} bytes exceed the broker's max_payload`, code: "too_large" }));
      try {
        msg.respond(bytes);
      } catch (e) {
        log.warn({ err: (e as Error).message }, "cannot answer a registry query");
      }
    },
  });
}
