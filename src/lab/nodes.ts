import { mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { stringify as toYaml } from "yaml";
import { issueBootstrapCredential, writeBootstrapCredential } from "../broker/bootstrap.js";
import { nodeServerConfig } from "../config/node.js";
import { operatorEnv } from "./broker.js";
import { provisionerKey } from "./credentials.js";
import { LAB_COLLECTIVE, LAB_PROVISIONER_CALLER, LAB_PROVISIONING_COLLECTIVE, nodeIdentity } from "./names.js";
import { labNrpeConfig } from "./nrpe.js";
import { spawnMuster, type MusterProcess } from "./processes.js";
import { LAB_REGIONS, type LabRegion } from "./regions.js";
import { labRole, ROLE_FACT_NAMES, roleFacts, type LabRole } from "./roles.js";
import type { LabNode, LabState } from "./state.js";

// The lab's process nodes: `muster server` processes on this host, each waiting to be provisioned
// with its own bootstrap credential, everything Puppet touches under its own directory. A node is
// deterministic by its number, so `lab up` and `lab add` make the same node from the same number.

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
    // muster_lab: the lab's Puppet code writes under muster_node_dir on such a node (lab::paths), never the host's /etc
    export_facts: ["country", "ec2_placement_region", "ipaddress", "muster_node_dir", "muster_lab", ...ROLE_FACT_NAMES],
    bootstrap_environment: "bootstrap",
    production_environment: "production",
    // Several nodes share this machine, so not Facter's system directory: a custom fact on this
    // node's own factpath (<vardir>/facts), which pluginsync leaves alone.
    stage_fact_file: join(p, "var", "facts", "muster_lifecycle_stage.rb"),
  };
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
  /** The node-specific part of its `muster server` config (the lab adds brokers, security, ...). */
  server: Record<string, unknown>;
}

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

/** A lab muster server's config file (<lab>/config/<name>.yaml): the lab's broker and trust, and `cfg`. */
export function writeLabServerConfig(dir: string, broker: string, security: Record<string, unknown>, name: string, cfg: Record<string, unknown>): string {
  const file = join(dir, "config", `${name}.yaml`);
  mkdirSync(join(dir, "config"), { recursive: true });
  writeFileSync(file, toYaml({ collectives: [LAB_COLLECTIVE], brokers: [broker], registration: { interval: 30, splay: true }, log: { level: "info" }, security, ...cfg }));
  return file;
}

/** Start (or start again) the lab's muster server `name` from its config file (writeLabServerConfig's). */
export function launchLabServer(c: { dir: string; env: Record<string, string>; detached: boolean; bin?: string }, name: string): MusterProcess {
  return spawnMuster(["server", "--config", join(c.dir, "config", `${name}.yaml`)], { logFile: join(c.dir, "logs", `${name}.log`), detached: c.detached, env: c.env, bin: c.bin });
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

/** Every server trusts the provisioner's key and the operator's own (trust_local_user). */
export const labNodeSecurity = (provisionerPublicKey: string): Record<string, unknown> => ({ trusted_keys: [{ name: LAB_PROVISIONER_CALLER, key: provisionerPublicKey }], trust_local_user: true });

/** The node context of a running lab, from its state (`lab add`). */
export function labNodeContext(s: LabState, detached: boolean): LabNodeContext {
  return {
    dir: s.dir,
    broker: s.broker,
    caCert: s.tls.ca,
    caKey: join(s.dir, "pki", "ca.key"),
    security: s.nodeSecurity ?? labNodeSecurity(provisionerKey(s.dir).key.publicKey),
    env: operatorEnv(s.broker, s.tls.ca, s.tls.admin),
    detached,
    bin: s.bin,
  };
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
  writeLabServerConfig(c.dir, c.broker, c.security, identity, spec.server);
  const proc = launchLabServer(c, identity);
  return { node: { identity, country: r.country, region: r.region, ipaddress: spec.ipaddress, dir: spec.dir, pid: proc.pid, role: spec.role }, proc };
}
