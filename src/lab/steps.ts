import { join, resolve } from "node:path";
import { labNatsOptions, operatorEnv, writeLabAuthorization } from "./broker.js";
import { enrollLabServices, labPki, provisionerKey, serverTls, writeClientCaBundle, type LabPki } from "./credentials.js";
import * as machines from "./machines/index.js";
import type { BootMachineContext, LabMachinesState, LabPackages, MachineImage, VmImage } from "./machines/index.js";
import { labEnvironments } from "./manifests.js";
import { LAB_COLLECTIVE, LAB_PROVISIONING_COLLECTIVE } from "./names.js";
import { startNats, type NatsHandle, type StartNatsOptions } from "./nats.js";
import { labNodeSecurity, launchLabServer, startLabNode, writeLabServerConfig } from "./nodes.js";
import type { LabShape, LabStep } from "./plan.js";
import { freePort } from "./ports.js";
import type { MusterProcess } from "./processes.js";
import { startPuppetserver, type PuppetserverHandle } from "./puppetserver.js";
import { LAB_REGIONS } from "./regions.js";
import type { StepRun, StepTable } from "./runner.js";
import { masterServerConfig, notifierConfig, startProvisioner, startReceiver, startRegistry, startWeb, writeProvisionerConfig, writeSearchNodesConfig, type ServiceContext } from "./services.js";
import { rememberPid, writeLabState, type LabMaster, type LabNode, type LabRegistry, type LabState, type LabWeb } from "./state.js";
import { poweredOff, waitForNodes, waitForRegistry, waitForWeb, type LabReach } from "./waits.js";

// One implementation per kind of step of the lab's plan (plan.ts), run by runner.ts. A step reads
// what earlier steps made from the run's context (need() says which step forgot its dependency),
// notes each process it starts (its pid in pids.jsonl too, for `lab down` after a Ctrl-C) and adds
// what it made to the context.

/** One lab coming up: its options, and what its steps have made so far. */
export interface LabRun {
  dir: string;
  o: LabShape & { detached: boolean; bin?: string };
  say: (line: string) => void;
  /** Each muster server and machine supervisor by identity: what stopServer and startServer act on. */
  servers: Map<string, MusterProcess>;
  nodes: LabNode[];
  /** By region index. */
  masters: PuppetserverHandle[];
  labMasters: LabMaster[];
  pki?: LabPki;
  prov?: ReturnType<typeof provisionerKey>;
  security?: Record<string, unknown>;
  ports?: { monitor: number; masters: number[] };
  natsOptions?: StartNatsOptions;
  nats?: NatsHandle;
  /** The operator's environment, for the lab's processes that are not nodes. */
  env?: Record<string, string>;
  receiver?: LabState["receiver"];
  registry?: LabRegistry;
  web?: LabWeb;
  notifier?: LabState["notifier"];
  image?: { image: MachineImage; vm?: VmImage };
  network?: { netns: string; socketDir: string };
  packages?: LabPackages;
  relays?: LabMachinesState["relays"];
  machines?: LabMachinesState;
  boot?: BootMachineContext;
  state?: LabState;
  metricsPort?: number;
}

type LabStepTable = StepTable<LabStep, LabRun>;

/** What an earlier step made, or an error naming the step that ran too early. */
function need<K extends keyof LabRun>(run: LabRun, what: K): NonNullable<LabRun[K]> {
  const v = run[what];
  if (v === undefined || v === null) throw new Error(`a lab step ran before ${String(what)} was made: its plan lacks a dependency (plan.ts STEP_NEEDS)`);
  return v as NonNullable<LabRun[K]>;
}

/**
 * Note a process the lab started: in pids.jsonl (until lab.json names it, how `lab down` finds it),
 * with its stop (`graceMs`: a machine's supervisor shuts the machine down cleanly), and, for a muster
 * server or a machine, by identity.
 */
export function keepProcess(run: LabRun, note: StepRun["started"], name: string, p: MusterProcess, o: { node?: string; graceMs?: number } = {}): void {
  rememberPid(run.dir, p.pid);
  if (o.node) run.servers.set(o.node, p);
  note(name, () => p.stop("SIGTERM", o.graceMs));
}

