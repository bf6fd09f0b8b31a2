import { readFileSync } from "node:fs";
import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import { MusterError } from "../errors.js";
import { isLoopback } from "../security/loopback.js";
import { Semaphore } from "../semaphore.js";

// One PuppetDB over its HTTP API: PQL queries (/pdb/query/v4) and commands (/pdb/cmd/v1). The
// only place muster opens a connection to PuppetDB. https with a client certificate signed by the
// CA PuppetDB trusts (its jetty ssl-ca-cert), as the masters' puppet-terminus-puppetdb connects;
// plain http only to a loopback address, PuppetDB's unauthenticated port.
//
// Answers are untrusted: bounded in size and time, parsed as JSON, and their shape checked by
// whoever reads them (discover.ts, runs.ts).

export interface PuppetDbSettings {
  /** https://puppetdb.example.net:8081, or http://127.0.0.1:8080 on PuppetDB's own machine. */
  url: string;
  /** PEM files: the CA that signed PuppetDB's certificate, and this client's certificate and key. */
  ca?: string;
  cert?: string;
  key?: string;
  /** Per request (default 30 s). */
  timeoutMs?: number;
  /** Largest answer read (default 64 MiB). */
  maxBytes?: number;
  /**
   * Requests in flight at once (default 4); the rest wait their turn. PuppetDB serves queries from
   * a small pool of database connections (25 by default) shared with everyone else who asks it:
   * many discoveries at once must not drain it.
   */
  maxConcurrent?: number;
}

/** PuppetDB answered, but not 200: `status` and its message (a PQL error is a 400). */
export class PuppetDbRefused extends MusterError {
  constructor(
    readonly status: number,
    readonly detail: string,
    url: string,
  ) {
    super("MUSTER_PUPPETDB_UNAVAILABLE", `PuppetDB at ${url} answered HTTP ${status}: ${detail}`);
    this.name = "PuppetDbRefused";
  }
}

/** The reader the discovery and the health witness need: rows of a PQL query. */
export interface PuppetDbReader {
  query(pql: string): Promise<unknown[]>;
}

const read = (file: string | undefined, what: string): Buffer | undefined => {
  if (!file) return undefined;
  try {
    return readFileSync(file);
  } catch (e) {
    throw new MusterError("MUSTER_CONFIG_INVALID", `puppetdb.${what}: cannot read ${file}: ${(e as Error).message}`);
  }
};

/** What is wrong with these settings, or undefined (the config schemas and the constructor both ask). */
export function puppetDbSettingsProblem(s: Pick<PuppetDbSettings, "url" | "cert" | "key">): string | undefined {
  let u: URL;
  try {
    u = new URL(s.url);
  } catch {
    return `url ${JSON.stringify(s.url)} is not a URL (https://puppetdb.example.net:8081)`;
  }
  if (u.protocol !== "https:" && u.protocol !== "http:") return `url must be https:// (or http:// on loopback), not ${u.protocol}`;
  if (u.protocol === "http:" && !isLoopback(u.hostname.replace(/^\[|\]$/g, ""))) return "PuppetDB's plain http port has no authentication: use https:// with cert and key, or a loopback address on PuppetDB's own machine";
  if (!s.cert !== !s.key) return "cert and key go together";
  if (u.pathname !== "/" || u.search) return "url is PuppetDB's base URL, without a path";
  return undefined;
}

export class PuppetDb implements PuppetDbReader {
  readonly url: string;
  private readonly base: URL;
  private readonly tls: { ca?: Buffer; cert?: Buffer; key?: Buffer };
  private readonly slots: Semaphore;

  constructor(private readonly s: PuppetDbSettings) {
    const problem = puppetDbSettingsProblem(s);
    if (problem) throw new MusterError("MUSTER_CONFIG_INVALID", `puppetdb: ${problem}`);
    this.base = new URL(s.url);
    this.url = this.base.origin;
    this.tls = { ca: read(s.ca, "ca"), cert: read(s.cert, "cert"), key: read(s.key, "key") };
    this.slots = new Semaphore(s.maxConcurrent ?? 4);
  }

