import { sign } from "node:crypto";
import { closeSync, mkdirSync, openSync, write } from "node:fs";
import { dirname } from "node:path";
import type { Logger } from "pino";
import { z } from "zod";
import { MusterError } from "../errors.js";
import { canonicalJson } from "../protocol/canonical.js";
import type { SigningKey } from "../protocol/signing.js";

// The audit trail: one record per request a node handled (every reply of pipeline stages 9-15,
// policy refusals and invalid input included), as JSON lines in a file and, optionally, in a
// JetStream stream. Recording never blocks or fails the request: records queue in memory (bounded
// by `audit.buffer`), are written in the background, and what cannot be kept is counted as
// dropped (rpcutil daemon_stats `audit_dropped`). See docs/security.md.

/**
 * What the audit needs of the broker's streams, declared here so that security/ does not import
 * broker/ (broker/stream.ts streamsOn is one).
 */
export interface AuditStreams {
  /** The stream, created when missing (`created` says so) unless `create` is false: then a missing one is an error. */
  stream(s: { name: string; subjects: string[]; maxAgeS?: number; create?: boolean }): Promise<{ publisher: AuditPublisher; created: boolean }>;
  /** The last `limit` messages as text, oldest first; undefined when the stream does not exist. */
  tail(name: string, limit: number, timeoutMs: number): Promise<string[] | undefined>;
}

export interface AuditPublisher {
  /** Resolves once the stream acknowledged the message; `msgId` deduplicates a repeat. */
  publish(subject: string, data: string | Uint8Array, opts: { msgId: string; timeoutMs: number }): Promise<void>;
}

/** What the request pipeline reports for each handled request. */
export interface AuditEntry {
  time: number; // ms since epoch, when the reply was made
  identity: string;
  requestid: string;
  caller: string;
  sender: string;
  agent: string;
  action: string;
  data: Record<string, unknown>; // the request's arguments as sent
  statuscode: number;
  statusmsg: string;
}

/**
 * The records of operators' tools, beside the nodes' (`muster.audit.<identity>`): the web console's
 * own actions and refusals, and the CLI's commands that act on no node (`muster alerts`). Their
 * `agent` says which; a node's record names the agent that handled the request.
 */
export const OPERATOR_AUDIT_AGENTS = { console: "web", cli: "cli" } as const;
export const OPERATOR_AUDIT_SUBJECTS = { console: "muster.audit.web", cli: "muster.audit.cli" } as const;

/**
 * An operator tool's record signed with its key (`data.signature` over the record's canonical
 * JSON without it, `data.signer` the key's name), so an altered record shows: verify it with the
 * signer's public key.
 */
export function signAuditEntry(e: AuditEntry, key: SigningKey | undefined): AuditEntry {
  if (!key) return e;
  const signature = sign(null, Buffer.from(canonicalJson(e)), key.privateKey).toString("base64");
  return { ...e, data: { ...e.data, signature, signer: key.name } };
}

const STREAM_NAME = /^[A-Za-z0-9_-]+$/;
const SUBJECT = /^[^\s.*>]+(?:\.[^\s.*>]+)*$/;
const SUBJECT_PATTERN = /^(?:[^\s.*>]+|\*)(?:\.(?:[^\s.*>]+|\*))*(?:\.>)?$|^>$/;

export const AuditConfigSchema = z
  .object({
    /** JSON-lines file, appended to (created 0600 with its directory). */
    file: z.string().min(1).optional(),
    stream: z
      .object({
        name: z.string().regex(STREAM_NAME, "stream names are letters, digits, - and _").default("MUSTER_AUDIT"),
        /** The stream's subjects, used only when this node creates the stream. */
        subjects: z.array(z.string().regex(SUBJECT_PATTERN, "a NATS subject, wildcards * and > allowed")).min(1).default(["muster.audit.>"]),
        /** Where this node publishes; default muster.audit.<identity>. Must be one of the stream's subjects. */
        subject: z.string().regex(SUBJECT, "a NATS subject without wildcards").optional(),
        /** Seconds a record is kept, used only when this node creates the stream (default: forever). */
        max_age: z.number().positive().optional(),
        /**
         * false: only look the stream up, and wait for it while it is missing. A node whose broker
         * user may not create streams (a site's: the console or `muster broker stores` makes it)
         * asks only for what it may.
         */
        create: z.boolean().default(true),
      })
      .strict()
      .optional(),
    /** Records held in memory per destination while it is slow or failing; beyond that they are dropped. */
    buffer: z.number().int().positive().max(1_000_000).default(10_000),
  })
  .strict();
