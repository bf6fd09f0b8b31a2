import { accessSync, constants } from "node:fs";
import { connect as natsConnect, type NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";
import { MusterError } from "../errors.js";
import { nextBroker, watchBrokerLiveness } from "./liveness.js";

export { flushWithin } from "./liveness.js";

/**
 * A bare broker connection, for the transports that need one (the node daemon, the emulator, the
 * registry daemon) and `muster doctor`'s handshake check; everyone else holds a MusterClient.
 */
export type BrokerConnection = NatsConnection;

export const DEFAULT_BROKER = "nats://127.0.0.1:4222";

/**
 * TLS to the broker (docs/security.md#tls): `ca` verifies nats-server's certificate; `cert` and
 * `key` are this process's client credential, which a broker with `verify_and_map` turns into a
 * NATS user and its permissions. Config files check it with config/tls.ts's tlsConfigSchema; this
 * module loads no zod (every command connects).
 */
export interface TlsSettings {
  ca?: string;
  cert?: string;
  key?: string;
}

/**
 * The TLS settings in force: the config's, else MUSTER_TLS_CA / MUSTER_TLS_CERT / MUSTER_TLS_KEY
 * (how the lab's shell and the tests hand them to every command), else none.
 */
export function resolveTls(configured: TlsSettings | undefined): TlsSettings | undefined {
  if (configured && (configured.ca || configured.cert)) return configured;
  const env = { ca: process.env.MUSTER_TLS_CA || undefined, cert: process.env.MUSTER_TLS_CERT || undefined, key: process.env.MUSTER_TLS_KEY || undefined };
  return env.ca || env.cert ? env : undefined;
}

/** Fails early, naming the file, instead of a TLS handshake error that does not say which file. */
export function checkTlsFiles(tls: TlsSettings, where = "tls"): void {
  for (const k of ["ca", "cert", "key"] as const) {
    const f = tls[k];
    if (!f) continue;
    try {
      accessSync(f, constants.R_OK);
    } catch {
      throw new MusterError("MUSTER_PKI_FAILED", `${where}.${k}: cannot read ${f}`);
    }
  }
  if (!tls.cert !== !tls.key) throw new MusterError("MUSTER_PKI_FAILED", `${where}: cert and key go together: set both or neither`);
}

export interface BrokerOptions {
  servers: string[];
  name: string;
  log?: Logger;
  /** TLS to the broker; resolveTls() picks the config's or the environment's. */
  tls?: TlsSettings;
  /**
   * Reply inboxes under this prefix instead of `_INBOX`, so a broker can confine the connection's
   * subscriptions to its own inboxes (nodes: see inboxPrefixFor).
   */
  inboxPrefix?: string;
  /** Keep retrying forever (daemons) instead of failing after the first attempt (CLI). */
  persistent?: boolean;
  /** Where the servers came from (resolveBrokerSettings().from), named while waiting. */
  from?: string;
  timeoutMs?: number;
  /** Stops a persistent wait for the broker (a daemon shut down before its broker came). */
  signal?: AbortSignal;
  /** Members that did not answer earlier connects (the CLI's, cli/broker-memory.ts): tried last. */
  memory?: MemberMemory;
}

/** Members (host:port) that did not answer a connect lately, kept between processes. */
export interface MemberMemory {
  /** Each such member, with when it did not answer. */
  readonly recent: ReadonlyMap<string, number>;
  /** What a connect found: the members it tried that did not answer, and the one that did (if any). */
  note(failed: string[], connected: string | undefined): void;
}

/** First wait of a daemon whose broker is not there yet, and the cap of its backoff, ms. */
export const WAIT_FIRST_MS = 1000;
export const WAIT_MAX_MS = 30_000;

/**
 * Connects to NATS. Daemons (persistent) wait for a broker that is not there yet, saying at once
 * and at every attempt what they wait for (URL, last error, next attempt) with capped backoff,
 * then reconnect forever with jittered backoff, so a broker restart never stops a node serving.
 * CLI connections fail fast with a message that says where they tried.
 */
export async function connectBroker(opts: BrokerOptions): Promise<NatsConnection> {
  const servers = opts.servers.length ? opts.servers : [DEFAULT_BROKER];
  const tls = opts.tls;
  if (tls) checkTlsFiles(tls);
  // members left for not answering (the liveness probe), by host:port: passed over when choosing where to go
  const left = new Map<string, number>(opts.memory?.recent ?? []);
  // the members the first connect dialled, in order (for the memory): all but the last did not answer
  let dialled: string[] | undefined = opts.memory ? [] : undefined;
  const attempt = () =>
    natsConnect({
      servers,
      name: opts.name,
      ...(tls ? { tls: { ...(tls.ca ? { caFile: tls.ca } : {}), ...(tls.cert ? { certFile: tls.cert, keyFile: tls.key } : {}) } } : {}),
      ...(opts.inboxPrefix ? { inboxPrefix: opts.inboxPrefix } : {}),
      timeout: opts.timeoutMs ?? 5000,
      maxReconnectAttempts: opts.persistent ? -1 : 10,
      reconnectTimeWait: 1000,
      reconnectJitter: 500,
      pingInterval: 30_000,
      // nats.js builds two Errors (stacks captured) for every request and JetStream write, for a
      // trace of where a timeout began; a provisioner spent 8% of its CPU on them (docs/bench.md,
      // provisioning). The errors keep their type, message and cause without it.
      noAsyncTraces: true,
      // Brokers named here are the operator's list: the members' gossip would add each again under
      // the address it listens on, and a dead member would then cost two connect timeouts, not one.
      ignoreClusterUpdates: servers.length > 1,
      reconnectToServer: (pool) => {
        const i = nextBroker(pool, left, Date.now());
        const target = pool[i ?? 0]; // null dials the current one, first in the pool
        if (dialled && target) dialled.push(target.listen);
        return i === null ? null : pool[i]!;
      },
    });
  const where = `${servers.join(", ")}${tls ? " over TLS" : ""}`;
  const source = opts.from ? ` (from ${opts.from})` : "";
  const remember = (connected: string | undefined) => {
    if (!dialled) return;
    opts.memory!.note([...new Set(dialled.filter((s) => s !== connected))], connected);
    dialled = undefined; // later moves are the liveness probe's to judge
  };
  if (!opts.persistent) {
    try {
      const nc = await attempt();
      remember(nc.getServer());
      return nc;
    } catch (e) {
      remember(undefined);
      throw new MusterError("MUSTER_BROKER_UNREACHABLE", `cannot reach the NATS broker at ${where}${source}: ${(e as Error).message}. ${hint(e as Error, tls)}`, { cause: e });
    }
  }
  // nats.js's own waitOnFirstConnect retries in silence: a daemon pointed at the wrong URL looked hung.
  const say = (msg: string, fields: Record<string, unknown>) => (opts.log ? opts.log.warn(fields, msg) : process.stderr.write(`${msg}\n`));
  const aborted = () => new MusterError("MUSTER_BROKER_UNREACHABLE", `stopped while waiting for the broker at ${where}${source}`);
  for (let n = 1; ; n++) {
    if (opts.signal?.aborted) throw aborted();
    try {
      const nc = await attempt();
      if (opts.signal?.aborted) {
        await nc.close();
        throw aborted();
      }
      if (n > 1) say(`connected to the broker at ${nc.getServer()} after ${n} attempts`, { broker: nc.getServer(), attempts: n });
      else opts.log?.info({ broker: nc.getServer(), from: opts.from }, `connected to the broker at ${nc.getServer()}${source}`);
      if (opts.log) watchStatus(nc, opts.log);
      watchBrokerLiveness(nc, { ...(opts.log ? { log: opts.log } : {}), onLeave: (server) => left.set(server, Date.now()) });
      return nc;
    } catch (e) {
      const err = (e as Error).message;
      const wait = waitBeforeAttempt(n);
      say(`waiting for the broker at ${where}${source}: ${err}; next attempt in ${(wait / 1000).toFixed(1)}s`, { broker: servers, from: opts.from, attempt: n, err, next_attempt_ms: wait, hint: hint(e as Error, tls) });
      await new Promise<void>((r) => {
        const t = setTimeout(done, wait);
        function done() {
          clearTimeout(t);
          opts.signal?.removeEventListener("abort", done);
          r();
        }
        opts.signal?.addEventListener("abort", done, { once: true });
      });
    }
  }
}

/** Backoff before attempt n+1: 1 s doubling to 30 s, ±20% so a fleet does not return in step. */
export function waitBeforeAttempt(n: number, rand = Math.random): number {
  const base = Math.min(WAIT_MAX_MS, WAIT_FIRST_MS * 2 ** (n - 1));
  return Math.round(base * (0.8 + 0.4 * rand()));
}

function hint(e: Error, tls: TlsSettings | undefined): string {
  const m = e.message;
  if (/authoriz|authentic|permission/i.test(m)) return "The broker refused this credential: check tls.cert/tls.key (or MUSTER_TLS_CERT/MUSTER_TLS_KEY) name a user in its authorization (docs/security.md#nats-users-and-permissions).";
  if (/does not support 'tls'/i.test(m)) return "TLS is set up here (tls.ca/tls.cert or MUSTER_TLS_*) but this broker does not offer it: turn TLS on in its nats-server config, or name the right broker.";
  if (/tls|certificate|self.signed|handshake/i.test(m)) return tls?.ca ? `Check that ${tls.ca} is the CA that signed the broker's certificate.` : "The broker requires TLS: set tls.ca (or MUSTER_TLS_CA) to its CA, and a client certificate if it asks for one.";
  // A broker that requires a client certificate and gets none refuses the TLS handshake after
  // nats.js has taken it as done (TLS 1.3), so what surfaces is a timeout.
  const running = "Otherwise check that nats-server runs there and this machine reaches its port, or name the right broker (--broker URL, MUSTER_BROKER, brokers: in the config).";
  if (tls && !tls.cert && /timeout/i.test(m)) return `If the broker requires client certificates, set tls.cert and tls.key (or MUSTER_TLS_CERT and MUSTER_TLS_KEY); without one it refuses the TLS handshake and this looks like a timeout. ${running}`;
  // a certificate from a CA the broker does not hold in its clients-ca.pem (a Puppet CA not added
  // yet) is refused in the handshake after nats.js took it as done: a timeout here too
  if (tls?.cert && /timeout/i.test(m)) return `If the broker does not trust the CA that signed ${tls.cert} (its clients-ca.pem: the site CA and every Puppet master's CA, docs/deploy.md#4-puppet-masters), it refuses the TLS handshake and this looks like a timeout. ${running}`;
  return "Check that nats-server runs there and this machine reaches its port, or name the right broker: --broker URL, MUSTER_BROKER, or brokers: in the config.";
}

/**
 * A node's private inbox prefix: `_INBOX_` and its identity in hex, since identities may hold dots
 * (NATS token separators) and a dotted prefix of one node would cover another's.
 */
export function inboxPrefixFor(identity: string): string {
  return `_INBOX_${Buffer.from(identity, "utf8").toString("hex")}`;
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