/** How the lab starts its processes, once the broker is up. */
export const serviceContext = (run: LabRun): ServiceContext => ({ dir: run.dir, broker: need(run, "nats").url, env: need(run, "env"), detached: run.o.detached, bin: run.o.bin });

/** A lab muster server: its config written, then started (the notifier, the masters' puppetca servers). */
function startLabServer(run: LabRun, step: StepRun, identity: string, cfg: Record<string, unknown>): MusterProcess {
  writeLabServerConfig(run.dir, need(run, "nats").url, need(run, "security"), identity, cfg);
  const p = launchLabServer(serviceContext(run), identity);
  keepProcess(run, step.started, `muster server ${identity}`, p, { node: identity });
  return p;
}

/** What waiting for the lab's servers needs, before lab.json exists. */
const reach = (run: LabRun): LabReach => ({ broker: need(run, "nats").url, collective: LAB_COLLECTIVE, provisioningCollective: LAB_PROVISIONING_COLLECTIVE, tls: tlsState(run), provisionerEnv: need(run, "prov").env, ...(run.machines ? { machines: run.machines } : {}) });
const tlsState = (run: LabRun): LabState["tls"] => ({ ca: need(run, "pki").ca.cert, admin: need(run, "pki").admin, provisioner: need(run, "pki").provisioner });
const abandoned = (step: StepRun) => (step.signal.aborted ? "no longer waited for: the lab's start was abandoned" : undefined);

