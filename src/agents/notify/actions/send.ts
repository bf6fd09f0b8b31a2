import { createHash } from "node:crypto";
import type { Logger } from "pino";
import type { ActionContext, ActionHandler, AgentKvOpener } from "../../../agent/agent.js";
import type { ActionInput } from "../../../ddl/types.js";
import { RpcError } from "../../../errors.js";
import { Status } from "../../../protocol/status.js";
import { deliver, type Notification } from "../channels.js";
import { parseNotifyConfig } from "../config.js";
import { displayRecipient, parseRecipient, type Recipient } from "../recipient.js";
import type { NotifyDDL } from "../ddl.js";

export type SendInput = ActionInput<NotifyDDL, "send">;

export interface DeliveryResult {
  recipient: string;
  ok: boolean;
  error?: string;
}

export interface SendReply {
  [key: string]: unknown;
  duplicate: boolean;
  delivered: number;
  failed: number;
  results: DeliveryResult[];
}

export interface SendDeps {
  now: () => Date;
  fetch: typeof globalThis.fetch;
  /** The server's KV buckets: delivered dedupe keys survive a restart of the notifier. */
  kv?: AgentKvOpener;
  /** Told every delivery's results (the notifier's health, agents/notify/delivery-health.ts). */
  delivered?: (subject: string, results: DeliveryResult[]) => void;
}

/** Hostile-input guard: one request fans out to at most this many deliveries. */
export const MAX_RECIPIENTS = 100;

/** Where delivered keys outlive the process. Never throws: an unreachable store is a miss. */
export interface DeliveredStore {
  /** The reply of a delivery made under `key` less than `windowMs` ago, if one is recorded. */
  find(key: string, windowMs: number): Promise<SendReply | undefined>;
  remember(key: string, reply: SendReply): Promise<void>;
}

/**
 * Deliveries by dedupe_key: requests are at-least-once (a reply lost in a broker failover, a
 * provisioner killed between sending and recording), notifications should be once. A key is kept
 * while its delivery runs and, once it succeeded, for the window; a failed one may be tried again.
 * In memory (bounded by MAX_KEYS, oldest dropped first) and, given a DeliveredStore, in KV too, so
 * a restarted notifier still answers a repeat without sending. A delivery interrupted by the
 * restart itself (sent, not yet recorded) may be sent again: once, not never.
 */
export class DeliveryLog {
  static readonly MAX_KEYS = 100_000;
  private readonly entries = new Map<string, { at: number; result: Promise<SendReply> }>();
  constructor(private readonly now: () => number) {}

  /** The delivery under `key`: the one already made (or in flight, or recorded), else `send()`'s, remembered. */
  async once(key: string, windowMs: number, send: () => Promise<SendReply>, durable?: DeliveredStore): Promise<SendReply> {
    const now = this.now();
    const seen = this.entries.get(key);
    if (seen && now - seen.at < windowMs) return { ...(await seen.result), duplicate: true };
    // Registered before the first await, so a concurrent repeat joins this one.
    const result = (async () => {
      const recorded = await durable?.find(key, windowMs);
      if (recorded) return { ...recorded, duplicate: true };
      const reply = await send();
      await durable?.remember(key, reply);
      return reply;
    })();
    this.entries.delete(key); // re-inserted last: Map order is age order
    this.entries.set(key, { at: now, result });
    while (this.entries.size > DeliveryLog.MAX_KEYS) this.entries.delete(this.entries.keys().next().value!);
    try {
      return await result;
    } catch (e) {
      if (this.entries.get(key)?.result === result) this.entries.delete(key);
      throw e;
    }
  }
}

interface StoredDelivery {
  key: string;
  at: number;
  reply: SendReply;
}

/**
 * Delivered keys in a KV bucket (TTL = the window) through the server. Keys are hashed: a
 * dedupe_key is free text ("<node>#<round>#<outcome>"), a KV key is not. Failures are logged once
 * per outage and count as "not recorded".
 */
export function kvDeliveredStore(open: AgentKvOpener, bucket: string, windowMs: number, now: () => number, log: Logger, health: { down: boolean }): DeliveredStore {
  const storeKey = (key: string) => createHash("sha256").update(key).digest("hex");
  const failed = (e: unknown) => {
    if (!health.down) log.warn({ bucket, err: (e as Error).message }, "notify dedupe bucket unavailable: a notifier restart may send a repeat again (keys kept in memory meanwhile)");
    health.down = true;
  };
  const ok = () => {
    if (health.down) log.info({ bucket }, "notify dedupe bucket reachable again");
    health.down = false;
  };
  return {
    async find(key, window) {
      let raw: Uint8Array | undefined;
      try {
        raw = await (await open(bucket, { ttlMs: windowMs })).get(storeKey(key));
        ok();
      } catch (e) {
        failed(e);
        return undefined;
      }
      if (!raw) return undefined;
      let d: Partial<StoredDelivery>;
      try {
        d = JSON.parse(new TextDecoder().decode(raw)) as Partial<StoredDelivery>;
      } catch {
        log.warn({ bucket, dedupe_key: key }, "unreadable dedupe record; treating the notification as not yet sent");
        return undefined;
      }
      if (d.key !== key || typeof d.at !== "number" || now() - d.at >= window || !d.reply || typeof d.reply !== "object" || Array.isArray(d.reply)) return undefined;
      return d.reply;
    },
    async remember(key, reply) {
      try {
        await (await open(bucket, { ttlMs: windowMs })).put(storeKey(key), JSON.stringify({ key, at: now(), reply } satisfies StoredDelivery));
        ok();
      } catch (e) {
        failed(e);
      }
    },
  };
}

