import { appendFile } from "node:fs/promises";
import { isIP } from "node:net";
import Fastify from "fastify";
import { isLoopback } from "../security/loopback.js";

// Real local notification receivers for tests and the lab. Loopback only.

export interface WebhookReceiver {
  /** POST here (any path). */
  url: string;
  /** Every POST body in arrival order: parsed JSON, or the raw text for other content types. */
  received: unknown[];
  /** Resolves with the bodies once `n` have arrived; rejects after `timeoutMs` saying what arrived. */
  waitFor(n: number, timeoutMs: number): Promise<unknown[]>;
  close(): Promise<void>;
}

export interface WebhookReceiverOptions {
  /** Loopback address to listen on (default 127.0.0.1). */
  host?: string;
  /** Also append each body as one JSON line to this file. */
  file?: string;
  /** HTTP status to answer with (default 200); set e.g. 500 to play a failing endpoint. Bodies are recorded either way. */
  status?: number;
  /** Port to listen on (default: a free one). */
  port?: number;
}

export async function startWebhookReceiver(opts: WebhookReceiverOptions = {}): Promise<WebhookReceiver> {
  const host = opts.host ?? "127.0.0.1";
  if (!isLoopback(host)) throw new Error(`webhook receiver must listen on a loopback address (127.0.0.0/8 or ::1), not ${host}`);
  const status = opts.status ?? 200;
  const received: unknown[] = [];
  const waiters = new Set<{ n: number; resolve: (v: unknown[]) => void; reject: (e: Error) => void; timer: NodeJS.Timeout }>();
  let closed = false;

  const app = Fastify({ logger: false });
  // Keep bodies that are not JSON as text rather than refusing them.
  app.addContentTypeParser("*", { parseAs: "string" }, (_req, body, done) => done(null, body));
  app.post("/*", async (req, reply) => {
    const body = req.body ?? null;
    if (opts.file) await appendFile(opts.file, `${JSON.stringify(body)}\n`);
    received.push(body);
    for (const w of waiters) {
      if (received.length >= w.n) {
        waiters.delete(w);
        clearTimeout(w.timer);
        w.resolve(received.slice());
      }
    }
    return reply.code(status).send({ ok: status >= 200 && status < 300 });
  });
  await app.listen({ host, port: opts.port ?? 0 });
  const addr = app.server.address();
  if (!addr || typeof addr !== "object") throw new Error("webhook receiver has no address");
  const url = `http://${isIP(host) === 6 ? `[${host}]` : host}:${addr.port}/`;

  return {
    url,
    received,
    waitFor(n, timeoutMs) {
      if (received.length >= n) return Promise.resolve(received.slice());
      if (closed) return Promise.reject(new Error(`webhook receiver at ${url} is closed`));
      return new Promise((resolve, reject) => {
        const w = {
          n,
          resolve,
          reject,
          timer: setTimeout(() => {
            waiters.delete(w);
            reject(new Error(`webhook receiver at ${url}: expected ${n} POST(s) within ${timeoutMs} ms, got ${received.length}`));
          }, timeoutMs),
        };
        waiters.add(w);
      });
    },
    async close() {
      if (closed) return;
      closed = true;
      for (const w of waiters) {
        clearTimeout(w.timer);
        w.reject(new Error(`webhook receiver at ${url} closed after ${received.length} of ${w.n} POST(s)`));
      }
      waiters.clear();
      await app.close();
    },
  };
}
