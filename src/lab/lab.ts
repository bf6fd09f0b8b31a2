import { mkdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { powerOffMachine, powerOnMachine, type MachineKind } from "./machines/index.js";
import { startNats } from "./nats.js";
import { launchLabServer } from "./nodes.js";
import { planLab, STEP_NEEDS } from "./plan.js";
import { stopPid } from "./processes.js";
import type { PuppetserverHandle } from "./puppetserver.js";
import { runPlan } from "./runner.js";
import { addLabNodes, removeLabNode, type AddNodesOptions } from "./scale.js";
import { stateFile, writeLabState, type LabNode, type LabState } from "./state.js";
import { keepProcess, LAB_STEPS, metricsPort, provisionerConfigFile, serviceContext, type LabRun } from "./steps.js";

// A whole fleet on loopback: nats-server with JetStream, two real puppetservers in two regions,
// N real `muster server` nodes (or whole machines) waiting to be provisioned, two master nodes
// (puppetca), the registry (HTTP with a bearer token, queried by the masters' search_nodes), the
// web console, a notifier with a webhook receiver, and (optionally) the provisioner. Used by
// `muster lab` and by the tests.
//
// This file is src/lab's front door: startLab plans the lab (plan.ts), runs the plan (runner.ts
// with the steps of steps.ts), and hands back a Lab to work with; the rest of the lab's public
// API is re-exported below from the file that owns it.

export type { AddNodesOptions } from "./scale.js";
export { addLabNodes, labRegionFor, planNewNodes, removeLabNode } from "./scale.js";
export { LAB_REGIONS, type LabRegion } from "./regions.js";
export { LAB_COLLECTIVE, LAB_NOTIFIER, LAB_PROVISIONER_CALLER, LAB_PROVISIONING_COLLECTIVE, nodeIdentity } from "./names.js";
export { labPids, readLabState, stateFile, type LabMaster, type LabNode, type LabRegistry, type LabState, type LabWeb } from "./state.js";
export { connectedUsers, labBrokerSpec, labProvisionerClient, writeLabAuthorization } from "./broker.js";
export { labWebToken, provisionerKey } from "./credentials.js";
export { labFactsForPuppet, labNodeSpec, provisionPluginConfig, startLabNode, type LabNodeContext, type LabNodeSpec } from "./nodes.js";
export { labProvisionerConfig, puppetcaPluginConfig, writeSearchNodesConfig } from "./services.js";
export { waitForNodes, waitForRegistry, waitForWeb } from "./waits.js";
export { stopLabFromState, stopLabRemains } from "./teardown.js";
export { LAB_NRPE_PLUGINS, labNrpeConfig } from "./nrpe.js";

export interface LabOptions {
  dir: string;
  nodes: number;
  detached: boolean;
  /** Start the provisioner too (the lab); tests run their own. */
  provisioner: boolean;
  /** Overrides merged into the generated provisioner config. */
  provisionerConfig?: Record<string, unknown>;
  progress?: (line: string) => void;
  /** Run every muster process of the lab with this executable (`lab up --from-package`). */
  bin?: string;
  /**
   * Nodes are whole machines booted through cloud-init from the package (`lab up --machines N`):
   * systemd-nspawn, or QEMU with kind "vm". `deb`: the package they install (default: built now).
   */
  machines?: { kind: MachineKind; deb?: string; imageCache?: string };
}

export interface Lab {
  state: LabState;
  masters: PuppetserverHandle[];
  /** Write a provisioner config for this lab (used by `lab up` and tests). */
  provisionerConfig(overrides?: Record<string, unknown>): string;
  /** Stop the broker (an outage: every connection drops); its JetStream state stays on disk. */
  stopBroker(): Promise<void>;
  /** Start it again, same port, config and state (a broker back from an outage). */
  startBroker(): Promise<void>;
  /** Stop one muster server (node, master or notifier) of an attached lab (SIGTERM unless told). */
  stopServer(identity: string, signal?: NodeJS.Signals): Promise<void>;
  /** Start it again (a node restart: it publishes a startup lifecycle event). */
  startServer(identity: string): void;
  /** Boot new waiting nodes into the running lab (`muster lab add`). */
  addNodes(o: AddNodesOptions): Promise<LabNode[]>;
  /** Terminate a node: its process and its directory (`muster lab remove`). */
  removeNode(identity: string): Promise<LabNode>;
  stop(): Promise<void>;
}

/**
 * Bring a lab up: every step of its plan, overlapping where they can. A step that fails takes
 * down exactly what was started before it rejects.
 */
export async function startLab(o: LabOptions): Promise<Lab> {
  const dir = resolve(o.dir);
  mkdirSync(join(dir, "logs"), { recursive: true });
  const run: LabRun = { dir, o, say: o.progress ?? (() => undefined), servers: new Map(), nodes: [], masters: [], labMasters: [] };
  const ledger = await runPlan(planLab(o), LAB_STEPS, run, STEP_NEEDS);
  const state = run.state!;
  const metrics = await metricsPort(run);
  // started after `lab up`: noted in the same ledger, stopped first
  const later = (name: string, p: Parameters<typeof keepProcess>[3], x: { node?: string; graceMs?: number } = {}) => keepProcess(run, (n, stop) => ledger.add(n, stop), name, p, x);
  return {
    state,
    masters: run.masters,
    provisionerConfig: (overrides = {}) => provisionerConfigFile(run, metrics, overrides),
    async stopBroker() {
      await run.nats!.stop();
    },
    async startBroker() {
      run.nats = await startNats({ ...run.natsOptions!, port: run.nats!.port });
      state.natsPid = run.nats.pid;
      writeLabState(state);
    },
    async stopServer(identity, signal) {
      const p = run.servers.get(identity);
      if (!p) throw new Error(`no lab server ${identity}`);
      // a machine: SIGTERM powers it off cleanly, SIGKILL cuts its power
      const m = state.nodes.find((n) => n.identity === identity)?.machine;
      if (m) await powerOffMachine(m.dir, p.pid, { cut: signal === "SIGKILL" });
      await p.stop(signal, m ? 60_000 : undefined);
      run.servers.delete(identity);
    },
    startServer(identity) {
      if (run.servers.has(identity)) throw new Error(`lab server ${identity} is already running`);
      const n = state.nodes.find((x) => x.identity === identity);
      if (n?.machine) {
        // power on again, same disk: the supervisor is a lab process like the rest
        const p = powerOnMachine(n.machine.dir, o.detached);
        later(`machine ${identity}`, p, { node: identity, graceMs: 60_000 });
        n.pid = p.pid;
        writeLabState(state);
        return;
      }
      later(`muster server ${identity}`, launchLabServer(serviceContext(run), identity), { node: identity });
    },
    addNodes: (a) => addLabNodes(state, { ...a, detached: o.detached, track: (name, p, x) => later(name, p, x ? { node: x.node, graceMs: state.machines ? 60_000 : undefined } : {}) }),
    async removeNode(identity) {
      return removeLabNode(state, identity, async (n) => {
        const p = run.servers.get(n.identity);
        run.servers.delete(n.identity);
        if (n.machine) await powerOffMachine(n.machine.dir, n.pid, { cut: true });
        if (p) await p.stop("SIGKILL");
        else await stopPid(n.pid);
      });
    },
    async stop() {
      await ledger.stop();
      rmSync(stateFile(dir), { force: true });
    },
  };
}
