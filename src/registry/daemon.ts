import { hostname } from "node:os";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";
import { ServiceBeacon } from "../beacon.js";
import { bucketsOn } from "../broker/bucket.js";
import { closeConnection, connectBroker } from "../broker/connect.js";
import { resolveBrokerSettings } from "../config/client.js";
import { MusterError } from "../errors.js";
import { openRegistryBucket } from "./bucket.js";
import { configuredBrokers, timings, type RegistryConfig } from "./config.js";
import { readToken, serveHttp } from "./http.js";
import { subjects } from "../protocol/subjects.js";
import { RegistrationReceiver } from "./receiver.js";
import { serveQueries } from "./service.js";
import { puppetDbSettings } from "../config/puppetdb.js";
import { PuppetDb } from "../puppetdb/http.js";
import { servePuppetDb } from "./puppetdb.js";
import { RegistryStore } from "./store.js";
import { registryServiceStatus } from "./health.js";
import { VERSION } from "../version.js";

// `muster registry serve`: the bucket (created or its expiry brought in line with the config), the
// in-memory store following it, the registration receiver, the query subject, and HTTP if asked.

export interface RunningRegistry {
  store: RegistryStore;
  receiver: RegistrationReceiver;
  /** `http://host:port` when HTTP is on. */
  httpAddress?: string;
  stop(): Promise<void>;
}

export async function startRegistry(cfg: RegistryConfig, log: Logger, opts: { broker?: string; nc?: NatsConnection } = {}): Promise<RunningRegistry> {
  const t = timings(cfg);
  const startedAt = Date.now();
  // a bad token file is a config error: refuse before touching the broker
  const token = cfg.http?.token_file ? readToken(cfg.http.token_file) : undefined;
  const puppetdb = cfg.puppetdb ? new PuppetDb(puppetDbSettings(cfg.puppetdb)) : undefined;
  const broker = opts.nc ? undefined : resolveBrokerSettings({ flag: opts.broker, own: { file: "the registry config", brokers: configuredBrokers(cfg), tls: cfg.tls } });
  const nc = opts.nc ?? (await connectBroker({ servers: broker!.servers, from: broker!.from, name: "muster-registry", log, persistent: true, tls: broker!.tls }));
  const owns = !opts.nc;
  let store: RegistryStore | undefined;
  let receiver: RegistrationReceiver | undefined;
  let querySub: Subscription | undefined;
  let puppetDbSub: Subscription | undefined;
  let http: { app: FastifyInstance; address: string } | undefined;
  let beacon: ServiceBeacon | undefined;
  const stop = async () => {
    await beacon?.stop();
    querySub?.unsubscribe();
    puppetDbSub?.unsubscribe();
    await http?.app.close();
    await receiver?.stop();
    store?.stop();
    if (owns) await closeConnection(nc);
  };
  try {
    const buckets = bucketsOn(nc);
    const kv = await openRegistryBucket(buckets, cfg.bucket, t.expireAfterMs, log, cfg.replicas).catch((e: Error) => {
      throw new MusterError("MUSTER_REGISTRY_UNAVAILABLE", `cannot create or open the registry bucket '${cfg.bucket}': ${e.message}. The broker needs JetStream (nats-server -js, or jetstream {} in its config).`, { cause: e });
    });
    store = await RegistryStore.open(buckets, cfg.bucket, log);
    receiver = new RegistrationReceiver({
      nc,
      kv,
      store,
      collectives: cfg.collectives,
      log,
      limits: { maxBytes: cfg.max_payload },
      refreshMs: t.refreshMs,
      flushMs: t.flushMs,
      maxPending: cfg.max_pending,
      queue: `muster-registry-${cfg.bucket}`,
    });
    receiver.start();
    querySub = serveQueries(nc, store, log, startedAt);
    if (puppetdb) puppetDbSub = servePuppetDb(nc, cfg.bucket, puppetdb, log);
    await nc.flush();
    // Receiving first, then asking: the answers (spread over a couple of seconds) find us listening.
    if (cfg.fill_on_start) for (const c of cfg.collectives) nc.publish(subjects.registrationSolicit(c), new TextEncoder().encode(JSON.stringify({ bucket: cfg.bucket, time: Date.now() })));
    if (cfg.http) http = await serveHttp(store, receiver, { host: cfg.http.host, port: cfg.http.port, token, startedAt, puppetdb });
    // one of the site's services (docs/fleet.md#the-sites-services): alive, and whether registrations reach it
    let errorsBefore = 0;
    const [st, rc] = [store, receiver];
    beacon = new ServiceBeacon(buckets, {
      role: "registry",
      name: hostname(),
      version: VERSION,
      log,
      status: () => {
        const r = registryServiceStatus(st.status(undefined, startedAt), rc.stats, errorsBefore, Date.now());
        errorsBefore = rc.stats.writeErrors;
        return r;
      },
    });
    beacon.start();
    log.info({ bucket: cfg.bucket, collectives: cfg.collectives, nodes: store.size, max_age_s: cfg.max_age, refresh_ms: t.refreshMs, http: http?.address, http_auth: token ? "bearer" : "none", fill_on_start: cfg.fill_on_start, puppetdb: puppetdb?.url }, "registry serving");
  } catch (e) {
    await stop().catch(() => undefined);
    throw e;
  }
  return { store, receiver, httpAddress: http?.address, stop };
}