export type AuditConfig = z.output<typeof AuditConfigSchema>;

/** Counters for rpcutil daemon_stats. */
export interface AuditStats {
  audit_written: number; // lines written to the file
  audit_published: number; // records the stream acknowledged
  audit_dropped: number; // records lost: buffer full, unserialisable or failed for good
}

/** Does a NATS subject match a pattern with * and > wildcards? */
export function subjectMatches(pattern: string, subject: string): boolean {
  const p = pattern.split(".");
  const s = subject.split(".");
  for (let i = 0; i < p.length; i++) {
    if (p[i] === ">") return s.length > i;
    if (i >= s.length) return false;
    if (p[i] !== "*" && p[i] !== s[i]) return false;
  }
  return p.length === s.length;
}

/** One JSON line per record; the time in ISO 8601 so the file reads without tools. */
export function auditLine(e: AuditEntry): string {
  return `${JSON.stringify({ ...e, time: new Date(e.time).toISOString() })}\n`;
}

interface Sink {
  push(line: string, entry: AuditEntry): void;
  settled(): boolean;
  close(): void;
}

const RETRY_MS = 1000;
const MAX_RETRY_MS = 30_000;

/** Appends lines to a file, one write per batch; on failure keeps the lines (bounded) and reopens. */
class FileSink implements Sink {
  private queue: string[] = [];
  private fd: number | undefined;
  private writing = false;
  private failing = false;
  private retry: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly path: string,
    private readonly max: number,
    private readonly stats: AuditStats,
    private readonly log: Logger,
  ) {
    try {
      this.fd = this.open();
    } catch (e) {
      throw new MusterError("MUSTER_CONFIG_INVALID", `audit.file ${path} cannot be opened for appending: ${(e as Error).message}`);
    }
  }

  private open(): number {
    mkdirSync(dirname(this.path), { recursive: true, mode: 0o750 });
    return openSync(this.path, "a", 0o600);
  }

  push(line: string): void {
    if (this.closed || this.queue.length >= this.max) {
      this.stats.audit_dropped++;
      return;
    }
    this.queue.push(line);
    this.flush();
  }

  private flush(): void {
    if (this.writing || this.fd === undefined || this.queue.length === 0) return;
    const batch = this.queue;
    this.queue = [];
    this.writing = true;
    this.writeAll(this.fd, Buffer.from(batch.join(""), "utf8"), (err) => {
      this.writing = false;
      if (err && !this.closed) return this.failed(err, batch);
      if (err) this.stats.audit_dropped += batch.length;
      else this.stats.audit_written += batch.length;
      if (this.closed) return this.closeFd();
      if (this.failing) {
        this.failing = false;
        this.log.warn({ file: this.path }, "audit file writable again");
      }
      this.flush();
    });
  }

  private writeAll(fd: number, buf: Buffer, done: (err: Error | null) => void): void {
    write(fd, buf, 0, buf.length, null, (err, n) => {
      if (err) return done(err);
      if (n < buf.length) return this.writeAll(fd, buf.subarray(n), done);
      done(null);
    });
  }

  private failed(err: Error, batch: string[]): void {
    if (!this.failing) this.log.error({ file: this.path, err: err.message }, "cannot write the audit file; keeping records in memory and retrying");
    this.failing = true;
    // the failed batch goes back in front; what no longer fits is lost
    const keep = [...batch, ...this.queue];
    this.stats.audit_dropped += Math.max(0, keep.length - this.max);
    this.queue = keep.slice(0, this.max);
    this.closeFd();
    this.scheduleReopen(RETRY_MS);
  }

  private scheduleReopen(ms: number): void {
    if (this.closed || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      try {
        this.fd = this.open();
        this.flush();
      } catch (e) {
        this.log.debug({ file: this.path, err: (e as Error).message }, "audit file still cannot be opened");
        this.scheduleReopen(Math.min(ms * 2, MAX_RETRY_MS));
      }
    }, ms);
    this.retry.unref();
  }

  settled(): boolean {
    return !this.writing && (this.queue.length === 0 || this.fd === undefined);
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.retry);
    this.stats.audit_dropped += this.queue.length;
    this.queue = [];
    if (!this.writing) this.closeFd();
  }

  private closeFd(): void {
    if (this.fd === undefined) return;
    try {
      closeSync(this.fd);
    } catch {
      // nothing left to save
    }
    this.fd = undefined;
  }
}

