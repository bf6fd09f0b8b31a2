import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import type { TlsSettings } from "../broker/connect.js";
import { registryToken, webTokens } from "./credentials.js";
import { LAB_COLLECTIVE, LAB_PROVISIONING_COLLECTIVE } from "./names.js";
import { freePort } from "./ports.js";
import { spawnMuster, type MusterProcess } from "./processes.js";
import type { PuppetserverHandle } from "./puppetserver.js";
import type { LabRegion } from "./regions.js";
import type { LabRegistry, LabState, LabWeb } from "./state.js";

// The lab's services besides the broker, the masters and the nodes: the webhook receiver the
// notifier posts to, the registry (HTTP with a bearer token, queried by the masters' search_nodes),
// the web console, and the configs of the lab's own muster servers (the notifier, the masters'
// puppetca servers) and of the provisioner. Each runs from the checkout, or from `bin`.

/** How the lab starts one of its processes: where it lives, as whom, from which muster. */
export interface ServiceContext {
  dir: string;
  broker: string;
  /** The operator's environment (operatorEnv). */
  env: Record<string, string>;
  detached: boolean;
  bin?: string;
}

const spawnService = (c: ServiceContext, args: string[], logFile: string, env = c.env): MusterProcess => spawnMuster(args, { logFile, detached: c.detached, env, bin: c.bin });

/** The webhook receiver (`muster lab receiver`): what the notifier posts lands in <lab>/notifications.jsonl. */
export async function startReceiver(c: ServiceContext): Promise<{ receiver: LabState["receiver"]; proc: MusterProcess }> {
  const port = await freePort("127.0.0.1");
  const file = join(c.dir, "notifications.jsonl");
  const proc = spawnService(c, ["lab", "receiver", "--file", file, "--port", String(port)], join(c.dir, "logs", "receiver.log"));
  return { receiver: { url: `http://127.0.0.1:${port}/`, file, pid: proc.pid }, proc };
}

/** The registry: registrations in over the broker, queries over HTTP with the lab's bearer token. */
export async function startRegistry(c: ServiceContext, tls: TlsSettings): Promise<{ registry: LabRegistry; proc: MusterProcess }> {
  const port = await freePort("127.0.0.1");
  const registry: LabRegistry = { pid: 0, url: `http://127.0.0.1:${port}`, token_file: registryToken(c.dir), config: join(c.dir, "config", "registry.yaml"), log: join(c.dir, "logs", "registry.log") };
  mkdirSync(join(c.dir, "config"), { recursive: true });
  writeFileSync(registry.config, toYaml({ brokers: [c.broker], tls, collectives: [LAB_COLLECTIVE], max_age: 300, http: { host: "127.0.0.1", port, token_file: registry.token_file }, log: { level: "info", file: registry.log } }));
  const proc = spawnService(c, ["registry", "serve", "--config", registry.config], join(c.dir, "logs", "registry.stdout.log"));
  registry.pid = proc.pid;
  return { registry, proc };
}

/**
 * The web console: follows the state bucket and asks the registry; it connects to the broker in
 * the background, so it can start before either answers. Signs as the invoking user.
 */
export async function startWeb(c: ServiceContext, registry: LabRegistry): Promise<{ web: LabWeb; proc: MusterProcess }> {
  const port = await freePort("127.0.0.1");
  const web: LabWeb = { pid: 0, url: `http://127.0.0.1:${port}/`, tokens_file: webTokens(c.dir), config: join(c.dir, "config", "web.yaml"), log: join(c.dir, "logs", "web.log") };
  writeFileSync(web.config, toYaml({ listen: `127.0.0.1:${port}`, auth: { tokens_file: web.tokens_file }, registry: { url: registry.url, token_file: registry.token_file }, collective: LAB_COLLECTIVE, broker: c.broker, audit: { file: join(c.dir, "logs", "web-audit.jsonl") } }));
  const proc = spawnService(c, ["web", "--config", web.config], web.log);
  web.pid = proc.pid;
  return { web, proc };
}

/** The notifier's server config: the notify agent, posting to the receiver. */
export function notifierConfig(identity: string, tls: TlsSettings, receiverUrl: string): Record<string, unknown> {
  return { identity, tls, facts: { facter: false, extra: { role: "notifier" } }, agents: { builtin: ["notify"] }, plugins: { notify: { recipients: [receiverUrl] } } };
}

/** A master's muster server (the puppetca agent): `ipaddress` is where nodes reach the master. */
export function masterServerConfig(identity: string, tls: TlsSettings, r: LabRegion, ipaddress: string, h: PuppetserverHandle): Record<string, unknown> {
  return {
    identity,
    tls,
    facts: { facter: false, extra: { country: r.country, ec2_placement_region: r.region, ipaddress, puppetserver_port: h.port, role: "puppetmaster" } },
    agents: { builtin: ["puppetca"] },
    plugins: { puppetca: puppetcaPluginConfig(h) },
  };
}

export function puppetcaPluginConfig(m: PuppetserverHandle): Record<string, unknown> {
  return { confdir: m.confdir, ssldir: m.ssldir, certname: m.certname, url: m.url, cacert: m.caCertPath, cert: m.hostCertPath, key: m.hostKeyPath };
}

/** What the masters' search_nodes reads (<confdir>/muster.yaml; puppet/modules/muster/README.md). */
export function writeSearchNodesConfig(masterConfdir: string, r: { url: string; token_file: string }): string {
  const file = join(masterConfdir, "muster.yaml");
  writeFileSync(file, toYaml({ registry_url: r.url, token_file: r.token_file, timeout: 10 }));
  return file;
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

/** Write the provisioner's config for this lab (<lab>/config/provisioner.yaml): the lab's, with `overrides`. */
export function writeProvisionerConfig(c: { dir: string; broker: string; receiverUrl: string; metricsPort: number; tls: TlsSettings }, overrides: Record<string, unknown> = {}): string {
  const file = join(c.dir, "config", "provisioner.yaml");
  writeFileSync(file, toYaml(labProvisionerConfig(c.dir, c.broker, c.receiverUrl, c.metricsPort, { tls: c.tls, ...overrides })));
  return file;
}

/** The provisioner, signing with the lab's provisioner key (`provisionerEnv`). */
export function startProvisioner(c: ServiceContext, config: string, provisionerEnv: Record<string, string>, metricsPort: number): { provisioner: NonNullable<LabState["provisioner"]>; proc: MusterProcess } {
  const proc = spawnService(c, ["provisioner", "--config", config, "--foreground"], join(c.dir, "logs", "provisioner.stdout.log"), { ...c.env, ...provisionerEnv });
  return { provisioner: { pid: proc.pid, config, metrics: `http://127.0.0.1:${metricsPort}/metrics`, log: join(c.dir, "logs", "provisioner.log") }, proc };
}
