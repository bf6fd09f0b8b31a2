import { readFileSync } from "node:fs";
import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";
import { MusterClient } from "../client/client.js";
import { resolveBrokerSettings } from "../config/client.js";
import { MusterError } from "../errors.js";
import { fleetSources } from "../fleet/sources.js";
import { isLoopback } from "../security/loopback.js";
import { TokenTable } from "./auth.js";
import { ConsoleBackend } from "./backend.js";
import { configuredBrokers, parseListen, type WebConfig } from "./config.js";
import { probeBroker, sameStatus, type ConsoleStatus } from "./live.js";
import { buildApp } from "./server.js";

// `muster web`: the console's process. Listens first (so the page can say what is down), connects
// to the broker in the background and keeps reconnecting, makes the stores history and health are
// kept in, follows the records, heartbeats, Puppet runs and runall history (backend.ts), and
// probes the broker and the registry.

export interface WebHandle {
  url: string;
  app: FastifyInstance;
  backend: ConsoleBackend;
  stop(): Promise<void>;
}

export interface WebOptions {
  /** --broker */
  broker?: string;
  /** Client config for the broker settings (--client-config). */
  clientConfig?: string;
  /** ms between status probes (default 2000). */
  probeMs?: number;
}

function readOptional(file: string | undefined, what: string): Buffer | undefined {
  if (!file) return undefined;
  try {
    return readFileSync(file);
  } catch (e) {
    throw new MusterError("MUSTER_CONFIG_INVALID", `${what}: cannot read ${file}: ${(e as Error).message}`);
  }
}

export async function startWeb(cfg: WebConfig, log: Logger, opts: WebOptions = {}): Promise<WebHandle> {
  const tokensText = readOptional(cfg.auth.tokens_file, "auth.tokens_file")?.toString("utf8");
  const tokens = tokensText === undefined ? undefined : TokenTable.fromText(tokensText, cfg.auth.tokens_file);
  if (tokens && tokens.size === 0 && !cfg.tls?.ca) throw new MusterError("MUSTER_CONFIG_INVALID", `auth.tokens_file ${cfg.auth.tokens_file} holds no tokens: add lines "<token> <role> <name>" (role viewer or operator)`);
  const registryToken = readOptional(cfg.registry.token_file, "registry.token_file")?.toString("utf8").trim();
  const https = cfg.tls ? { cert: readOptional(cfg.tls.cert, "tls.cert")!, key: readOptional(cfg.tls.key, "tls.key")!, ...(cfg.tls.ca ? { ca: readOptional(cfg.tls.ca, "tls.ca")! } : {}) } : undefined;
  const { host, port } = parseListen(cfg.listen);
  const broker = resolveBrokerSettings({ flag: opts.broker, own: { file: "the web config", brokers: configuredBrokers(cfg) }, clientConfig: opts.clientConfig });
  const where = broker.servers.join(",");
  const backend = new ConsoleBackend(cfg, log, { registryToken, brokerWhere: where });
  let stopping = false;

  const app = await buildApp({ cfg, tokens, log, backend, https });
  const url = await app.listen({ host, port });
  if (!isLoopback(host)) log.warn({ listen: cfg.listen }, `the console listens on ${host}, reachable from other machines: every request still needs a token or client certificate${https ? "" : ", and without tls: they travel in clear text"}`);

  const setStatus = (s: ConsoleStatus) => {
    if (sameStatus(s, backend.status)) return;
    const brokerBack = s.broker.ok && !backend.status.broker.ok;
    backend.setStatus(s);
    if (brokerBack) void backend.follow().catch((e: unknown) => stopping || log.warn({ err: (e as Error).message }, "cannot follow the broker's stores"));
  };
  // Probes overlap (the timer's and the one right after connecting): only the latest one started
  // may set the status, or an answer from before the connection could report the broker down again.
  let probes = 0;
  const probe = async () => {
    const n = ++probes;
    const sources = backend.sources;
    const [b, r] = await Promise.all([probeBroker(sources && (() => sources.probe()), where), backend.registry.probe()]);
    if (n !== probes) return;
    // The state bucket may appear later (the first provisioner run): follow it once it does.
    if (b.ok && backend.feed.problem?.startsWith("no state bucket")) void backend.feed.start(() => sources!.records()).catch(() => undefined);
    setStatus({ broker: b, registry: r, ...backend.alertStatus() });
  };
  let timer: NodeJS.Timeout | undefined;
  const loop = () => {
    if (stopping) return;
    void probe().catch((e: unknown) => log.warn({ err: (e as Error).message }, "status probe failed")).finally(() => {
      if (!stopping) timer = setTimeout(loop, opts.probeMs ?? 2000);
    });
  };

  // Connect in the background: the page says the broker is down meanwhile.
  const connecting = new AbortController();
  void (async () => {
    const c = await MusterClient.connect({ signal: connecting.signal, brokers: broker.servers, tls: broker.tls, from: broker.from, persistent: true, log, name: "muster-web", ...(cfg.collective ? { collective: cfg.collective } : {}) });
    if (stopping) return void (await c.close());
    const sources = fleetSources(c, { stateBucket: cfg.state_bucket, ...(cfg.store_replicas ? { storeReplicas: cfg.store_replicas } : {}) });
    // Nodes write heartbeats, Puppet runs and audit records but may not create where they go.
    await sources.ensureStores().then(
      (made) => {
        const created = made.filter((m) => m.created).map((m) => m.name);
        if (created.length) log.info({ created }, "created the stores nodes write to and history is kept in");
      },
      (e: unknown) => log.warn({ err: (e as Error).message }, "cannot create the health and history stores (an admin credential may: `muster broker stores`); reading what exists"),
    );
    backend.attach(c, sources);
    await probe(); // the broker's status turning ok starts the followers
  })().catch((e: unknown) => stopping || log.error({ err: (e as Error).message }, "cannot connect to the broker"));
  loop();

  return {
    url,
    app,
    backend,
    async stop() {
      stopping = true;
      connecting.abort();
      clearTimeout(timer);
      await backend.stop();
      await app.close();
      await backend.client?.close();
    },
  };
}