/** Publishes records to a JetStream stream, creating it if missing; retries (bounded) until acknowledged. */
class StreamSink implements Sink {
  private queue: { line: string; id: string; attempts: number }[] = [];
  private js: AuditPublisher | undefined;
  private inflight = 0;
  private retry: NodeJS.Timeout | undefined;
  private warned = false;
  private closed = false;
  private static readonly MAX_INFLIGHT = 256;
  private static readonly ATTEMPTS = 3;

  constructor(
    private readonly streams: AuditStreams,
    private readonly cfg: NonNullable<AuditConfig["stream"]>,
    private readonly subject: string,
    private readonly max: number,
    private readonly stats: AuditStats,
    private readonly log: Logger,
  ) {
    void this.connect(RETRY_MS);
  }

  /** Finds or creates the stream, retrying with backoff while JetStream is unreachable. */
  private async connect(backoff: number): Promise<void> {
    if (this.closed) return;
    try {
      const { publisher, created } = await this.streams.stream({ name: this.cfg.name, subjects: this.cfg.subjects, maxAgeS: this.cfg.max_age, create: this.cfg.create });
      if (created) this.log.info({ stream: this.cfg.name, subjects: this.cfg.subjects }, "created the audit stream");
      this.js = publisher;
      if (this.warned) this.log.warn({ stream: this.cfg.name }, "audit stream reachable again");
      this.warned = false;
      this.pump();
    } catch (e) {
      if (this.closed) return;
      if (!this.warned) this.log.error({ stream: this.cfg.name, err: (e as Error).message }, "audit stream unavailable; keeping records in memory and retrying");
      this.warned = true;
      this.retry = setTimeout(() => void this.connect(Math.min(backoff * 2, MAX_RETRY_MS)), backoff);
      this.retry.unref();
    }
  }

  push(line: string, e: AuditEntry): void {
    if (this.closed || this.queue.length >= this.max) {
      this.stats.audit_dropped++;
      return;
    }
    this.queue.push({ line, id: `${e.identity}|${e.requestid}`, attempts: 0 });
    this.pump();
  }

  private pump(): void {
    const js = this.js;
    if (!js) return;
    while (this.inflight < StreamSink.MAX_INFLIGHT && this.queue.length > 0) {
      const item = this.queue.shift()!;
      this.inflight++;
      item.attempts++;
      js.publish(this.subject, item.line, { msgId: item.id, timeoutMs: 5000 }).then(
        () => {
          this.stats.audit_published++;
          this.done();
        },
        (err: Error) => {
          if (item.attempts < StreamSink.ATTEMPTS && !this.closed && this.queue.length < this.max) this.queue.unshift(item);
          else this.stats.audit_dropped++;
          if (!this.warned) this.log.warn({ stream: this.cfg.name, subject: this.subject, err: err.message }, "audit record not acknowledged; retrying");
          this.warned = true;
          // the stream may have been deleted: look for it (and re-create it) before publishing more
          if (this.js && !this.retry) {
            this.js = undefined;
            this.retry = setTimeout(() => {
              this.retry = undefined;
              void this.connect(RETRY_MS);
            }, RETRY_MS);
            this.retry.unref();
          }
          this.done();
        },
      );
    }
  }

  private done(): void {
    this.inflight--;
    this.pump();
  }

  settled(): boolean {
    return this.inflight === 0 && (this.queue.length === 0 || !this.js);
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.retry);
    this.stats.audit_dropped += this.queue.length;
    this.queue = [];
  }
}

