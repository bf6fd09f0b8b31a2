import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { stringify as toYaml } from "yaml";
import { authorizationConfig, type BrokerAuthSpec } from "../broker/auth.js";
import type { TlsSettings } from "../broker/connect.js";
import { MusterClient } from "../client/client.js";
import { MusterError } from "../errors.js";
import { generateSigningKey, signingKeyFromPem, type SigningKey } from "../protocol/signing.js";
import { ensureCA, issueCert, type CA } from "../security/pki.js";
import { startNats } from "./nats.js";
import { freePort } from "./ports.js";
import { isAlive, spawnMuster, stopPid, type MusterProcess } from "./processes.js";
import { labEnvironments } from "./manifests.js";
import { startPuppetserver, stopDetachedPuppetserver, type PuppetserverHandle } from "./puppetserver.js";

// A whole fleet on loopback: nats-server with JetStream, two real puppetservers in two regions,
// N real `muster server` nodes waiting to be provisioned, two master nodes (puppetca), a notifier
// with a webhook receiver, and (optionally) the provisioner. Used by `muster lab` and by the tests.

export const LAB_COLLECTIVE = "muster";
/** Where nodes wait to be provisioned (provisioning isolation). */
export const LAB_PROVISIONING_COLLECTIVE = "provisioning";
/** The provisioner's caller name: the only one a waiting node answers. */
export const LAB_PROVISIONER_CALLER = "provisioner";

export interface LabRegion {
  name: string;
  country: string;
  region: string;
  host: string;
}

export const LAB_REGIONS: LabRegion[] = [
  { name: "eu", country: "de", region: "eu-central-1", host: "127.0.0.11" },
  { name: "us", country: "us", region: "us-east-1", host: "127.0.0.12" },
];

export interface LabNode {
  identity: string;
  country: string;
  region: string;
  ipaddress: string;
  dir: string;
  pid: number;
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
  provisioner?: { pid: number; config: string; metrics: string; log: string };
  startedAt: number;
  provisioningCollective: string;
  /** The broker's TLS: the lab CA and the credentials of the lab's own users. */
  tls: { ca: string; admin: TlsSettings; provisioner: TlsSettings };
  /** MUSTER_CONFIG_DIR and MUSTER_CALLER for a process that signs as the provisioner. */
  provisionerEnv: Record<string, string>;
  /** nats-server monitoring (connz shows which user each connection mapped to). */
  monitor: string;
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
}

export interface Lab {
  state: LabState;
  masters: PuppetserverHandle[];
  /** Write a provisioner config for this lab (used by `lab up` and tests). */
  provisionerConfig(overrides?: Record<string, unknown>): string;
  /** Stop one muster server (node, master or notifier) of an attached lab (SIGTERM unless told). */
  stopServer(identity: string, signal?: NodeJS.Signals): Promise<void>;
  /** Start it again (a node restart: it publishes a startup lifecycle event). */
  startServer(identity: string): void;
  stop(): Promise<void>;
}

const stateFile = (dir: string) => join(dir, "lab.json");

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
    ...s.nodes.map((n) => ({ name: `muster server ${n.identity}`, pid: n.pid })),
    { name: `muster server ${s.notifier.identity}`, pid: s.notifier.pid },
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

/** The lab's users: services by subject with OU=service (no Puppet certificate can carry one), nodes by their Puppet certname. */
function labBrokerUsers(nodes: string[], servicesNodes: string[]): BrokerAuthSpec {
  return {
    collectives: [LAB_COLLECTIVE],
    provisioning_collective: LAB_PROVISIONING_COLLECTIVE,
    nodes: [...nodes.map((identity) => ({ identity })), ...servicesNodes.map((identity) => ({ identity, users: [labNodeUser(identity)] }))],
    bootstrap: [{ user: serviceUser("bootstrap") }],
    provisioners: [serviceUser("provisioner")],
    admins: [serviceUser("admin")],
  };
}

const serviceUser = (name: string) => `CN=${name},OU=service,O=muster`;
const labNodeUser = (identity: string) => `CN=${identity},OU=node,O=muster`;

