import { randomBytes } from "node:crypto";
import { appendFileSync, chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { stringify as toYaml } from "yaml";
import { authorizationConfig, type BrokerAuthSpec } from "../broker/auth.js";
import type { TlsSettings } from "../broker/connect.js";
import { MusterClient } from "../client/client.js";
import { nodeServerConfig } from "../config/node.js";
import { MusterError } from "../errors.js";
import { generateSigningKey, signingKeyFromPem, type SigningKey } from "../protocol/signing.js";
import { issueBootstrapCredential, writeBootstrapCredential } from "../broker/bootstrap.js";
import { ensureCA, issueCert, type CA } from "../security/pki.js";
import { tokenEntries, type Role } from "../web/auth.js";
import { startNats } from "./nats.js";
import { freePort } from "./ports.js";
import { cmdlineOf, isAlive, spawnMuster, stopPid, type MusterProcess } from "./processes.js";
import { labEnvironments, labRole, ROLE_FACT_NAMES, roleFacts, type LabRole } from "./manifests.js";
import { startPuppetserver, stopDetachedPuppetserver, type PuppetserverHandle } from "./puppetserver.js";
import { addLabNodes, removeLabNode, type AddNodesOptions } from "./scale.js";
import { LAB_REGIONS, type LabRegion } from "./regions.js";
import type { LabMachinesState, LabNodeMachine } from "./machines/fleet.js";
import type { MachineKind } from "./machines/machine.js";

export type { AddNodesOptions } from "./scale.js";

// A whole fleet on loopback: nats-server with JetStream, two real puppetservers in two regions,
// N real `muster server` nodes waiting to be provisioned, two master nodes (puppetca), the
// registry (HTTP with a bearer token, queried by the masters' search_nodes), a notifier with a
// webhook receiver, and (optionally) the provisioner. Used by `muster lab` and by the tests.

export const LAB_COLLECTIVE = "muster";
/** Where nodes wait to be provisioned (provisioning isolation). */
export const LAB_PROVISIONING_COLLECTIVE = "provisioning";
/** The provisioner's caller name: the only one a waiting node answers. */
export const LAB_PROVISIONER_CALLER = "provisioner";

export { LAB_REGIONS, type LabRegion } from "./regions.js";

export interface LabNode {
  identity: string;
  country: string;
  region: string;
  ipaddress: string;
  dir: string;
  pid: number;
  /** Role, customer and environment (manifests.ts labRole). */
  role: LabRole;
  /** A whole machine (systemd-nspawn or QEMU) instead of a process: `pid` is its power supervisor. */
  machine?: LabNodeMachine;
}

export interface LabRegistry {
  pid: number;
  /** http://127.0.0.1:<port>: what the masters' search_nodes asks (with the token). */
  url: string;
  token_file: string;
  config: string;
  log: string;
}

/** The lab's web console (`muster web`): where it listens and the tokens to log in with. */
export interface LabWeb {
  pid: number;
  url: string;
  /** Lines of `<token> <role> <name>`: one operator, one viewer. */
  tokens_file: string;
  config: string;
  log: string;
}

export interface LabMaster {
  identity: string;
  region: LabRegion;
  host: string;
  port: number;
  dir: string;
  pid: number; // puppetserver JVM
  serverPid: number; // its muster server (puppetca agent)
}

export interface LabState {
  version: 1;
  dir: string;
  collective: string;
  broker: string;
  natsPid: number;
  masters: LabMaster[];
  nodes: LabNode[];
  notifier: { identity: string; pid: number };
  receiver: { url: string; file: string; pid: number };
  registry: LabRegistry;
  /** Absent in labs started before the console existed. */
  web?: LabWeb;
  provisioner?: { pid: number; config: string; metrics: string; log: string };
  startedAt: number;
  provisioningCollective: string;
  /** The broker's TLS: the lab CA and the credentials of the lab's own users. */
  tls: { ca: string; admin: TlsSettings; provisioner: TlsSettings };
  /** MUSTER_CONFIG_DIR and MUSTER_CALLER for a process that signs as the provisioner. */
  provisionerEnv: Record<string, string>;
  /** nats-server monitoring (connz shows which user each connection mapped to). */
  monitor: string;
  /** Service identities with broker users of their own (notifier, masters): kept when nodes come and go. */
  services?: string[];
  /** The highest node number handed out: added nodes continue from here (a cloud never reuses a name unasked). */
  nodeSerial?: number;
  /** The nodes' `security` settings, so nodes added later trust exactly what the first ones trust. */
  nodeSecurity?: Record<string, unknown>;
  /** The muster executable the lab's processes run (an unpacked package's), when not this checkout's. */
  bin?: string;
  /** A lab whose nodes are machines: their network, relays, image and package. */
  machines?: LabMachinesState;
}

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

export const stateFile = (dir: string) => join(dir, "lab.json");

export function readLabState(dir: string): LabState | undefined {
  const f = stateFile(dir);
  if (!existsSync(f)) return undefined;
  try {
    return JSON.parse(readFileSync(f, "utf8")) as LabState;
  } catch {
    return undefined;
  }
}

export function labPids(s: LabState): { name: string; pid: number }[] {
  return [
    { name: "nats-server", pid: s.natsPid },
    ...s.masters.flatMap((m) => [
      { name: `puppetserver ${m.identity}`, pid: m.pid },
      { name: `muster server ${m.identity}`, pid: m.serverPid },
    ]),
    ...s.nodes.map((n) => ({ name: `${n.machine ? "machine" : "muster server"} ${n.identity}`, pid: n.pid })),
    ...(s.machines
      ? [
          { name: `package server ${s.machines.packages.hostUrl}`, pid: s.machines.packages.pid },
          ...s.machines.relays.flatMap((r) => r.pids.map((pid, i) => ({ name: `relay ${r.name} ${i ? r.target : r.listen}`, pid }))),
          ...s.nodes.flatMap((n) => (n.machine?.relayPids ?? []).map((pid, i) => ({ name: `relay ssh ${n.identity}${i ? "" : ` ${n.machine!.ssh.host}:${n.machine!.ssh.port}`}`, pid }))),
        ]
      : []),
    { name: `muster server ${s.notifier.identity}`, pid: s.notifier.pid },
    ...(s.registry ? [{ name: `registry ${s.registry.url}`, pid: s.registry.pid }] : []),
    ...(s.web ? [{ name: `web console ${s.web.url}`, pid: s.web.pid }] : []),
    { name: "webhook receiver", pid: s.receiver.pid },
    ...(s.provisioner ? [{ name: "provisioner", pid: s.provisioner.pid }] : []),
  ];
}

/**
 * Connection name -> the broker user its certificate mapped to, from nats-server's monitoring
 * endpoint (`connz?auth=true`). Empty when monitoring does not answer.
 */
export async function connectedUsers(monitor: string): Promise<Map<string, string>> {
  try {
    const res = await fetch(`${monitor}/connz?auth=true&limit=4096`, { signal: AbortSignal.timeout(3000) });
    const body = (await res.json()) as { connections?: { name?: string; authorized_user?: string }[] };
    return new Map((body.connections ?? []).filter((c) => c.name && c.authorized_user).map((c) => [c.name!, c.authorized_user!]));
  } catch {
    return new Map();
  }
}

/** A client acting as the provisioner: its credential, its key, the provisioning collective. */
export async function labProvisionerClient(s: LabState, name = "muster-lab-provisioner"): Promise<MusterClient> {
  const home = s.provisionerEnv.MUSTER_CONFIG_DIR!;
  const key = signingKeyFromPem(LAB_PROVISIONER_CALLER, readFileSync(join(home, "keys", `${LAB_PROVISIONER_CALLER}.pem`), "utf8"));
  return MusterClient.connect({ brokers: [s.broker], collective: s.provisioningCollective, name, tls: s.tls.provisioner, key });
}

/**
 * The lab's users: services by subject with OU=service (no Puppet certificate can carry one), nodes
 * by their Puppet certname, and each node's own bootstrap credential (OU=bootstrap), confined to its
 * provisioning subject. The notifier may keep its dedupe keys in KV.
 */
export function labBrokerSpec(nodes: string[], servicesNodes: string[]): BrokerAuthSpec {
  return {
    collectives: [LAB_COLLECTIVE],
    provisioning_collective: LAB_PROVISIONING_COLLECTIVE,
    nodes: [...nodes.map((identity) => ({ identity })), ...servicesNodes.map((identity) => ({ identity, users: [labNodeUser(identity)], ...(identity === LAB_NOTIFIER ? { notifier: true } : {}) }))],
    bootstrap: nodes.map((identity) => ({ identity })),
    provisioners: [serviceUser("provisioner")],
    admins: [serviceUser("admin")],
    registries: [serviceUser("registry")],
  };
}

/** The lab's notifier node (notify agent, dedupe keys in KV). */
export const LAB_NOTIFIER = "notifier.lab";

const serviceUser = (name: string) => `CN=${name},OU=service,O=muster`;
const labNodeUser = (identity: string) => `CN=${identity},OU=node,O=muster`;

/** The provisioner's signing key for the lab (created once), and the environment that makes a muster process use it. */
export function provisionerKey(dir: string): { key: SigningKey; env: Record<string, string> } {
  const home = join(dir, "provisioner-home");
  const file = join(home, "keys", `${LAB_PROVISIONER_CALLER}.pem`);
  let key: SigningKey;
  if (existsSync(file)) key = signingKeyFromPem(LAB_PROVISIONER_CALLER, readFileSync(file, "utf8"));
  else {
    mkdirSync(join(home, "keys"), { recursive: true, mode: 0o700 });
    const made = generateSigningKey(LAB_PROVISIONER_CALLER);
    writeFileSync(file, made.pem, { mode: 0o600 });
    chmodSync(file, 0o600);
    key = made.key;
  }
  return { key, env: { MUSTER_CONFIG_DIR: home, MUSTER_CALLER: LAB_PROVISIONER_CALLER } };
}

/**
 * The lab CA, the broker's certificate and the service credentials (bootstrap credentials are per
 * node: startLabNode). `brokerIps`: more addresses the broker is reached on (the machines' relay).
 */
function labPki(dir: string, brokerIps: string[] = []): { ca: CA; nats: { cert: string; key: string }; admin: TlsSettings; provisioner: TlsSettings; registry: TlsSettings } {
  const ca = ensureCA(join(dir, "pki"), "/O=muster/CN=muster lab CA");
  const svc = (name: string) => ({ ca: ca.cert, ...issueCert(ca, { name, subject: `/O=muster/OU=service/CN=${name}`, usage: "client" }) });
  return {
    ca,
    nats: issueCert(ca, { name: "nats", subject: "/O=muster/OU=broker/CN=nats.lab", ips: ["127.0.0.1", ...brokerIps], dns: ["localhost"], usage: "server" }),
    admin: svc("admin"),
    provisioner: svc("provisioner"),
    registry: svc("registry"),
  };
}

/** The node's provision agent settings: everything Puppet touches lives under the node's dir. */
export function provisionPluginConfig(nodeDir: string): Record<string, unknown> {
  const p = join(nodeDir, "puppet");
  return {
    confdir: join(p, "etc"),
    vardir: join(p, "var"),
    ssldir: join(p, "ssl"),
    rundir: join(p, "run"),
    logdir: join(p, "log"),
    lock_file: join(nodeDir, "provision.lock"),
    disable_file: join(nodeDir, "provision.disabled"),
    hosts_file: join(nodeDir, "hosts"),
    export_facts: ["country", "ec2_placement_region", "ipaddress", "muster_node_dir", ...ROLE_FACT_NAMES],
    bootstrap_environment: "bootstrap",
    production_environment: "production",
    // Several nodes share this machine, so not Facter's system directory: a custom fact on this
    // node's own factpath (<vardir>/facts), which pluginsync leaves alone.
    stage_fact_file: join(p, "var", "facts", "muster_lifecycle_stage.rb"),
  };
}

export function puppetcaPluginConfig(m: PuppetserverHandle): Record<string, unknown> {
  return { confdir: m.confdir, ssldir: m.ssldir, certname: m.certname, url: m.url, cacert: m.caCertPath, cert: m.hostCertPath, key: m.hostKeyPath };
}

export function nodeIdentity(i: number, r: LabRegion): string {
  return `node${String(i + 1).padStart(2, "0")}.${r.name}.lab`;
}

/** The lab node with this index (0-based): where it lives, what it is, and its muster server config. */
export interface LabNodeSpec {
  identity: string;
  region: LabRegion;
  ipaddress: string;
  dir: string;
  role: LabRole;
  /** The node's facts file (muster reads it; export_facts hands the scalars to Puppet). */
  facts: Record<string, unknown>;
  /** Files to write before the server starts, by absolute path. */
  files: Record<string, string>;
  /** The node-specific part of its `muster server` config (startLab adds brokers, security, ...). */
  server: Record<string, unknown>;
}

export { LAB_NRPE_PLUGINS, labNrpeConfig } from "./nrpe.js";
import { labNrpeConfig } from "./nrpe.js";

/**
 * One lab node's identity, role, facts and server config, deterministic by index, so `lab up`
 * and adding a node later make the same node. `bootstrap` is the node's own waiting credential.
 */
export function labNodeSpec(labDir: string, index: number, bootstrap: { ca: string; cert: string; key: string }, placement?: { identity: string; region: LabRegion }): LabNodeSpec {
  const region = placement?.region ?? LAB_REGIONS[index % LAB_REGIONS.length]!;
  const identity = placement?.identity ?? nodeIdentity(index, region);
  const dir = join(resolve(labDir), "nodes", identity);
  const role = labRole(index);
  const plugin = provisionPluginConfig(dir);
  const ipaddress = `127.0.1.${index + 1}`;
  const factsFile = join(dir, "facts.yaml");
  const nrpeDir = join(dir, "nrpe.d");
  // Not Puppet's facts.d for the facts: pluginsync purges files there that the master does not serve.
  const facts = { country: region.country, ec2_placement_region: region.region, ipaddress, muster_node_dir: dir, muster_lab: true, ...roleFacts(role) };
  // After provisioning, the puppet agent runs the same Puppet (muster puppet runall ...); those
  // runs see lifecycle_stage=production from the stage fact file the provision agent wrote.
  const puppet = { confdir: plugin.confdir, vardir: plugin.vardir, ssldir: plugin.ssldir, rundir: plugin.rundir, logdir: plugin.logdir, export_facts: plugin.export_facts };
  return {
    identity,
    region,
    ipaddress,
    dir,
    role,
    facts,
    files: {
      [factsFile]: toYaml(facts),
      [join(String(plugin.vardir), "facts", "muster_lab_facts.rb")]: labFactsForPuppet(factsFile),
      [join(nrpeDir, "lab.cfg")]: labNrpeConfig(),
      [join(dir, "files", ".keep")]: "",
    },
    // The same generator as the cloud-init example (src/config/node.ts): only paths differ.
    server: nodeServerConfig({
      identity,
      collectives: [LAB_COLLECTIVE],
      ca: bootstrap.ca,
      bootstrap,
      provisioning: { collective: LAB_PROVISIONING_COLLECTIVE, callers: [LAB_PROVISIONER_CALLER] },
      // classes come from the node's own Puppet classfile (asked of Puppet with the provision
      // agent's dirs): role::web, mysql::master, ...
      facts: { facter: false, file: factsFile, refresh_interval: 10 },
      plugins: {
        provision: plugin,
        puppet,
        nrpe: { conf_dir: nrpeDir, timeout: 10 },
        // file resources only, only under <node dir>/files, never one the catalog manages
        resource: { allowed_types: ["file"], file_paths: [join(dir, "files")], confdir: plugin.confdir, vardir: plugin.vardir },
      },
      registration: { interval: 30, splay: true },
    }),
  };
}

/**
 * The node's facts as a custom fact on its Puppet's own factpath (<vardir>/facts, which pluginsync
 * leaves alone), so a Puppet run muster does not start (daemon, cron, by hand) sees the same facts
 * as the runs muster starts with export_facts. FACTER_ variables still win over it.
 */
export function labFactsForPuppet(factsFile: string): string {
  return [
    "# muster lab: this node's facts for every Puppet run, however it is started.",
    "require 'yaml'",
    `file = ${JSON.stringify(factsFile)}`,
    "facts = File.exist?(file) ? (YAML.safe_load(File.read(file)) || {}) : {}",
    "facts.each do |name, value|",
    "  next if value.is_a?(Hash) || value.is_a?(Array)",
    "  Facter.add(name.to_sym) do",
    "    has_weight 100",
    "    setcode { value }",
    "  end",
    "end",
    "",
  ].join("\n");
}

/** What the masters' search_nodes reads (<confdir>/muster.yaml; puppet/modules/muster/README.md). */
export function writeSearchNodesConfig(masterConfdir: string, r: { url: string; token_file: string }): string {
  const file = join(masterConfdir, "muster.yaml");
  writeFileSync(file, toYaml({ registry_url: r.url, token_file: r.token_file, timeout: 10 }));
  return file;
}

/** A secret file of the lab's, made once (0600 in a 0700 directory) and kept across restarts of the lab. */
function secretOnce(file: string, make: () => string): string {
  if (!existsSync(file)) {
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    writeFileSync(file, make(), { mode: 0o600 });
  }
  return file;
}

/** The lab registry's bearer token. */
const registryToken = (dir: string) => secretOnce(join(dir, "registry", "token"), () => `${randomBytes(32).toString("hex")}\n`);

/** The console's tokens: an operator and a viewer. */
const webTokens = (dir: string) => {
  const token = () => randomBytes(24).toString("hex");
  return secretOnce(join(dir, "web", "tokens"), () => `# muster web tokens: <token> <role> <name>\n${token()} operator lab-operator\n${token()} viewer lab-viewer\n`);
};

/** The token of the first line with this role in a tokens file (what `lab up` tells the operator to paste). */
export function labWebToken(tokensFile: string, role: Role): string | undefined {
  try {
    return tokenEntries(readFileSync(tokensFile, "utf8"), tokensFile).find((e) => e.role === role)?.token;
  } catch {
    return undefined; // no file (or not a tokens file): no token to show
  }
}

/** The nats-server include file holding the lab's users (rewritten as nodes come and go). */
const AUTHORIZATION_FILE = "authorization.conf";

export function writeLabAuthorization(dir: string, nodes: string[], services: string[]): void {
  mkdirSync(join(dir, "nats"), { recursive: true });
  writeFileSync(join(dir, "nats", AUTHORIZATION_FILE), authorizationConfig(labBrokerSpec(nodes, services)));
}

function writeLabServerConfig(dir: string, broker: string, security: Record<string, unknown>, name: string, cfg: Record<string, unknown>): string {
  const file = join(dir, "config", `${name}.yaml`);
  mkdirSync(join(dir, "config"), { recursive: true });
  writeFileSync(file, toYaml({ collectives: [LAB_COLLECTIVE], brokers: [broker], registration: { interval: 30, splay: true }, log: { level: "info" }, security, ...cfg }));
  return file;
}

/** What starting a waiting node needs: the same for `lab up` and for nodes added later. */
export interface LabNodeContext {
  dir: string;
  broker: string;
  caCert: string;
  /** The lab CA's key: each node's bootstrap credential is issued as it boots. */
  caKey: string;
  security: Record<string, unknown>;
  env: Record<string, string>;
  detached: boolean;
  bin?: string;
}

/** Write one waiting node's directory, facts and server config, and start its muster server. */
export function startLabNode(c: LabNodeContext, identity: string, r: LabRegion, serial: number): { node: LabNode; proc: MusterProcess } {
  // one credential per node, as cloud-init would write it: it reaches this node's subject only
  const bootstrap = writeBootstrapCredential(issueBootstrapCredential({ cert: c.caCert, key: c.caKey }, identity), join(resolve(c.dir), "nodes", identity, "bootstrap"));
  const spec = labNodeSpec(c.dir, serial - 1, bootstrap, { identity, region: r });
  for (const [file, text] of Object.entries(spec.files)) {
    mkdirSync(join(file, ".."), { recursive: true });
    writeFileSync(file, text);
  }
  const config = writeLabServerConfig(c.dir, c.broker, c.security, identity, spec.server);
  const proc = spawnMuster(["server", "--config", config], { logFile: join(c.dir, "logs", `${identity}.log`), detached: c.detached, env: c.env, bin: c.bin });
  return { node: { identity, country: r.country, region: r.region, ipaddress: spec.ipaddress, dir: spec.dir, pid: proc.pid, role: spec.role }, proc };
}

export async function startLab(o: LabOptions): Promise<Lab> {
  const dir = resolve(o.dir);
  const say = o.progress ?? (() => undefined);
  mkdirSync(join(dir, "logs"), { recursive: true });
  const procs: MusterProcess[] = [];
  const masters: PuppetserverHandle[] = [];
  let natsStop: (() => Promise<void>) | undefined;
  const machineProcs: MusterProcess[] = [];
  let machinesState: LabMachinesState | undefined;
  // Until the state file is written, this is how `lab down` finds what an interrupted `lab up` started.
  const remember = (p: MusterProcess) => rememberPid(dir, p.pid);
  const keep = (p: MusterProcess) => (procs.push(p), remember(p));
  const stopAll = async () => {
    // machines first: each supervisor powers its machine off cleanly (they need nothing else)
    await Promise.all(machineProcs.map((p) => p.stop("SIGTERM", 60_000).catch(() => undefined)));
    // a supervisor that did not finish in time was killed: its machine is cut and unmounted here
    if (o.machines) await (await import("./machines/fleet.js")).clearMachineRemains(dir).catch(() => undefined);
    await Promise.all(procs.map((p) => p.stop().catch(() => undefined)));
    if (machinesState) await (await import("./machines/fleet.js")).teardownMachines(machinesState, []).catch(() => undefined);
    await Promise.all(masters.map((m) => m.stop().catch(() => undefined)));
    await natsStop?.().catch(() => undefined);
  };
  try {
    // TLS everywhere, every connection a user with its own permissions (docs/security.md).
    const mach = o.machines ? await import("./machines/fleet.js") : undefined;
    const plan = o.machines ? await import("./machines/plan.js") : undefined;
    if (o.machines) mach!.checkMachineHost(o.machines.kind); // before anything starts: root, tools, overlayfs
    const pki = labPki(dir, plan ? [plan.RELAY_ADDRESS] : []);
    const prov = provisionerKey(dir);
    const bundle = join(dir, "pki", "clients-ca.pem");
    // Client certificates come from the lab CA now and from the masters' Puppet CAs once they are
    // up (a provisioned node connects with its Puppet certificate): the bundle grows, then a reload.
    writeFileSync(bundle, readFileSync(pki.ca.cert));
    const nodeIds = Array.from({ length: o.nodes }, (_, i) => nodeIdentity(i, LAB_REGIONS[i % LAB_REGIONS.length]!));
    const serviceNodes = [LAB_NOTIFIER, ...LAB_REGIONS.map((r) => `puppet-${r.name}.lab`)];
    const monitorPort = await freePort("127.0.0.1");
    // Users live in their own file, so `lab add`/`lab remove` can rewrite them and reload.
    writeLabAuthorization(dir, nodeIds, serviceNodes);
    const natsConfig = `http: "127.0.0.1:${monitorPort}"\ninclude "${AUTHORIZATION_FILE}"\n`;
    say("starting nats-server (JetStream, TLS, a user per node) on 127.0.0.1");
    const natsOptions = { dir: join(dir, "nats"), detached: o.detached, tls: { ...pki.nats, ca: bundle, clients: "map" as const }, config: natsConfig };
    let nats = await startNats(natsOptions);
    natsStop = nats.stop;
    const tlsState = { ca: pki.ca.cert, admin: pki.admin, provisioner: pki.provisioner };
    // Processes that are not muster servers (the receiver) and commands acting as the operator.
    const env = { MUSTER_BROKER: nats.url, MUSTER_TLS_CA: pki.ca.cert, MUSTER_TLS_CERT: pki.admin.cert!, MUSTER_TLS_KEY: pki.admin.key! };
    const nodeTls = (identity: string) => ({ ca: pki.ca.cert, ...issueCert(pki.ca, { name: identity, subject: `/O=muster/OU=node/CN=${identity}`, usage: "client" }) });
    // Every server trusts the provisioner's key and the operator's own (trust_local_user).
    const security = { trusted_keys: [{ name: LAB_PROVISIONER_CALLER, key: prov.key.publicKey }], trust_local_user: true };

    say(`starting 2 puppetservers (${LAB_REGIONS.map((r) => `${r.name} on ${r.host}`).join(", ")}); this takes 30-90 s`);
    // Ports picked now, so the machines' relays to the masters exist before the JVMs answer.
    const masterPorts = await Promise.all(LAB_REGIONS.map((r) => freePort(r.host)));
    const mastersP = Promise.all(
      LAB_REGIONS.map((r, i) =>
        startPuppetserver({ host: r.host, port: masterPorts[i], dir: join(dir, "masters", r.name), certname: `puppet-${r.name}.lab`, environments: labEnvironments(), detached: o.detached, altIps: plan ? [plan.masterRelayAddress(i)] : [] }),
      ),
    );
    // Machines: the image (cached after the first build) and the package, while the JVMs warm up.
    const imageP = o.machines ? mach!.labImage(o.machines.kind, o.machines.imageCache ?? resolve(".muster", "images"), say) : undefined;
    imageP?.catch(() => undefined); // awaited below; not an unhandled rejection meanwhile

    // Nodes, notifier and receiver start while the JVMs warm up.
    const receiverPort = await freePort("127.0.0.1");
    const receiver = { url: `http://127.0.0.1:${receiverPort}/`, file: join(dir, "notifications.jsonl"), pid: 0 };
    const rp = spawnMuster(["lab", "receiver", "--file", receiver.file, "--port", String(receiverPort)], { logFile: join(dir, "logs", "receiver.log"), detached: o.detached, env, bin: o.bin });
    keep(rp);
    receiver.pid = rp.pid;

    const serverConfig = (name: string, cfg: Record<string, unknown>) => writeLabServerConfig(dir, nats.url, security, name, cfg);
    const servers = new Map<string, MusterProcess>();
    const track = (name: string, p: MusterProcess) => {
      keep(p);
      servers.set(name, p);
    };
    // A machine's supervisor stops before everything else (it shuts the machine down); its relays with the rest.
    const trackMachine = (name: string, p: MusterProcess) => (/^(relay|package)/.test(name) ? keep(p) : (machineProcs.push(p), remember(p), servers.set(name, p)));
    const launch = (name: string) => {
      const p = spawnMuster(["server", "--config", join(dir, "config", `${name}.yaml`)], { logFile: join(dir, "logs", `${name}.log`), detached: o.detached, env, bin: o.bin });
      track(name, p);
      return p.pid;
    };
    const startServer = (name: string, cfg: Record<string, unknown>) => {
      serverConfig(name, cfg);
      return launch(name);
    };

    // The registry: before the nodes, so none of their registrations is missed (a registry
    // started later asks them to register at once anyway). Masters' search_nodes reads it.
    const registryPort = await freePort("127.0.0.1");
    const registry: LabRegistry = { pid: 0, url: `http://127.0.0.1:${registryPort}`, token_file: registryToken(dir), config: join(dir, "config", "registry.yaml"), log: join(dir, "logs", "registry.log") };
    mkdirSync(join(dir, "config"), { recursive: true });
    writeFileSync(
      registry.config,
      toYaml({ brokers: [nats.url], tls: pki.registry, collectives: [LAB_COLLECTIVE], max_age: 300, http: { host: "127.0.0.1", port: registryPort, token_file: registry.token_file }, log: { level: "info", file: registry.log } }),
    );
    const regProc = spawnMuster(["registry", "serve", "--config", registry.config], { logFile: join(dir, "logs", "registry.stdout.log"), detached: o.detached, env, bin: o.bin });
    keep(regProc);
    registry.pid = regProc.pid;
    say(`registry on ${registry.url} (bearer token in ${registry.token_file})`);

    // The web console: follows the state bucket and asks the registry; it connects to the broker
    // in the background, so it can start before either answers. Signs as the invoking user.
    const webPort = await freePort("127.0.0.1");
    const web: LabWeb = { pid: 0, url: `http://127.0.0.1:${webPort}/`, tokens_file: webTokens(dir), config: join(dir, "config", "web.yaml"), log: join(dir, "logs", "web.log") };
    writeFileSync(
      web.config,
      toYaml({ listen: `127.0.0.1:${webPort}`, auth: { tokens_file: web.tokens_file }, registry: { url: registry.url, token_file: registry.token_file }, collective: LAB_COLLECTIVE, broker: nats.url, audit: { file: join(dir, "logs", "web-audit.jsonl") } }),
    );
    const webProc = spawnMuster(["web", "--config", web.config], { logFile: web.log, detached: o.detached, env, bin: o.bin });
    keep(webProc);
    web.pid = webProc.pid;
    say(`web console on ${web.url} (log in with a token from ${web.tokens_file})`);

    const nodeCtx: LabNodeContext = { dir, broker: nats.url, caCert: pki.ca.cert, caKey: pki.ca.key, security, env, detached: o.detached, bin: o.bin };
    const nodes: LabNode[] = [];
    if (o.machines) {
      // Whole machines: their network and relays, the package, then power on, as a cloud would.
      const image = await imageP!;
      machinesState = await mach!.prepareMachines(
        { labDir: dir, kind: o.machines.kind, deb: o.machines.deb, natsPort: nats.port, masters: LAB_REGIONS.map((r, i) => ({ host: r.host, port: masterPorts[i]! })), detached: o.detached, track: trackMachine, progress: say },
        image,
      );
      const boot = mach!.machineBootContext(dir, machinesState, pki.ca, prov.key.publicKey, o.detached, trackMachine);
      say(`powering on ${o.nodes} ${o.machines.kind === "vm" ? "QEMU" : "systemd-nspawn"} machine(s) from image ${machinesState.imageKey}; cloud-init installs ${machinesState.packages.deb} on each`);
      for (let i = 0; i < o.nodes; i++) {
        const region = LAB_REGIONS[i % LAB_REGIONS.length]!;
        nodes.push((await mach!.bootLabMachine(boot, { identity: nodeIds[i]!, region, serial: i + 1, role: labRole(i) })).node);
      }
      mach!.writeSshConfig(machinesState, nodes);
    } else {
      for (let i = 0; i < o.nodes; i++) {
        const started = startLabNode(nodeCtx, nodeIds[i]!, LAB_REGIONS[i % LAB_REGIONS.length]!, i + 1);
        track(started.node.identity, started.proc);
        nodes.push(started.node);
      }
    }
    const notifier = { identity: "notifier.lab", pid: startServer("notifier.lab", { identity: "notifier.lab", tls: nodeTls("notifier.lab"), facts: { facter: false, extra: { role: "notifier" } }, agents: { builtin: ["notify"] }, plugins: { notify: { recipients: [receiver.url] } } }) };

    // Nodes announce themselves in the provisioning collective as they come up, while the JVMs
    // still start: a machine's power-on to waiting is timed as it happens, not when masters are up.
    if (o.machines) say(`waiting for the machines: boot, cloud-init, the package installed, muster-server waiting to be provisioned`);
    // A machine boots, runs cloud-init and installs the package first; under QEMU's emulation, minutes.
    const nodesWithin = !o.machines ? 120_000 : o.machines.kind === "vm" ? 900_000 : 300_000;
    const early = { broker: nats.url, collective: LAB_COLLECTIVE, provisioningCollective: LAB_PROVISIONING_COLLECTIVE, tls: tlsState, provisionerEnv: prov.env, ...(machinesState ? { machines: machinesState } : {}) } as LabState;
    const nodesUp = waitForNodes(
      early,
      nodes.map((n) => n.identity),
      nodesWithin,
      "provisioning",
      o.machines ? (id) => say(mach!.machineWaiting(nodes.find((n) => n.identity === id)!)) : undefined,
      o.machines ? () => poweredOff(nodes, servers) : undefined,
    );
    nodesUp.catch(() => undefined); // awaited below; not an unhandled rejection meanwhile

    const handles = await mastersP;
    masters.push(...handles);
    for (const h of handles) writeSearchNodesConfig(h.confdir, registry);
    say(`puppetservers ready: ${handles.map((h) => `${h.url} (${(h.startMs / 1000).toFixed(0)} s)`).join(", ")}`);
    writeFileSync(bundle, [pki.ca.cert, ...handles.map((h) => h.caCertPath)].map((f) => readFileSync(f, "utf8").trim()).join("\n") + "\n");
    nats.reload();
    const labMasters: LabMaster[] = handles.map((h, i) => {
      const r = LAB_REGIONS[i]!;
      const identity = `puppet-${r.name}.lab`;
      const serverPid = startServer(identity, {
        identity,
        tls: nodeTls(identity),
        // ipaddress: where nodes reach the master (the relay on the lab network, for machines)
        facts: { facter: false, extra: { country: r.country, ec2_placement_region: r.region, ipaddress: plan ? plan.masterRelayAddress(i) : r.host, puppetserver_port: h.port, role: "puppetmaster" } },
        agents: { builtin: ["puppetca"] },
        plugins: { puppetca: puppetcaPluginConfig(h) },
      });
      return { identity, region: r, host: h.host, port: h.port, dir: h.dir, pid: h.pid, serverPid };
    });

    const state: LabState = {
      version: 1,
      dir,
      collective: LAB_COLLECTIVE,
      provisioningCollective: LAB_PROVISIONING_COLLECTIVE,
      broker: nats.url,
      natsPid: nats.pid,
      masters: labMasters,
      nodes,
      notifier,
      receiver,
      registry,
      web,
      startedAt: Date.now(),
      tls: tlsState,
      provisionerEnv: prov.env,
      monitor: `http://127.0.0.1:${monitorPort}`,
      services: serviceNodes,
      nodeSerial: o.nodes,
      nodeSecurity: security,
      ...(o.bin ? { bin: o.bin } : {}),
      ...(machinesState ? { machines: machinesState } : {}),
    };
    writeFileSync(stateFile(dir), JSON.stringify(state, null, 2));

    const want = [...labMasters.map((m) => m.identity), notifier.identity];
    say(`waiting for ${want.length + nodes.length} muster servers to answer (${nodes.length} in the provisioning collective)`);
    await Promise.all([
      waitForNodes(state, want, 60_000),
      nodesUp,
      waitForRegistry(registry, 60_000),
      waitForWeb(web, 60_000),
    ]);
    writeFileSync(stateFile(dir), JSON.stringify(state, null, 2)); // with when each machine began waiting

    const metricsPort = await freePort("127.0.0.1");
    const writeProvisionerConfig = (overrides: Record<string, unknown> = {}) => {
      const file = join(dir, "config", "provisioner.yaml");
      writeFileSync(file, toYaml(labProvisionerConfig(dir, nats.url, receiver.url, metricsPort, { tls: tlsState.provisioner, ...overrides })));
      return file;
    };
    if (o.provisioner) {
      const file = writeProvisionerConfig(o.provisionerConfig);
      const cfgMetrics = metricsPort;
      const p = spawnMuster(["provisioner", "--config", file, "--foreground"], { logFile: join(dir, "logs", "provisioner.stdout.log"), detached: o.detached, env: { ...env, ...prov.env }, bin: o.bin });
      keep(p);
      state.provisioner = { pid: p.pid, config: file, metrics: `http://127.0.0.1:${cfgMetrics}/metrics`, log: join(dir, "logs", "provisioner.log") };
      writeFileSync(stateFile(dir), JSON.stringify(state, null, 2));
      say(`provisioner started (metrics on ${state.provisioner.metrics})`);
    }
    return {
      state,
      masters: handles,
      provisionerConfig: writeProvisionerConfig,
      async stopBroker() {
        await nats.stop();
      },
      async startBroker() {
        nats = await startNats({ ...natsOptions, port: nats.port });
        natsStop = nats.stop;
        state.natsPid = nats.pid;
        writeFileSync(stateFile(dir), JSON.stringify(state, null, 2));
      },
      async stopServer(identity, signal) {
        const p = servers.get(identity);
        if (!p) throw new Error(`no lab server ${identity}`);
        // a machine: SIGTERM powers it off cleanly, SIGKILL cuts its power
        const m = state.nodes.find((n) => n.identity === identity)?.machine;
        if (m) await (await import("./machines/fleet.js")).powerOffMachine(m.dir, p.pid, { cut: signal === "SIGKILL" });
        await p.stop(signal, m ? 60_000 : undefined);
        servers.delete(identity);
      },
      startServer(identity) {
        if (servers.has(identity)) throw new Error(`lab server ${identity} is already running`);
        const n = state.nodes.find((x) => x.identity === identity);
        if (n?.machine) {
          // power on again, same disk: the supervisor is a lab process like the rest
          const p = spawnMuster(["lab", "machine-run", n.machine.dir], { logFile: join(n.machine.dir, "supervisor.log"), detached: o.detached });
          machineProcs.push(p);
          remember(p);
          servers.set(identity, p);
          n.pid = p.pid;
          writeFileSync(stateFile(dir), JSON.stringify(state, null, 2));
          return;
        }
        launch(identity);
      },
      addNodes: (a) => addLabNodes(state, { ...a, detached: o.detached, track: state.machines ? trackMachine : track }),
      async removeNode(identity) {
        return removeLabNode(state, identity, async (n) => {
          const p = servers.get(n.identity);
          servers.delete(n.identity);
          if (n.machine) await (await import("./machines/fleet.js")).powerOffMachine(n.machine.dir, n.pid, { cut: true });
          if (p) await p.stop("SIGKILL");
          else await stopPid(n.pid);
        });
      },
      async stop() {
        await stopAll();
        rmSync(stateFile(dir), { force: true });
      },
    };
  } catch (e) {
    await stopAll();
    throw e;
  }
}

export function labProvisionerConfig(dir: string, broker: string, receiverUrl: string, metricsPort: number, overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    logfile: join(dir, "logs", "provisioner.log"),
    loglevel: "info",
    daemonize: false,
    sleeptime: 2,
    steps: { lock: true, set_puppet_hostname: true, clean_node_certname: true, send_node_csr: true, sign_node_csr: true, puppet_bootstrap_stage: true, puppet_final_run: true, puppet_daemonize: false, notify: true },
    master: { criteria: ["ec2_placement_region", "country"], filter: "", agent: "puppetca", ipaddress_fact: "ipaddress" },
    target: { collective: LAB_PROVISIONING_COLLECTIVE, filter: "provision().disabled=false and provision().locked=false", agent: "provision", ipaddress_fact: "ipaddress" },
    notify: { filter: "", agent: "notify", targets: [receiverUrl] },
    id: "lab-provisioner",
    broker,
    concurrency: 4,
    per_master_limit: 2,
    retries: { attempts: 3, backoff: 1, max_backoff: 10 },
    lock_lease: 300,
    metrics: { host: "127.0.0.1", port: metricsPort },
    ...overrides,
  };
}