export interface AuditorOptions {
  identity: string;
  log: Logger;
}

/** Fans each record out to the configured destinations and a debug log line. */
export class Auditor {
  readonly stats: AuditStats = { audit_written: 0, audit_published: 0, audit_dropped: 0 };
  private readonly sinks: Sink[] = [];
  private readonly log: Logger;
  private readonly stream: { cfg: NonNullable<AuditConfig["stream"]>; subject: string; buffer: number } | undefined;
  private streamSink: Sink | undefined;

  /** Opens the file and checks the stream settings: either failing is a config error, before the node connects. */
  constructor(cfg: AuditConfig | undefined, opts: AuditorOptions) {
    this.log = opts.log;
    if (cfg?.stream) {
      const subject = cfg.stream.subject ?? `muster.audit.${opts.identity}`;
      if (!cfg.stream.subjects.some((p) => subjectMatches(p, subject))) {
        throw new MusterError("MUSTER_CONFIG_INVALID", `audit.stream.subject ${subject} is not among audit.stream.subjects (${cfg.stream.subjects.join(", ")}); set audit.stream.subject or widen the subjects`);
      }
      this.stream = { cfg: cfg.stream, subject, buffer: cfg.buffer };
    }
    if (cfg?.file) this.sinks.push(new FileSink(cfg.file, cfg.buffer, this.stats, opts.log));
  }

  /** Starts publishing to the stream (if configured) through the node's connection, in the background. */
  connect(streams: AuditStreams): void {
    if (!this.stream) return;
    // A node that switches credentials (provisioning → production) reconnects: the old sink goes.
    if (this.streamSink) {
      this.streamSink.close();
      this.sinks.splice(this.sinks.indexOf(this.streamSink), 1);
    }
    this.streamSink = new StreamSink(streams, this.stream.cfg, this.stream.subject, this.stream.buffer, this.stats, this.log);
    this.sinks.push(this.streamSink);
  }

  /** Records one handled request. Synchronous, cheap and never throws. */
  readonly record = (e: AuditEntry): void => {
    this.log.debug({ audit: e }, "request");
    if (this.sinks.length === 0) return;
    let line: string;
    try {
      line = auditLine(e);
    } catch {
      this.stats.audit_dropped += this.sinks.length;
      return;
    }
    for (const s of this.sinks) s.push(line, e);
  };

  /** Waits (bounded) for queued records to be written and acknowledged, then stops. */
  async close(graceMs = 3000): Promise<void> {
    const deadline = Date.now() + graceMs;
    while (!this.sinks.every((s) => s.settled()) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 10)); // polling the sinks' queues during shutdown, bounded by graceMs
    }
    for (const s of this.sinks) s.close();
  }
}

/** A record as read back: the entry, its time as written (ISO in the file and the stream). */
export type StoredAuditEntry = Omit<AuditEntry, "time"> & { time: string };

const isStoredEntry = (x: unknown): x is StoredAuditEntry => {
  const r = x as Record<string, unknown>;
  return typeof r === "object" && r !== null && typeof r.time === "string" && typeof r.caller === "string" && typeof r.action === "string" && typeof r.statuscode === "number";
};

/** Records from audit lines (a file's or a stream's); lines that are not records are skipped. */
export function parseAuditLines(lines: Iterable<string>): StoredAuditEntry[] {
  const out: StoredAuditEntry[] = [];
  for (const l of lines) {
    if (!l.trim()) continue;
    try {
      const x: unknown = JSON.parse(l);
      if (isStoredEntry(x)) out.push(x);
    } catch {
      // a torn or foreign line: skipped
    }
  }
  return out;
}

/**
 * The last `limit` records of the audit stream (audit.stream: nodes publish every request they
 * handled), oldest first; undefined when the stream does not exist.
 */
export async function recentAuditRecords(streams: AuditStreams, stream = "MUSTER_AUDIT", limit = 1000, timeoutMs = 3000): Promise<StoredAuditEntry[] | undefined> {
  const lines = await streams.tail(stream, limit, timeoutMs);
  return lines && parseAuditLines(lines);
}