  /** The rows of a PQL query (POST, so a long query of certnames fits). */
  async query(pql: string): Promise<unknown[]> {
    const rows = await this.send("POST", "/pdb/query/v4", JSON.stringify({ query: pql }));
    if (!Array.isArray(rows)) throw new MusterError("MUSTER_PUPPETDB_UNAVAILABLE", `PuppetDB at ${this.url} answered a query with ${typeof rows}, not a list of rows`);
    return rows;
  }

  /** One entity by its URL, e.g. /pdb/query/v4/nodes/<certname>; undefined when PuppetDB says 404. */
  async get(path: string): Promise<unknown> {
    try {
      return await this.send("GET", path);
    } catch (e) {
      if (e instanceof PuppetDbRefused && e.status === 404) return undefined;
      throw e;
    }
  }

  /**
   * Submit a command (deactivate node, replace facts, ...). PuppetDB queues it and answers its
   * uuid; with `waitSeconds` it answers once the command was processed (processed: false when that
   * took longer).
   */
  async command(command: string, version: number, certname: string, payload: Record<string, unknown>, o: { producerTimestamp?: string; waitSeconds?: number } = {}): Promise<{ uuid: string; processed: boolean }> {
    const producer = o.producerTimestamp ?? (typeof payload.producer_timestamp === "string" ? payload.producer_timestamp : new Date().toISOString());
    const q = new URLSearchParams({ command, version: String(version), certname, "producer-timestamp": producer });
    if (o.waitSeconds) q.set("secondsToWaitForCompletion", String(o.waitSeconds));
    const r = await this.send("POST", `/pdb/cmd/v1?${q}`, JSON.stringify(payload));
    const body = r !== null && typeof r === "object" ? (r as { uuid?: unknown; processed?: unknown }) : {};
    if (typeof body.uuid !== "string") throw new MusterError("MUSTER_PUPPETDB_UNAVAILABLE", `PuppetDB at ${this.url} did not acknowledge the ${command} command`);
    return { uuid: body.uuid, processed: body.processed === true };
  }

  private async send(method: "GET" | "POST", path: string, body?: string): Promise<unknown> {
    await this.slots.acquire();
    try {
      return await this.request(method, path, body);
    } finally {
      this.slots.release();
    }
  }

  private request(method: "GET" | "POST", path: string, body?: string): Promise<unknown> {
    const url = new URL(path, this.base);
    const timeoutMs = this.s.timeoutMs ?? 30_000;
    const maxBytes = this.s.maxBytes ?? 64 * 1024 * 1024;
    const headers: Record<string, string> = { accept: "application/json" };
    if (body !== undefined) Object.assign(headers, { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)) });
    const opts = { method, headers, timeout: timeoutMs, ...(url.protocol === "https:" ? { ...this.tls, rejectUnauthorized: true } : {}) };
    return new Promise((resolve, reject) => {
      const fail = (why: string) => reject(new MusterError("MUSTER_PUPPETDB_UNAVAILABLE", `cannot reach PuppetDB at ${this.url}: ${why}`));
      const onResponse = (res: IncomingMessage) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (c: Buffer) => {
          size += c.length;
          if (size > maxBytes) {
            req.destroy();
            reject(new MusterError("MUSTER_PUPPETDB_UNAVAILABLE", `PuppetDB at ${this.url} answered more than ${maxBytes} bytes to ${method} ${url.pathname}; narrow the query`));
            return;
          }
          chunks.push(c);
        });
        res.on("error", (e) => fail(e.message));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          if (res.statusCode !== 200) return reject(new PuppetDbRefused(res.statusCode ?? 0, text.trim().slice(0, 2000) || (res.statusMessage ?? ""), this.url));
          try {
            resolve(JSON.parse(text));
          } catch {
            reject(new MusterError("MUSTER_PUPPETDB_UNAVAILABLE", `PuppetDB at ${this.url} answered ${method} ${url.pathname} with something that is not JSON`));
          }
        });
      };
      const req = url.protocol === "https:" ? httpsRequest(url, opts, onResponse) : httpRequest(url, opts, onResponse);
      req.on("timeout", () => req.destroy(new Error(`no answer within ${Math.round(timeoutMs / 1000)} s`)));
      req.on("error", (e) => fail(e.message));
      req.end(body);
    });
  }
}