export const LAB_STEPS: LabStepTable = {
  "check-host": ({ kind }) => machines.checkMachineHost(kind),

  credentials({ brokerIps, nodes, services }, _step, run) {
    // TLS everywhere, every connection a user with its own permissions (docs/security.md)
    run.pki = labPki(run.dir, brokerIps);
    run.prov = provisionerKey(run.dir);
    run.security = labNodeSecurity(run.prov.key.publicKey);
    // client certificates come from the lab CA now and from the masters' Puppet CAs once they are up
    writeClientCaBundle(run.dir, [run.pki.ca.cert]);
    // users in their own file, so `lab add`/`lab remove` can rewrite them and reload
    writeLabAuthorization(run.dir, nodes, services);
  },

  async ports({ masterHosts }, _step, run) {
    run.ports = { monitor: await freePort("127.0.0.1"), masters: await Promise.all(masterHosts.map((h) => freePort(h))) };
  },

  async nats(_args, step, run) {
    run.say("starting nats-server (JetStream, TLS, a user per node) on 127.0.0.1");
    run.natsOptions = labNatsOptions(run.dir, need(run, "pki"), need(run, "ports").monitor, run.o.detached);
    run.nats = await startNats(run.natsOptions);
    step.started("nats-server", () => run.nats?.stop()); // the broker of the moment (stopBroker/startBroker)
    run.env = operatorEnv(run.nats.url, run.pki!.ca.cert, run.pki!.admin);
  },

  async puppetserver({ index, region, certname, altIps, announce }, step, run) {
    if (announce) run.say(announce);
    const h = await startPuppetserver({ host: region.host, port: need(run, "ports").masters[index], dir: join(run.dir, "masters", region.name), certname, environments: labEnvironments(), detached: run.o.detached, altIps, signal: step.signal });
    step.started(`puppetserver ${certname}`, () => h.stop());
    run.masters[index] = h;
  },

  async "machine-image"({ kind, cache }, _step, run) {
    run.image = await machines.labImage(kind, cache ?? resolve(".muster", "images"), run.say);
  },

  async receiver(_args, step, run) {
    const { receiver, proc } = await startReceiver(serviceContext(run));
    keepProcess(run, step.started, "webhook receiver", proc);
    run.receiver = receiver;
  },

  async registry(_args, step, run) {
    const { registry, proc } = await startRegistry(serviceContext(run), need(run, "pki").registry);
    keepProcess(run, step.started, `registry ${registry.url}`, proc);
    run.registry = registry;
    run.say(`registry on ${registry.url} (bearer token in ${registry.token_file})`);
  },

  async web(_args, step, run) {
    const { web, proc } = await startWeb(serviceContext(run), need(run, "registry"));
    keepProcess(run, step.started, `web console ${web.url}`, proc);
    run.web = web;
    run.say(`web console on ${web.url} (log in with a token from ${web.tokens_file})`);
  },

  "machine-network"({ masters }, step, run) {
    // noted first: a network half made is taken down too (with whatever is left of the machines)
    step.started("lab network", () => machines.clearMachineRemains(run.dir));
    run.network = machines.makeLabNetwork(run.dir, masters, run.say);
  },

  async "machine-packages"({ deb }, step, run) {
    run.packages = await machines.startLabPackages({ labDir: run.dir, deb, detached: run.o.detached, track: (name, p) => keepProcess(run, step.started, name, p), progress: run.say });
  },

  async "machine-relays"({ masterHosts }, step, run) {
    const network = need(run, "network");
    const ports = need(run, "ports");
    const specs = machines.labRelaySpecs({ netns: network.netns, natsPort: need(run, "nats").port, packagesPort: machines.packageServerPort(need(run, "packages")), masters: masterHosts.map((host, i) => ({ host, port: ports.masters[i]! })) });
    run.relays = await machines.startRelays(specs, network.socketDir, { logDir: join(run.dir, "logs"), detached: run.o.detached, track: (name, p) => keepProcess(run, step.started, name, p) });
    run.say(`lab network ${network.netns}: bridge ${machines.LAB_NET.bridge} ${machines.RELAY_ADDRESS}/${machines.LAB_NET.prefix}, relays for the broker, the package server and ${masterHosts.length} masters; no route out`);
  },

  async "machines-ready"({ kind, count }, _step, run) {
    const ms = machines.labMachinesState({ kind, image: need(run, "image"), network: need(run, "network"), packages: need(run, "packages"), relays: need(run, "relays"), natsPort: need(run, "nats").port, ssh: machines.labSshKey(run.dir) });
    run.machines = ms;
    run.boot = await machines.machineBootContext(run.dir, ms, need(run, "pki").ca, need(run, "prov").key.publicKey, run.o.detached, () => undefined);
    run.say(`powering on ${count} ${kind === "vm" ? "QEMU" : "systemd-nspawn"} machine(s) from image ${ms.imageKey}; cloud-init installs ${ms.packages.deb} on each`);
  },

  async "boot-machine"({ identity, region, serial, puppet }, step, run) {
    const boot = { ...need(run, "boot"), track: (name: string, p: MusterProcess) => keepProcess(run, step.started, name, p) };
    const { node, proc } = await machines.bootLabMachine(boot, { identity, region, serial, role: puppet });
    // a machine's supervisor shuts it down cleanly: it may take a minute
    keepProcess(run, step.started, `machine ${identity}`, proc, { node: identity, graceMs: 60_000 });
    run.nodes.push(node);
  },

  "ssh-config"(_args, _step, run) {
    machines.writeSshConfig(need(run, "machines"), run.nodes);
  },

  "start-node"({ identity, region, serial }, step, run) {
    const pki = need(run, "pki");
    const ctx = { dir: run.dir, broker: need(run, "nats").url, caCert: pki.ca.cert, caKey: pki.ca.key, security: need(run, "security"), env: need(run, "env"), detached: run.o.detached, bin: run.o.bin };
    const { node, proc } = startLabNode(ctx, identity, region, serial);
    keepProcess(run, step.started, `muster server ${identity}`, proc, { node: identity });
    run.nodes.push(node);
  },

  notifier({ identity }, step, run) {
    const p = startLabServer(run, step, identity, notifierConfig(identity, serverTls(need(run, "pki"), identity), need(run, "receiver").url));
    run.notifier = { identity, pid: p.pid };
  },

  async "wait-provisioning"({ identities, timeoutMs, machines: announce }, step, run) {
    if (announce) run.say("waiting for the machines: boot, cloud-init, the package installed, muster-server waiting to be provisioned");
    const found = announce ? (id: string) => run.say(machines.machineWaiting(run.nodes.find((n) => n.identity === id)!)) : undefined;
    await waitForNodes(reach(run), identities, timeoutMs, "provisioning", found, () => abandoned(step) ?? (announce ? poweredOff(run.nodes, run.servers) : undefined));
  },

  async "trust-masters"(_args, _step, run) {
    const handles = run.masters;
    for (const h of handles) writeSearchNodesConfig(h.confdir, need(run, "registry"));
    run.say(`puppetservers ready: ${handles.map((h) => `${h.url} (${(h.startMs / 1000).toFixed(0)} s)`).join(", ")}`);
    // a provisioned node connects with its Puppet certificate: the bundle grows, then a reload
    writeClientCaBundle(run.dir, [need(run, "pki").ca.cert, ...handles.map((h) => h.caCertPath)]);
    await need(run, "nats").reload();
  },

  "master-server"({ index, identity, region, ipaddress }, step, run) {
    const h = run.masters[index]!;
    const p = startLabServer(run, step, identity, masterServerConfig(identity, serverTls(need(run, "pki"), identity), region, ipaddress, h));
    run.labMasters[index] = { identity, region, host: h.host, port: h.port, dir: h.dir, pid: h.pid, serverPid: p.pid };
  },

  "save-state"(_args, _step, run) {
    run.state ??= labState(run);
    writeLabState(run.state);
  },

  async "wait-fleet"({ identities, timeoutMs }, step, run) {
    run.say(`waiting for ${identities.length + run.nodes.length} muster servers to answer (${run.nodes.length} in the provisioning collective)`);
    await waitForNodes(need(run, "state"), identities, timeoutMs, "fleet", undefined, () => abandoned(step));
    // they answer, so their node keys exist: enrolled, their replies verify (docs/deploy.md's enroll step)
    const enrolled = await enrollLabServices(need(run, "nats").url, need(run, "pki").admin, identities);
    if (enrolled.length) run.say(`node keys enrolled in the key directory: ${enrolled.join(", ")}`);
  },

  "wait-registry": ({ timeoutMs }, step, run) => waitForRegistry(need(run, "registry"), timeoutMs, step.signal),

  "wait-web": ({ timeoutMs }, step, run) => waitForWeb(need(run, "web"), timeoutMs, step.signal),

  async provisioner({ overrides }, step, run) {
    const file = provisionerConfigFile(run, await metricsPort(run), overrides);
    const { provisioner, proc } = startProvisioner(serviceContext(run), file, need(run, "prov").env, run.metricsPort!);
    keepProcess(run, step.started, "provisioner", proc);
    const state = need(run, "state");
    state.provisioner = provisioner;
    writeLabState(state);
    run.say(`provisioner started (metrics on ${provisioner.metrics})`);
  },
};

