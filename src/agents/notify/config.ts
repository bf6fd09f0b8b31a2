import { isAbsolute } from "node:path";
import { z } from "zod";
import { RpcError } from "../../errors.js";
import { DEFAULT_NOTIFY_BUCKET } from "../../protocol/buckets.js";
import { Status } from "../../protocol/status.js";

// The agent's settings (`plugins.notify` in the server config); the keys are documented in agent.ts.

const absolutePath = z.string().refine((p) => isAbsolute(p), "must be an absolute path");

const schema = z.object({
  recipients: z.array(z.string().min(1)).optional(),
  timeout: z.coerce.number().positive().max(3600).optional(),
  exec_commands: z.array(absolutePath).optional(),
  dedupe_window: z.coerce.number().positive().max(30 * 86400).optional(),
  // a KV bucket name (JetStream's rules), or false to keep dedupe keys in memory only
  dedupe_bucket: z.union([z.string().regex(/^[-_A-Za-z0-9]{1,64}$/, "a KV bucket name: letters, digits, - and _"), z.literal(false)]).optional(),
  smtp: z
    .object({
      host: z.string().min(1).optional(),
      port: z.coerce.number().int().min(1).max(65535).optional(),
      from: z.string().min(1).optional(),
      secure: z.boolean().optional(),
      user: z.string().optional(),
      pass: z.string().optional(),
    })
    .optional(),
});

export interface SmtpSettings {
  host: string;
  port: number;
  from: string;
  secure: boolean;
  auth?: { user: string; pass: string };
}

export interface NotifyConfig {
  recipients: string[];
  /** Seconds each delivery may take. */
  timeout: number;
  /** Commands a request's own exec: recipients may name. */
  execCommands: ReadonlySet<string>;
  /** Seconds a delivered dedupe_key is remembered. */
  dedupeWindow: number;
  /** KV bucket keeping delivered dedupe keys across restarts; undefined: memory only. */
  dedupeBucket: string | undefined;
  smtp: SmtpSettings;
}

export const DEFAULT_TIMEOUT_SECONDS = 10;

/** Parse and default the agent config. A bad config is the node operator's fault: UnknownError. */
export function parseNotifyConfig(raw: Record<string, unknown>, identity: string): NotifyConfig {
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    throw new RpcError(Status.UnknownError, `notify agent is misconfigured (plugins.notify): ${z.prettifyError(parsed.error)}`);
  }
  const c = parsed.data;
  const smtp = c.smtp ?? {};
  return {
    recipients: c.recipients ?? [],
    timeout: c.timeout ?? DEFAULT_TIMEOUT_SECONDS,
    execCommands: new Set(c.exec_commands ?? []),
    dedupeWindow: c.dedupe_window ?? 86400,
    dedupeBucket: c.dedupe_bucket === false ? undefined : (c.dedupe_bucket ?? DEFAULT_NOTIFY_BUCKET),
    smtp: {
      host: smtp.host ?? "127.0.0.1",
      port: smtp.port ?? 25,
      from: smtp.from ?? `muster@${identity}`,
      secure: smtp.secure ?? false,
      ...(smtp.user !== undefined ? { auth: { user: smtp.user, pass: smtp.pass ?? "" } } : {}),
    },
  };
}