export function sendAction(deps: SendDeps, log: DeliveryLog = new DeliveryLog(() => deps.now().getTime())): ActionHandler<SendInput> {
  const deliverOnce = sendOnce(deps);
  const health = { down: false };
  return (input: SendInput, ctx: ActionContext): Promise<SendReply> => {
    if (input.dedupe_key === undefined) return deliverOnce(input, ctx);
    const config = parseNotifyConfig(ctx.config, ctx.identity);
    const windowMs = config.dedupeWindow * 1000;
    const durable = deps.kv && config.dedupeBucket ? kvDeliveredStore(deps.kv, config.dedupeBucket, windowMs, () => deps.now().getTime(), ctx.log, health) : undefined;
    return log.once(input.dedupe_key, windowMs, () => deliverOnce(input, ctx), durable);
  };
}

function sendOnce(deps: SendDeps): (input: SendInput, ctx: ActionContext) => Promise<SendReply> {
  return async (input: SendInput, ctx: ActionContext): Promise<SendReply> => {
    const config = parseNotifyConfig(ctx.config, ctx.identity);
    const fromRequest = input.recipients !== undefined;
    const recipients = fromRequest ? requestRecipients(input.recipients ?? []) : config.recipients;
    if (recipients.length === 0) {
      throw new RpcError(Status.MissingData, "no recipients: pass recipients or set plugins.notify.recipients on the node");
    }
    // Check every recipient before delivering to any, so a typo never half-sends.
    const parsed = recipients.map(parseRecipient);
    if (fromRequest) {
      for (const r of parsed) {
        if (r.kind === "exec" && !config.execCommands.has(r.argv[0])) {
          throw new RpcError(
            Status.InvalidData,
            `recipient ${JSON.stringify(r.text)}: a request may only run commands listed in plugins.notify.exec_commands`,
          );
        }
      }
    }
    if (ctx.signal.aborted) throw new RpcError(Status.Aborted, `notification aborted before delivery: ${String(ctx.signal.reason)}`);

    const note: Notification = {
      subject: input.subject,
      message: input.message,
      sender: ctx.identity,
      caller: ctx.caller,
      time: deps.now().toISOString(),
    };
    const timeoutMs = config.timeout * 1000;

    const attempt = async (r: Recipient): Promise<DeliveryResult> => {
      const recipient = displayRecipient(r);
      const timeout = AbortSignal.timeout(timeoutMs);
      const signal = AbortSignal.any([ctx.signal, timeout]);
      try {
        await deliver(r, note, { signal, timeoutMs, smtp: config.smtp, fetch: deps.fetch });
        ctx.log.debug({ recipient }, "notification delivered");
        return { recipient, ok: true };
      } catch (e) {
        const error = ctx.signal.aborted
          ? `aborted: ${describe(ctx.signal.reason)}`
          : timeout.aborted
            ? `timed out after ${config.timeout} s`
            : describe(e);
        ctx.log.warn({ recipient, error }, "notification not delivered");
        return { recipient, ok: false, error };
      }
    };

    const results = await Promise.all(parsed.map(attempt));
    deps.delivered?.(input.subject, results);
    const failed = results.filter((r) => !r.ok);
    const reply: SendReply = { duplicate: false, delivered: results.length - failed.length, failed: failed.length, results };
    if (failed.length > 0) {
      const why = failed.map((r) => `${r.recipient}: ${r.error ?? "failed"}`).join("; ");
      throw new RpcError(Status.Aborted, `${failed.length} of ${results.length} deliveries failed: ${why}`, reply);
    }
    return reply;
  };
}

function requestRecipients(list: unknown[]): string[] {
  const out: string[] = [];
  for (const [i, r] of list.entries()) {
    if (typeof r !== "string" || r.trim() === "") throw new RpcError(Status.InvalidData, `recipients[${i}] must be a non-empty string`);
    out.push(r.trim());
  }
  const unique = [...new Set(out)];
  if (unique.length > MAX_RECIPIENTS) throw new RpcError(Status.InvalidData, `too many recipients: ${unique.length} (at most ${MAX_RECIPIENTS})`);
  return unique;
}

/** A one-line reason, including the cause fetch hides behind "fetch failed". */
function describe(e: unknown): string {
  if (!(e instanceof Error)) return String(e);
  const cause: unknown = e.cause;
  if (cause instanceof Error) {
    const detail = cause.message || (cause as NodeJS.ErrnoException).code || cause.name;
    return `${e.message}: ${detail}`;
  }
  return e.message;
}