/**
 * Resolves when every identity answers discovery (in the fleet, or as the provisioner in the
 * provisioning collective); rejects with the missing ones at the deadline.
 */
export async function waitForNodes(s: LabState, identities: string[], timeoutMs: number, where: "fleet" | "provisioning" = "fleet", onFound?: (identity: string) => void, failed?: () => string | undefined): Promise<void> {
  const client = where === "provisioning" ? await labProvisionerClient(s, "muster-lab-wait") : await MusterClient.connect({ brokers: [s.broker], collective: s.collective, name: "muster-lab-wait", tls: s.tls.admin });
  const deadline = Date.now() + timeoutMs;
  const seen = new Set<string>();
  try {
    for (;;) {
      const found = new Set(await client.discover({ timeoutMs: 2000, idleMs: 300 }));
      const missing = identities.filter((i) => !found.has(i));
      for (const id of identities) if (found.has(id) && !seen.has(id)) (seen.add(id), onFound?.(id));
      if (missing.length === 0) return;
      const why = failed?.(); // a machine that powered off will not answer: say so now, not at the deadline
      if (why) throw new MusterError("MUSTER_USAGE", why);
      if (Date.now() > deadline) {
        const where = s.machines ? "their consoles under machines/<identity>/console.log, and `muster lab exec <identity> -- journalctl -u cloud-final -u muster-server`" : "their logs under logs/";
        throw new MusterError("MUSTER_TIMEOUT", `lab nodes did not come up: ${missing.join(", ")} (see ${where})`);
      }
    }
  } finally {
    await client.close();
  }
}

