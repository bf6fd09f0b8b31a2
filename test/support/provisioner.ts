import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { stringify as toYaml } from "yaml";
import { MusterClient } from "../../src/client/client.js";
import { startEmulator, type RunningEmulator } from "../../src/emulator/emulator.js";
import type { FleetNode } from "../../src/emulator/fleet.js";
import { SimulatedCA, simulatedFactories, type SimulationOptions } from "../../src/emulator/simulated.js";
import { silentLogger } from "../../src/log.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { connectNats } from "./collective.js";
import { startNats, type NatsHandle } from "./index.js";

/**
 * Writes `<dir>/<name>.yaml`: a provisioner config with every step on, for the emulated fleets
 * with simulated agents (masters chosen by country, a notifier with a dummy target), logging to
 * `<dir>/<name>.log`. `settings` adds or overrides keys (broker, concurrency, leases ...).
 */
export function writeSimulatedProvisionerConfig(dir: string, name: string, settings: Record<string, unknown>): string {
  const file = join(dir, `${name}.yaml`);
  writeFileSync(
    file,
    toYaml({
      logfile: join(dir, `${name}.log`),
      loglevel: "debug",
      sleeptime: 1,
      steps: { lock: true, set_puppet_hostname: true, clean_node_certname: true, send_node_csr: true, sign_node_csr: true, puppet_bootstrap_stage: true, puppet_final_run: true, notify: true },
      master: { criteria: ["country"], agent: "puppetca" },
      notify: { agent: "notify", targets: ["http://127.0.0.1:9/"] },
      id: name,
      ...settings,
    }),
  );
  return file;
}

export interface SimulatedSite {
  dir: string;
  /** This process's environment with the site's key directory, for child processes. */
  env: NodeJS.ProcessEnv;
  nats: NatsHandle;
  nc: NatsConnection;
  emu: RunningEmulator;
  client: MusterClient;
  store: ProvisionState;
  ca: SimulatedCA;
  /** Stops the client, the fleet and the broker and removes the directory. */
  stop(): Promise<void>;
}

/**
 * What a simulated provisioning test runs against: a broker, `fleet` emulated with the simulated
 * agents and CA (src/emulator/simulated.ts), a client and the state store. The user key is the
 * site's own (MUSTER_CONFIG_DIR), so the fleet and any child node trust the provisioner's requests.
 */
export async function startSimulatedSite(prefix: string, fleet: FleetNode[], sim: SimulationOptions, o: { ca?: SimulatedCA; keyBucket?: false } = {}): Promise<SimulatedSite> {
  const dir = mkdtempSync(join(tmpdir(), `muster-${prefix}-`));
  process.env.MUSTER_CONFIG_DIR = join(dir, "keys");
  const env = { ...process.env };
  const nats = await startNats({});
  const nc = await connectNats(nats.url);
  const ca = o.ca ?? new SimulatedCA();
  const emu = await startEmulator({ nc, nodes: fleet, collective: "muster", log: silentLogger, factories: simulatedFactories(ca, sim) });
  const client = await MusterClient.connect({ brokers: [nats.url], collective: "muster", ...(o.keyBucket === false ? { keyBucket: false } : {}) });
  const store = await ProvisionState.open(client, "muster_provision");
  return {
    dir,
    env,
    nats,
    nc,
    emu,
    client,
    store,
    ca,
    async stop() {
      await client.close();
      await emu.stop();
      await nc.drain();
      await nats.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
