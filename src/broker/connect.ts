import { connect as natsConnect, type NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";
import { MusterError } from "../errors.js";

export const DEFAULT_BROKER = "nats://127.0.0.1:4222";

export interface BrokerOptions {
  servers: string[];
  name: string;
  log?: Logger;
  /** Keep retrying forever (daemons) instead of failing after the first attempt (CLI). */
  persistent?: boolean;
  timeoutMs?: number;
}

/**
 * Connects to NATS. Daemons retry the initial connection and reconnect forever with jittered
 * backoff, so a broker restart never stops a node serving; CLI connections fail fast with a
 * message that says where they tried.
 */
export async function connectBroker(opts: BrokerOptions): Promise<NatsConnection> {
  const servers = opts.servers.length ? opts.servers : [DEFAULT_BROKER];
  try {
    const nc = await natsConnect({
      servers,
      name: opts.name,
      timeout: opts.timeoutMs ?? 5000,
      maxReconnectAttempts: opts.persistent ? -1 : 10,
      reconnectTimeWait: 1000,
      reconnectJitter: 500,
      waitOnFirstConnect: opts.persistent ?? false,
      pingInterval: 30_000,
    });
    if (opts.log) watchStatus(nc, opts.log);
    return nc;
  } catch (e) {
    throw new MusterError(
      "MUSTER_BROKER_UNREACHABLE",
      `cannot reach the NATS broker at ${servers.join(", ")}: ${(e as Error).message}. Start one (muster lab up), or name it with --broker URL or MUSTER_BROKER.`,
      { cause: e },
    );
  }
}

function watchStatus(nc: NatsConnection, log: Logger): void {
  void (async () => {
    for await (const s of nc.status()) {
      if (s.type === "disconnect" || s.type === "reconnecting") log.warn({ broker: s.type === "disconnect" ? s.server : undefined }, `broker ${s.type}`);
      else if (s.type === "reconnect") log.info({ broker: s.server }, "broker reconnected");
      else if (s.type === "error") log.error({ err: s.error }, "broker error");
    }
  })().catch(() => undefined);
}

/** The broker URL: --broker, else MUSTER_BROKER, else the config file, else the default. */
export function resolveBrokers(flag: string | undefined, configured: string[] | undefined): string[] {
  if (flag) return flag.split(",").map((s) => s.trim()).filter(Boolean);
  if (process.env.MUSTER_BROKER) return process.env.MUSTER_BROKER.split(",").map((s) => s.trim()).filter(Boolean);
  if (configured && configured.length) return configured;
  return [DEFAULT_BROKER];
}

/**
 * Drains the connection (in-flight replies go out) but never waits longer than `graceMs`: while the
 * broker is down a daemon keeps reconnecting forever, so an unbounded drain or flush would make
 * SIGTERM hang until the broker came back.
 */
export async function closeConnection(nc: NatsConnection, graceMs = 2000): Promise<void> {
  if (nc.isClosed()) return;
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<"timeout">((r) => (timer = setTimeout(() => r("timeout"), graceMs)));
  const drained = nc.drain().then(
    () => "drained" as const,
    () => "failed" as const,
  );
  const how = await Promise.race([drained, timedOut]);
  clearTimeout(timer);
  if (how !== "drained" && !nc.isClosed()) await nc.close().catch(() => undefined);
}

/** `nc.flush()` bounded by `graceMs` (false when it did not complete, e.g. the broker is down). */
export async function flushWithin(nc: NatsConnection, graceMs = 2000): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<boolean>((r) => (timer = setTimeout(() => r(false), graceMs)));
  const flushed = nc.flush().then(
    () => true,
    () => false,
  );
  const ok = await Promise.race([flushed, timedOut]);
  clearTimeout(timer);
  return ok;
}