/** The provisioner's signing key for the lab (created once), and the environment that makes a muster process use it. */
function provisionerKey(dir: string): { key: SigningKey; env: Record<string, string> } {
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

/** The lab CA, the broker's certificate and the service credentials. */
function labPki(dir: string): { ca: CA; nats: { cert: string; key: string }; admin: TlsSettings; provisioner: TlsSettings; bootstrap: { cert: string; key: string } } {
  const ca = ensureCA(join(dir, "pki"), "/O=muster/CN=muster lab CA");
  const svc = (name: string) => ({ ca: ca.cert, ...issueCert(ca, { name, subject: `/O=muster/OU=service/CN=${name}`, usage: "client" }) });
  return {
    ca,
    nats: issueCert(ca, { name: "nats", subject: "/O=muster/OU=broker/CN=nats.lab", ips: ["127.0.0.1"], dns: ["localhost"], usage: "server" }),
    admin: svc("admin"),
    provisioner: svc("provisioner"),
    bootstrap: svc("bootstrap"),
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
    export_facts: ["country", "ec2_placement_region", "ipaddress", "muster_node_dir"],
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

function nodeIdentity(i: number, r: LabRegion): string {
  return `node${String(i + 1).padStart(2, "0")}.${r.name}.lab`;
}

export async function startLab(o: LabOptions): Promise<Lab> {
  const dir = resolve(o.dir);
  const say = o.progress ?? (() => undefined);
  mkdirSync(join(dir, "logs"), { recursive: true });
  const procs: MusterProcess[] = [];
  const masters: PuppetserverHandle[] = [];
  let natsStop: (() => Promise<void>) | undefined;
  const stopAll = async () => {
    await Promise.all(procs.map((p) => p.stop().catch(() => undefined)));
    await Promise.all(masters.map((m) => m.stop().catch(() => undefined)));
    await natsStop?.().catch(() => undefined);
  };
  try {
    // TLS everywhere, every connection a user with its own permissions (docs/security.md).
    const pki = labPki(dir);
    const prov = provisionerKey(dir);
    const bundle = join(dir, "pki", "clients-ca.pem");
    // Client certificates come from the lab CA now and from the masters' Puppet CAs once they are
    // up (a provisioned node connects with its Puppet certificate): the bundle grows, then a reload.
    writeFileSync(bundle, readFileSync(pki.ca.cert));
    const nodeIds = Array.from({ length: o.nodes }, (_, i) => nodeIdentity(i, LAB_REGIONS[i % LAB_REGIONS.length]!));
    const serviceNodes = ["notifier.lab", ...LAB_REGIONS.map((r) => `puppet-${r.name}.lab`)];
    const monitorPort = await freePort("127.0.0.1");
    const natsConfig = `http: "127.0.0.1:${monitorPort}"\n${authorizationConfig(labBrokerUsers(nodeIds, serviceNodes))}`;
    say("starting nats-server (JetStream, TLS, a user per node) on 127.0.0.1");
    const nats = await startNats({ dir: join(dir, "nats"), detached: o.detached, tls: { ...pki.nats, ca: bundle, clients: "map" }, config: natsConfig });
    natsStop = nats.stop;
    const tlsState = { ca: pki.ca.cert, admin: pki.admin, provisioner: pki.provisioner };
    // Processes that are not muster servers (the receiver) and commands acting as the operator.
    const env = { MUSTER_BROKER: nats.url, MUSTER_TLS_CA: pki.ca.cert, MUSTER_TLS_CERT: pki.admin.cert!, MUSTER_TLS_KEY: pki.admin.key! };
    const nodeTls = (identity: string) => ({ ca: pki.ca.cert, ...issueCert(pki.ca, { name: identity, subject: `/O=muster/OU=node/CN=${identity}`, usage: "client" }) });
    // Every server trusts the provisioner's key and the operator's own (trust_local_user).
    const security = { trusted_keys: [{ name: LAB_PROVISIONER_CALLER, key: prov.key.publicKey }], trust_local_user: true };

    say(`starting 2 puppetservers (${LAB_REGIONS.map((r) => `${r.name} on ${r.host}`).join(", ")}); this takes 30-90 s`);
    const mastersP = Promise.all(
      LAB_REGIONS.map((r) => startPuppetserver({ host: r.host, dir: join(dir, "masters", r.name), certname: `puppet-${r.name}.lab`, environments: labEnvironments(), detached: o.detached })),
    );

    // Nodes, notifier and receiver start while the JVMs warm up.
    const receiverPort = await freePort("127.0.0.1");
    const receiver = { url: `http://127.0.0.1:${receiverPort}/`, file: join(dir, "notifications.jsonl"), pid: 0 };
    const rp = spawnMuster(["lab", "receiver", "--file", receiver.file, "--port", String(receiverPort)], { logFile: join(dir, "logs", "receiver.log"), detached: o.detached, env });
    procs.push(rp);
    receiver.pid = rp.pid;

    const serverConfig = (name: string, cfg: Record<string, unknown>) => {
      const file = join(dir, "config", `${name}.yaml`);
      mkdirSync(join(dir, "config"), { recursive: true });
      writeFileSync(file, toYaml({ collectives: [LAB_COLLECTIVE], brokers: [nats.url], registration: { interval: 60, splay: true }, log: { level: "info" }, security, ...cfg }));
      return file;
    };
    const servers = new Map<string, MusterProcess>();
    const launch = (name: string) => {
      const p = spawnMuster(["server", "--config", join(dir, "config", `${name}.yaml`)], { logFile: join(dir, "logs", `${name}.log`), detached: o.detached, env });
      procs.push(p);
      servers.set(name, p);
      return p.pid;
    };
    const startServer = (name: string, cfg: Record<string, unknown>) => {
      serverConfig(name, cfg);
      return launch(name);
    };

    const nodes: LabNode[] = [];
    for (let i = 0; i < o.nodes; i++) {
      const r = LAB_REGIONS[i % LAB_REGIONS.length]!;
      const identity = nodeIds[i]!;
      const ndir = join(dir, "nodes", identity);
      const plugin = provisionPluginConfig(ndir);
      // The node's facts file; the provision agent exports them to its Puppet runs (export_facts).
      // Not Puppet's facts.d: pluginsync purges files there that the master does not serve.
      mkdirSync(ndir, { recursive: true });
      const ipaddress = `127.0.1.${i + 1}`;
      const factsFile = join(ndir, "facts.yaml");
      writeFileSync(factsFile, toYaml({ country: r.country, ec2_placement_region: r.region, ipaddress, muster_node_dir: ndir, muster_lab: true }));
      // After provisioning, the puppet agent runs the same Puppet (muster puppet runall ...); those
      // runs see lifecycle_stage=production from the stage fact file the provision agent wrote.
      const puppet = { confdir: plugin.confdir, vardir: plugin.vardir, ssldir: plugin.ssldir, rundir: plugin.rundir, logdir: plugin.logdir, export_facts: plugin.export_facts };
      // Waits in the provisioning collective with the shared bootstrap credential; once provisioned
      // it reconnects on its own with its Puppet certificate.
      const pid = startServer(identity, {
        identity,
        facts: { facter: false, file: factsFile, refresh_interval: 30 },
        agents: { builtin: ["provision", "puppet"] },
        plugins: { provision: plugin, puppet },
        tls: { ca: pki.ca.cert, use_puppet_cert: true },
        provisioning: { collective: LAB_PROVISIONING_COLLECTIVE, callers: [LAB_PROVISIONER_CALLER], cert: pki.bootstrap.cert, key: pki.bootstrap.key },
      });
      nodes.push({ identity, country: r.country, region: r.region, ipaddress, dir: ndir, pid });
    }
    const notifier = { identity: "notifier.lab", pid: startServer("notifier.lab", { identity: "notifier.lab", tls: nodeTls("notifier.lab"), facts: { facter: false, extra: { role: "notifier" } }, agents: { builtin: ["notify"] }, plugins: { notify: { recipients: [receiver.url] } } }) };

    const handles = await mastersP;
    masters.push(...handles);
    say(`puppetservers ready: ${handles.map((h) => `${h.url} (${(h.startMs / 1000).toFixed(0)} s)`).join(", ")}`);
    writeFileSync(bundle, [pki.ca.cert, ...handles.map((h) => h.caCertPath)].map((f) => readFileSync(f, "utf8").trim()).join("\n") + "\n");
    nats.reload();
    const labMasters: LabMaster[] = handles.map((h, i) => {
      const r = LAB_REGIONS[i]!;
      const identity = `puppet-${r.name}.lab`;
      const serverPid = startServer(identity, {
        identity,
        tls: nodeTls(identity),
        facts: { facter: false, extra: { country: r.country, ec2_placement_region: r.region, ipaddress: r.host, puppetserver_port: h.port, role: "puppetmaster" } },
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
      startedAt: Date.now(),
      tls: tlsState,
      provisionerEnv: prov.env,
      monitor: `http://127.0.0.1:${monitorPort}`,
    };
    writeFileSync(stateFile(dir), JSON.stringify(state, null, 2));

    const want = [...labMasters.map((m) => m.identity), notifier.identity];
    say(`waiting for ${want.length + nodes.length} muster servers to answer (${nodes.length} in the provisioning collective)`);
    await Promise.all([waitForNodes(state, want, 60_000), waitForNodes(state, nodes.map((n) => n.identity), 60_000, "provisioning")]);

    const metricsPort = await freePort("127.0.0.1");
    const writeProvisionerConfig = (overrides: Record<string, unknown> = {}) => {
      const file = join(dir, "config", "provisioner.yaml");
      writeFileSync(file, toYaml(labProvisionerConfig(dir, nats.url, receiver.url, metricsPort, { tls: tlsState.provisioner, ...overrides })));
      return file;
    };
    if (o.provisioner) {
      const file = writeProvisionerConfig(o.provisionerConfig);
      const cfgMetrics = metricsPort;
      const p = spawnMuster(["provisioner", "--config", file, "--foreground"], { logFile: join(dir, "logs", "provisioner.stdout.log"), detached: o.detached, env: { ...env, ...prov.env } });
      procs.push(p);
      state.provisioner = { pid: p.pid, config: file, metrics: `http://127.0.0.1:${cfgMetrics}/metrics`, log: join(dir, "logs", "provisioner.log") };
      writeFileSync(stateFile(dir), JSON.stringify(state, null, 2));
      say(`provisioner started (metrics on ${state.provisioner.metrics})`);
    }
    return {
      state,
      masters: handles,
      provisionerConfig: writeProvisionerConfig,
      async stopServer(identity, signal) {
        const p = servers.get(identity);
        if (!p) throw new Error(`no lab server ${identity}`);
        await p.stop(signal);
        servers.delete(identity);
      },
      startServer(identity) {
        if (servers.has(identity)) throw new Error(`lab server ${identity} is already running`);
        launch(identity);
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
export async function waitForNodes(s: LabState, identities: string[], timeoutMs: number, where: "fleet" | "provisioning" = "fleet"): Promise<void> {
  const client = where === "provisioning" ? await labProvisionerClient(s, "muster-lab-wait") : await MusterClient.connect({ brokers: [s.broker], collective: s.collective, name: "muster-lab-wait", tls: s.tls.admin });
  const deadline = Date.now() + timeoutMs;
  try {
    for (;;) {
      const found = new Set(await client.discover({ timeoutMs: 2000, idleMs: 300 }));
      const missing = identities.filter((i) => !found.has(i));
      if (missing.length === 0) return;
      if (Date.now() > deadline) throw new MusterError("MUSTER_TIMEOUT", `lab nodes did not come up: ${missing.join(", ")} (see their logs under logs/)`);
    }
  } finally {
    await client.close();
  }
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
  const servers = labPids(s).filter((p) => p.name.startsWith("muster server") || p.name === "webhook receiver");
  await Promise.all(servers.map(async (p) => isAlive(p.pid) && (await stopPid(p.pid), stopped.push(p.name))));
  await Promise.all(s.masters.map(async (m) => (await stopDetachedPuppetserver(m.dir)) && stopped.push(`puppetserver ${m.identity}`)));
  if (isAlive(s.natsPid)) {
    await stopPid(s.natsPid);
    stopped.push("nats-server");
  }
  return stopped;
}
