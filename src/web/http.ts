import type { FastifyReply, FastifyRequest } from "fastify";
import { FilterError } from "../filter/index.js";
import { explorerFilter, filterProblem } from "./explorer.js";

// What every route group shares: the API's error, the checks of query values and filters, and the
// server-sent event stream.

export const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/** An error the API answers with its own status and code. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

export function header(req: FastifyRequest, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

export function checkFilter(text: string): void {
  if (text.length > 4096) throw new ApiError(400, "filter", "the filter is longer than 4096 characters", { column: 4097 });
  try {
    explorerFilter(text);
  } catch (e) {
    if (e instanceof FilterError) {
      const p = filterProblem(e);
      throw new ApiError(400, "filter", p.message, { column: p.column });
    }
    throw e;
  }
}

export function intParam(v: string | undefined, dflt: number, name: string): number {
  if (v === undefined || v === "") return dflt;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new ApiError(400, "bad_request", `${name} must be a whole number >= 0`);
  return n;
}

const HEARTBEAT_MS = 15_000;

export interface EventStream {
  send(event: string, data: unknown): void;
  /** Sends text already serialised as JSON (a report made once for every open page). */
  sendRaw(event: string, json: string): void;
  onClose(f: () => void): void;
}

/**
 * A server-sent event stream on the raw response. Plain SSE over reply.raw: the protocol is a few
 * header lines and `event:`/`data:` frames, and the fastify SSE plugins add little but a dependency.
 */
export function openStream(req: FastifyRequest, reply: FastifyReply): EventStream {
  reply.hijack();
  const res = reply.raw;
  res.writeHead(200, {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-store",
    connection: "keep-alive",
    "x-accel-buffering": "no",
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
  });
  res.write("retry: 2000\n\n"); // browsers reconnect after 2 s; each reconnect starts with a snapshot
  let closed = false;
  const closers: (() => void)[] = [];
  const beat = setInterval(() => res.write(": keep-alive\n\n"), HEARTBEAT_MS);
  const close = () => {
    if (closed) return;
    closed = true;
    clearInterval(beat);
    for (const c of closers) c();
  };
  req.raw.on("close", close);
  res.on("error", close);
  const sendRaw = (event: string, json: string) => {
    if (!closed) res.write(`event: ${event}\ndata: ${json}\n\n`);
  };
  return {
    send: (event, data) => sendRaw(event, JSON.stringify(data)),
    sendRaw,
    onClose(f) {
      if (closed) f();
      else closers.push(f);
    },
  };
}