/** Resolves once the console answers an authenticated request; rejects at the deadline pointing at its log. */
export async function waitForWeb(w: LabWeb, timeoutMs: number): Promise<void> {
  const token = labWebToken(w.tokens_file, "viewer");
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const res = await fetch(new URL("api/session", w.url), { signal: AbortSignal.timeout(2000), headers: { authorization: `Bearer ${token}` } });
      if (res.ok) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new MusterError("MUSTER_TIMEOUT", `the lab web console did not answer on ${w.url} within ${timeoutMs / 1000} s (see ${w.log})`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Resolves once the lab registry answers over HTTP; rejects at the deadline pointing at its log. */
export async function waitForRegistry(r: LabRegistry, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const res = await fetch(`${r.url}/healthz`, { signal: AbortSignal.timeout(2000) });
      if (res.ok) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new MusterError("MUSTER_TIMEOUT", `the lab registry did not answer on ${r.url} within ${timeoutMs / 1000} s (see ${r.log})`);
    await new Promise((res) => setTimeout(res, 250)); // polling an HTTP port: no event to wait on
  }
}

/** Machines whose supervisor exited before they answered (a boot that failed): what to tell the operator. */
function poweredOff(nodes: LabNode[], servers: Map<string, MusterProcess>): string | undefined {
  const off = nodes.filter((n) => n.machine && servers.get(n.identity)?.exitCode() !== undefined);
  if (!off.length) return undefined;
  return `machine(s) powered off before they answered: ${off.map((n) => `${n.identity} (see ${join(n.machine!.dir, "supervisor.log")} and console.log)`).join(", ")}`;
}

const pidsFile = (dir: string) => join(dir, "pids.jsonl");

/** Note a process the lab started, with its command line (so a pid taken since by another process is not killed). */
function rememberPid(dir: string, pid: number): void {
  if (pid > 0) appendFileSync(pidsFile(dir), `${JSON.stringify({ pid, cmd: cmdlineOf(pid) })}\n`);
}

/**
 * Stop what a lab started that its state file does not name: an interrupted `lab up` (before
 * it wrote the state), or a lab that died. Every process it remembered and that still runs the
 * same command, its machines (off, unmounted), its network, nats-server and the puppetservers.
 */
export async function stopLabRemains(dir: string): Promise<string[]> {
  const stopped: string[] = [];
  const { clearMachineRemains } = await import("./machines/fleet.js");
  stopped.push(...(await clearMachineRemains(dir)));
  let remembered: { pid: number; cmd: string }[] = [];
  try {
    remembered = readFileSync(pidsFile(dir), "utf8")
      .split("\n")
      .flatMap((l) => {
        try {
          return [JSON.parse(l) as { pid: number; cmd: string }];
        } catch {
          return []; // a line cut short when lab up was killed mid-write
        }
      });
  } catch {
    // none remembered
  }
  await Promise.all(
    remembered.map(async ({ pid, cmd }) => {
      if (!cmd || cmdlineOf(pid) !== cmd) return; // gone, or the pid is another process's now
      await stopPid(pid, 10_000, { group: true });
      stopped.push(`pid ${pid} (${cmd.split(" ").slice(0, 4).join(" ")})`);
    }),
  );
  for (const r of LAB_REGIONS) if (await stopDetachedPuppetserver(join(dir, "masters", r.name))) stopped.push(`puppetserver ${r.name}`);
  try {
    const nats = Number(readFileSync(join(dir, "nats", "nats.pid"), "utf8").trim());
    if (cmdlineOf(nats).includes("nats-server")) {
      await stopPid(nats);
      stopped.push("nats-server");
    }
  } catch {
    // no broker was started
  }
  return stopped;
}

/** Stop everything a detached lab started, from its state file. */
export async function stopLabFromState(dir: string): Promise<string[]> {
  const s = readLabState(dir);
  if (!s) return [];
  const stopped: string[] = [];
  if (s.provisioner && isAlive(s.provisioner.pid)) {
    await stopPid(s.provisioner.pid, 40_000);
    stopped.push("provisioner");
  }
  if (s.machines) {
    // machines first, each shut down cleanly (a cut after a minute), then their network
    const { powerOffMachine, teardownMachines } = await import("./machines/fleet.js");
    const { machineLeader, machineSupervisor } = await import("./machines/machine.js");
    await Promise.all(
      s.nodes.filter((n) => n.machine).map(async (n) => {
        // a machine whose supervisor was killed still runs: it is cut
        if (!machineSupervisor(n.machine!.dir) && !machineLeader(n.machine!.dir)) return;
        await powerOffMachine(n.machine!.dir, n.pid);
        stopped.push(`machine ${n.identity}`);
      }),
    );
    if ((await teardownMachines(s.machines, s.nodes)).length) stopped.push("relays", "package server");
  }
  const servers = labPids(s).filter((p) => p.name.startsWith("muster server") || p.name === "webhook receiver" || p.name.startsWith("registry ") || p.name.startsWith("web console "));
  await Promise.all(servers.map(async (p) => isAlive(p.pid) && (await stopPid(p.pid), stopped.push(p.name))));
  await Promise.all(s.masters.map(async (m) => (await stopDetachedPuppetserver(m.dir)) && stopped.push(`puppetserver ${m.identity}`)));
  if (isAlive(s.natsPid)) {
    await stopPid(s.natsPid);
    stopped.push("nats-server");
  }
  return stopped;
}
