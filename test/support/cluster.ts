import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connectNats } from "./collective.js";
import { freePort, startNats, type NatsHandle } from "./index.js";

// A 3-node nats-server cluster with JetStream on loopback, for resilience tests: each member has its
// own store dir and fixed client/route/monitoring ports, so a member killed with stop(i)/kill(i)
// comes back with start(i) on the same address and the same JetStream state. Client ports use TLS with the test PKI
// (client certificates required), as every test broker does; routes between members stay plain TCP
// on loopback.

export interface NatsCluster {
  urls: string[];
  /** Each member's monitoring port (/varz, /routez, /jsz), as the console watches brokers. */
  monitorUrls: string[];
  /** Each member's server_name (n0, n1, ...). */
  names: string[];
  /** SIGKILL member i (a crash: no graceful shutdown, no lame-duck). */
  kill(i: number): Promise<void>;
  /** Start member i again on its ports with its store dir. */
  start(i: number): Promise<void>;
  /** Resolves once JetStream answers with a meta leader and an R3 stream can be created. */
  ready(timeoutMs?: number): Promise<void>;
  stopAll(): Promise<void>;
}

export async function startCluster(size = 3, name = "muster-test"): Promise<NatsCluster> {
  const root = mkdtempSync(join(tmpdir(), "muster-cluster-"));
  const host = "127.0.0.1";
  const all = new Set<number>();
  while (all.size < size * 3) all.add(await freePort(host));
  const ports = [...all].slice(0, size);
  const routePorts = [...all].slice(size, size * 2);
  const httpPorts = [...all].slice(size * 2);
  const members: (NatsHandle | undefined)[] = new Array(size).fill(undefined);
  const config = (i: number) =>
    `server_name: "n${i}"\nhttp: "${host}:${httpPorts[i]}"\ncluster {\n  name: "${name}"\n  listen: "${host}:${routePorts[i]}"\n  routes: [${routePorts.map((p) => `"nats-route://${host}:${p}"`).join(", ")}]\n}\n`;
  const start = async (i: number) => {
    if (members[i]) throw new Error(`member ${i} is running`);
    members[i] = await startNats({ host, port: ports[i], dir: join(root, `n${i}`), config: config(i) });
  };
  const urls = ports.map((p) => `nats://${host}:${p}`);
  const cluster: NatsCluster = {
    urls,
    monitorUrls: httpPorts.map((p) => `http://${host}:${p}`),
    names: ports.map((_, i) => `n${i}`),
    start,
    async kill(i) {
      const m = members[i];
      if (!m) return;
      members[i] = undefined;
      try {
        process.kill(m.pid, "SIGKILL");
      } catch {
        /* already gone */
      }
      await m.stop(); // reaps the process and its watchdog; the dir is ours, so it is kept
    },
    async ready(timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      const nc = await connectNats(urls, { maxReconnectAttempts: -1 });
      try {
        for (;;) {
          try {
            const jsm = await jetstreamManager(nc, { timeout: 2000 });
            const probe = "cluster_probe";
            await jsm.streams.add({ name: probe, subjects: ["cluster.probe"], num_replicas: size }).catch(async (e: Error) => {
              if (!/already in use/i.test(e.message)) throw e;
            });
            await jetstream(nc, { timeout: 2000 }).publish("cluster.probe", new Uint8Array(0));
            await jsm.streams.delete(probe);
            return;
          } catch (e) {
            if (Date.now() > deadline) throw new Error(`JetStream cluster not ready after ${timeoutMs} ms: ${(e as Error).message}`);
            await new Promise((r) => setTimeout(r, 250)); // polling for a leader election: no event to wait on
          }
        }
      } finally {
        await nc.close();
      }
    },
    async stopAll() {
      await Promise.all(members.map((m, i) => (members[i] = undefined, m?.stop())));
      rmSync(root, { recursive: true, force: true });
    },
  };
  try {
    await Promise.all(ports.map((_, i) => start(i)));
    await cluster.ready();
  } catch (e) {
    await cluster.stopAll();
    throw e;
  }
  return cluster;
}