/** The port the provisioner serves its metrics on, picked once, when first asked for. */
export async function metricsPort(run: LabRun): Promise<number> {
  run.metricsPort ??= await freePort("127.0.0.1");
  return run.metricsPort;
}

/** Write a provisioner config for this lab (lab up's, and the tests' own provisioners'). */
export function provisionerConfigFile(run: LabRun, metrics: number, overrides?: Record<string, unknown>): string {
  return writeProvisionerConfig({ dir: run.dir, broker: need(run, "nats").url, receiverUrl: need(run, "receiver").url, metricsPort: metrics, tls: need(run, "pki").provisioner }, overrides);
}

/** lab.json, from what the steps made. */
function labState(run: LabRun): LabState {
  const nats = need(run, "nats");
  return {
    version: 1,
    dir: run.dir,
    collective: LAB_COLLECTIVE,
    provisioningCollective: LAB_PROVISIONING_COLLECTIVE,
    broker: nats.url,
    natsPid: nats.pid,
    masters: run.labMasters,
    nodes: run.nodes,
    notifier: need(run, "notifier"),
    receiver: need(run, "receiver"),
    registry: need(run, "registry"),
    web: need(run, "web"),
    startedAt: Date.now(),
    tls: tlsState(run),
    provisionerEnv: need(run, "prov").env,
    monitor: `http://127.0.0.1:${need(run, "ports").monitor}`,
    services: [need(run, "notifier").identity, ...LAB_REGIONS.map((_, i) => run.labMasters[i]!.identity)],
    nodeSerial: run.o.nodes,
    nodeSecurity: need(run, "security"),
    ...(run.o.bin ? { bin: run.o.bin } : {}),
    ...(run.machines ? { machines: run.machines } : {}),
  };
}
