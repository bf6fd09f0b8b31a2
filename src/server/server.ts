import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";
import type { AgentCatalogue, AgentFactory, NodeAgentsConfig, NodeIntrospection } from "../agent/catalogue.js";
import { X509Certificate } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { bucketsOn } from "../broker/bucket.js";
import { closeConnection, connectBroker, inboxPrefixFor, resolveTls, type TlsSettings } from "../broker/connect.js";
import { streamsOn } from "../broker/stream.js";
import { resolveBrokerSettings } from "../config/client.js";
import { MusterError } from "../errors.js";
import { Auditor } from "../security/audit.js";
import { AgentBuckets } from "./agent-kv.js";
import { configDir, loadOrCreateNodeKey, loadOrCreateSigningKey, readTrustedKeyDir, TrustStore, type TrustedKey } from "../security/keys.js";
import type { NodeOps } from "../agent/node-ops.js";
import type { SigningKey } from "../protocol/signing.js";
import { mergePolicies } from "../config/policy-files.js";
import { compilePolicies, policyWarnings, PolicyEffect, type CompiledPolicies, type Policies } from "../security/policy.js";
import { VERSION } from "../version.js";
import type { Agent, AgentKvOpener } from "../agent/agent.js";
import { mainCollective, type ServerConfig } from "./config.js";
import { agentDataPlugin, factDataPlugin } from "./data-plugins.js";
import { loadExternalAgents } from "./external.js";
import { NodeHost } from "./host.js";
import { RequestIntake } from "./intake.js";
import { ClassesSource, FactSource } from "./metadata.js";
import { NodeRuntime, type AuditEntry, type LoadedAgent } from "./runtime.js";
import { newIntakeStats, type IntakeStats } from "./stats.js";

// `muster server`: one node. Loads facts, classes and the agents it is handed (an AgentCatalogue:
// the command that starts it names them; the server imports no agent), connects (forever, with
// backoff), subscribes and serves until stopped.

export interface RunningServer {
  /** The current phase's runtime, host and connection (a provisioned node replaces all three). */
  readonly runtime: NodeRuntime;
  readonly host: NodeHost;
  readonly nc: NatsConnection;
  readonly phase: NodePhase;
  stop(): Promise<void>;
}

/** Trusted keys: configured ones, a directory, and (default when nothing is configured) the local user's own. */
export function buildTrustStore(sec: ServerConfig["security"]): TrustStore {
  const keys: TrustedKey[] = [...sec.trusted_keys];
  if (sec.trusted_keys_dir) keys.push(...readTrustedKeyDir(sec.trusted_keys_dir));
  const trustLocal = sec.trust_local_user ?? keys.length === 0;
  if (trustLocal) {
    const own = loadOrCreateSigningKey();
    keys.push({ name: own.name, key: own.publicKey });
  }
  return new TrustStore(keys);
}

export interface RuntimeBuild {
  identity: string;
  collectives: string[];
  mainCollective: string;
  facts: () => Record<string, unknown>;
  classes: () => string[];
  /** Agents every node hosts (the catalogue's `always`). */
  always: readonly string[];
  /** Names of further agents to load, from `factories`. */
  builtin?: readonly string[];
  /** Extra agents (external, or built-ins with custom deps). */
  extraAgents?: Agent[];
  plugins: Record<string, Record<string, unknown>>;
  log: Logger;
  intakeStats: IntakeStats;
  audit?: (e: AuditEntry) => void;
  /** Action policies by agent (compiled once; shared by every node of an emulator). */
  policies?: CompiledPolicies;
  /** More process-wide counters for daemon_stats (the audit trail's). */
  extraStats?: () => Record<string, number>;
  /** Where the agents come from, by name (the catalogue's `load`). */
  factories: Record<string, AgentFactory>;
  /** ctx.refreshMetadata for the agents: re-read the node's classes now. */
  refreshMetadata?: () => Promise<void>;
  /** Told when the node's provision agent has marked it provisioned. */
  onProvisioned?: () => void;
  /** KV buckets for the agents (AgentBuckets.opener). */
  kv?: AgentKvOpener;
  /** The node's key: signs its replies and events. */
  nodeKey?: SigningKey;
  /** What needs root: in process, or through the privileged helper (privileged_helper). */
  ops?: NodeOps;
}

/** Builds a NodeRuntime with its agents and data plugins wired to introspect it. */
export function buildRuntime(b: RuntimeBuild): NodeRuntime {
  const factories = b.factories;
  let rt: NodeRuntime | undefined;
  const node: NodeIntrospection = {
    metadata: () => rt!.metadata(),
    stats: () => ({ ...b.intakeStats, ...rt!.stats, ...b.extraStats?.() }),
    agentDDLs: () => rt!.loadedAgents().map((la) => la.agent.ddl),
    dataPluginNames: () => rt!.dataPluginNames(),
    queryData: (p, a) => rt!.queryData(p, a),
    mainCollective: b.mainCollective,
    version: VERSION,
    startedAt: Date.now(),
  };
  const names = [...new Set([...b.always, ...(b.builtin ?? [])])];
  const agents: LoadedAgent[] = [];
  for (const name of names) {
    const f = factories[name];
    if (!f) throw new MusterError("MUSTER_CONFIG_INVALID", `unknown built-in agent '${name}'; known: ${Object.keys(factories).sort().join(", ")}`);
    const config = b.plugins[name] ?? {};
    agents.push({ agent: f({ node, identity: b.identity, config, onProvisioned: b.onProvisioned, kv: b.kv, ...(b.ops ? { ops: b.ops } : {}) }), config, log: b.log.child({ agent: name }) });
  }
  for (const a of b.extraAgents ?? []) agents.push({ agent: a, config: b.plugins[a.ddl.metadata.name] ?? {}, log: b.log.child({ agent: a.ddl.metadata.name }) });
  rt = new NodeRuntime({ identity: b.identity, collectives: b.collectives, mainCollective: b.mainCollective, agents, facts: b.facts, classes: b.classes, log: b.log, intakeStats: b.intakeStats, audit: b.audit, policies: b.policies, refreshMetadata: b.refreshMetadata, nodeKey: b.nodeKey });
  rt.addDataPlugin(factDataPlugin);
  rt.addDataPlugin(agentDataPlugin(() => rt!.loadedAgents().map((la) => la.agent.ddl)));
  return rt;
}

/** Where a node stands: waiting to be provisioned (isolated) or part of the fleet. */
export type NodePhase = "provisioning" | "production";

/**
 * Under provisioning isolation every agent the node hosts answers only the provisioner's callers:
 * a policy per agent, default deny, so a trusted admin key is refused too.
 */
function provisioningPolicies(callers: string[], agents: string[]): Policies {
  const rules = [{ effect: PolicyEffect.Allow, callers, description: "provisioning isolation: the provisioner only" }];
  return Object.fromEntries(agents.map((a) => [a, { default: PolicyEffect.Deny, rules }]));
}

/** What the agents are asked about the node (agents/node.ts). */
function agentsConfig(cfg: ServerConfig): NodeAgentsConfig {
  return { identity: cfg.identity, plugins: cfg.plugins, builtin: cfg.agents.builtin, provisioning: !!cfg.provisioning };
}

/** The node's Puppet certificate and key, from the same settings the provision agent uses. */
async function puppetCredential(cfg: ServerConfig, agents: AgentCatalogue): Promise<{ cert: string; key: string }> {
  const { PuppetAgent } = await import("../puppet/index.js");
  const agent = new PuppetAgent(await agents.nodePuppetOrDefaults(agentsConfig(cfg)));
  return { cert: agent.certPath, key: agent.keyPath };
}

/**
 * Where the node's classes come from: `classes_file` when configured, else the classes file of
 * the node's own Puppet (its `classfile` setting, asked of Puppet with the node's confdir and
 * vardir, and asked again when puppet.conf changes); none for a node without Puppet.
 */
async function classesLocation(cfg: ServerConfig, agents: AgentCatalogue, ops: NodeOps, log: Logger): Promise<Pick<ConstructorParameters<typeof ClassesSource>[0], "locate" | "locationKey" | "locationFile" | "readAsRoot"> | undefined> {
  if (cfg.classes_file) {
    const file = cfg.classes_file;
    return { locate: () => Promise.resolve(file) };
  }
  const s = await agents.nodePuppet(agentsConfig(cfg));
  if (!s) return undefined;
  const { PuppetAgent } = await import("../puppet/index.js");
  const agent = new PuppetAgent(s);
  return {
    locationFile: agent.puppetConfPath,
    // the helper answers for an agent the node hosts (either one's settings name this Puppet)
    ...(ops.via === "helper" ? { readAsRoot: () => ops.readPuppetState({ agent: (cfg.agents.builtin ?? []).includes("puppet") ? "puppet" : "provision", settings: s }, "classes") } : {}),
    async locate() {
      try {
        return await agent.classfile();
      } catch (e) {
        log.warn({ err: (e as Error).message, file: agent.defaultClassfile }, "cannot ask Puppet for its classfile; using its default");
        return agent.defaultClassfile;
      }
    },
    locationKey() {
      try {
        const st = statSync(agent.puppetConfPath);
        return `${st.ino}:${st.size}:${st.mtimeMs}`;
      } catch {
        return "absent";
      }
    },
  };
}

/** The credential the node connects with in a phase (docs/security.md#provisioning-isolation). */
async function phaseCredential(cfg: ServerConfig, agents: AgentCatalogue, phase: NodePhase, ops: NodeOps | undefined): Promise<TlsSettings | undefined> {
  const ca = cfg.tls?.ca;
  if (phase === "provisioning") {
    const p = cfg.provisioning!;
    return p.cert ? { ca, cert: p.cert, key: p.key } : resolveTls(ca ? { ca } : undefined);
  }
  if (cfg.tls?.use_puppet_cert && ops?.via === "helper") {
    // The Puppet key is root's: the helper hands it over, and it is kept where only this daemon reads it.
    const pem = await ops.tlsCredential({ agent: "provision", settings: await agents.nodePuppetOrDefaults(agentsConfig(cfg)) });
    const dir = join(configDir(), "puppet-tls");
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    writeFileSync(join(dir, "cert.pem"), pem.cert, { mode: 0o600 });
    writeFileSync(join(dir, "key.pem"), pem.key, { mode: 0o600 });
    return { ca, cert: join(dir, "cert.pem"), key: join(dir, "key.pem") };
  }
  if (cfg.tls?.use_puppet_cert) {
    const pc = await puppetCredential(cfg, agents);
    if (!existsSync(pc.cert) || !existsSync(pc.key)) {
      throw new MusterError("MUSTER_PKI_FAILED", `tls.use_puppet_cert: the node has no Puppet certificate yet (${pc.cert}); provision it first (configure provisioning: so it waits in isolation), or set tls.cert and tls.key`);
    }
    return { ca, ...pc };
  }
  return resolveTls(cfg.tls && (cfg.tls.ca || cfg.tls.cert) ? { ca, cert: cfg.tls.cert, key: cfg.tls.key } : undefined);
}

/** Where the node keeps the `muster` fact's data: read by the muster Puppet module's lib/facter/muster.rb. */
export const MUSTER_FACT_FILE = "muster-fact.json";

/**
 * What this node is to muster once in production (the agents it hosts and its collectives), for
 * Puppet to report as the fact `muster`, so PuppetDB can answer --dm puppetdb's -A and -T
 * (docs/puppetdb.md). The production view even while the node waits to be provisioned: the fact is
 * how the fleet finds it afterwards. A file nobody can write is logged, not fatal.
 */
function writeMusterFact(cfg: ServerConfig, agents: string[], log: Logger): void {
  const file = join(configDir(), MUSTER_FACT_FILE);
  try {
    mkdirSync(configDir(), { recursive: true, mode: 0o700 });
    // maps of names, not lists: in PuppetDB a name is then a path (facts.muster.agents.puppet), which PQL finds fast
    const names = (xs: readonly string[]) => Object.fromEntries([...new Set(xs)].sort().map((x) => [x, true]));
    writeFileSync(file, `${JSON.stringify({ identity: cfg.identity, agents: names(agents), collectives: names(cfg.collectives) })}\n`, { mode: 0o644 });
  } catch (e) {
    log.warn({ file, err: (e as Error).message }, "cannot write the muster fact's file: PuppetDB will not know this node's agents and collectives");
  }
}

/**
 * Whether a waiting node's credential is its own (CN=<identity>), not a bootstrap certificate
 * shared by many nodes; without one (a broker without users) nothing is confined anyway.
 */
function ownBootstrapCredential(cert: string | undefined, identity: string): boolean {
  if (!cert) return true;
  try {
    return new X509Certificate(readFileSync(cert)).subject.split("\n").includes(`CN=${identity}`);
  } catch {
    return false;
  }
}

export interface StartServerOptions {
  /** The agents this node may host (src/agents/builtin.ts builtinAgents for `muster server`). */
  agents: AgentCatalogue;
  broker?: string;
}

export async function startServer(cfg: ServerConfig, log: Logger, opts: StartServerOptions): Promise<RunningServer> {
  const agents = opts.agents;
  // What needs root: the privileged helper when one is configured (an unprivileged daemon), else
  // in process (the agents' default, and Puppet's facts read here).
  const ops: NodeOps = cfg.privileged_helper ? (await import("../privileged/client.js")).helperOps(cfg.privileged_helper) : (await import("../puppet/node-ops.js")).directOps();
  const needsRoot = !!cfg.provisioning || !!cfg.tls?.use_puppet_cert || (cfg.agents.builtin ?? []).some((a) => ["provision", "puppet", "resource"].includes(a));
  if (needsRoot && !cfg.privileged_helper && process.getuid?.() !== 0) {
    log.warn("running unprivileged without privileged_helper: Puppet runs and puppet.conf edits need root (set privileged_helper: /run/muster/privileged.sock)");
  }
  // The facts Puppet uses (docs/decisions/privileged-helper.md, "Facts"), as root.
  const gather = cfg.facts.facter
    ? async () => ops.nodeFacts({ agent: "puppet", settings: await agents.nodePuppetOrDefaults(agentsConfig(cfg)) }, { facterCommand: cfg.facts.facter_command, onPartial: (reason) => log.warn({ err: reason }, "the facts are partial") })
    : undefined;
  const facts = new FactSource({ ...(gather ? { gather } : {}), factsFile: cfg.facts.file, extra: cfg.facts.extra, log, gatherEveryMs: cfg.facts.gather_interval * 1000 });
  await facts.refresh(true);
  const refresh = setInterval(() => void facts.refresh(), cfg.facts.refresh_interval * 1000);
  refresh.unref();
  // Puppet's view gathered again once a run the heartbeats see ended after the last gather: a run
  // is what changes the facts Puppet sees (one that ended before it is in them already)
  const onRun = (_identity: string, time: number) => {
    if (gather && time > facts.gatheredAt) void facts.refresh(true);
  };
  // Registration carries new classes at once; `current` is the phase serving when they change.
  let onClassesChange: (() => void) | undefined;
  const location = await classesLocation(cfg, agents, ops, log).catch((e: unknown) => {
    // a bad plugins.puppet/provision setting fails those agents' requests; the node still serves
    log.error({ err: (e as Error).message }, "cannot tell where the node's Puppet keeps its classes; serving without classes");
    return undefined;
  });
  const classes = location
    ? new ClassesSource({ ...location, pollMs: cfg.facts.refresh_interval * 1000, log, onChange: (list) => (log.info({ classes: list.length }, "Puppet's classes changed"), onClassesChange?.()) })
    : undefined;
  await classes?.start();

  const extra: Agent[] = [];
  if (cfg.agents.directory) {
    const { agents, errors } = loadExternalAgents(cfg.agents.directory);
    for (const e of errors) log.error(e);
    extra.push(...agents);
  }
  writeMusterFact(cfg, [...agents.always, ...(cfg.agents.builtin ?? []), ...extra.map((a) => a.ddl.metadata.name)], log);
  const intakeStats = newIntakeStats();
  const policySources = mergePolicies(cfg.policies, cfg.policy_dir);
  const policies = compilePolicies(policySources);
  // the audit file is opened now: a path the node cannot write is a config error, not a silent gap
  const auditor = new Auditor(cfg.audit, { identity: cfg.identity, log });
  const buckets = new AgentBuckets(log);
  // One intake for both phases: its replay cache outlives the switch to production.
  const intake = new RequestIntake({ trust: buildTrustStore(cfg.security), freshness: { maxClockSkew: cfg.security.max_clock_skew }, maxBytes: cfg.max_message_bytes, stats: intakeStats, log });
  // The node picks its TLS credential per phase (phaseCredential); only the broker comes from here.
  const broker = resolveBrokerSettings({ flag: opts.broker, own: { file: "the server config", brokers: cfg.brokers }, tls: false });
  const brokers = broker.servers;
  // Under provisioning isolation the node waits in the provisioning collective until its
  // provision agent says it is provisioned (now, or later through onProvisioned).
  const provisioned = cfg.provisioning ? await agents.isProvisioned(agentsConfig(cfg)) : true;
  const noClasses: string[] = [];
  const refreshMetadata = classes ? () => classes.refresh() : undefined;
  const nodeKey = loadOrCreateNodeKey(cfg.identity, cfg.security.node_key);
  log.info({ pubkey: nodeKey.publicKey }, "node key loaded: replies and events are signed with it");
  const common = { nodeKey, ops, identity: cfg.identity, facts: () => facts.facts, classes: () => classes?.classes ?? noClasses, refreshMetadata, plugins: cfg.plugins, log, intakeStats, audit: auditor.record, extraStats: () => ({ ...auditor.stats }), kv: buckets.opener };

  const buildPhase = async (phase: NodePhase): Promise<NodeRuntime> => {
    if (phase === "provisioning") {
      const p = cfg.provisioning!;
      const builtin = ["provision"];
      const agentNames = [...new Set([...agents.always, ...builtin])];
      // The agent tells us from inside disable_provisioner; switching waits for that request to finish.
      const onProvisioned = () => setImmediate(() => void switchToProduction());
      return buildRuntime({ ...common, collectives: [p.collective], mainCollective: p.collective, always: agents.always, builtin, factories: await agents.load(builtin), policies: compilePolicies(provisioningPolicies(p.callers, agentNames)), onProvisioned });
    }
    const runtime = buildRuntime({ ...common, collectives: cfg.collectives, mainCollective: mainCollective(cfg), always: agents.always, builtin: cfg.agents.builtin, factories: await agents.load(cfg.agents.builtin ?? []), extraAgents: extra, policies });
    for (const w of policyWarnings(policySources, runtime.loadedAgents().map((la) => la.agent.ddl))) log.warn(w);
    return runtime;
  };

  interface Serving {
    phase: NodePhase;
    runtime: NodeRuntime;
    host: NodeHost;
    nc: NatsConnection;
  }
  const serve = async (phase: NodePhase): Promise<Serving> => {
    const runtime = await buildPhase(phase);
    const tls = await phaseCredential(cfg, agents, phase, ops);
    const nc = await connectBroker({ servers: brokers, from: broker.from, name: `muster-server:${cfg.identity}`, log, persistent: true, tls, inboxPrefix: inboxPrefixFor(cfg.identity) });
    // A node's own bootstrap credential may publish its audit records (muster.audit.<identity>
    // only); a shared one may not (a waiting node could forge another's): then, while
    // provisioning, the audit file is the record.
    const own = phase === "production" || ownBootstrapCredential(cfg.provisioning?.cert, cfg.identity);
    if (own) auditor.connect(streamsOn(nc));
    if (phase === "production") buckets.connect(bucketsOn(nc));
    const host = new NodeHost({ nc, intake, runtimes: [runtime], log, wildcard: false, registration: cfg.registration, heartbeat: { ...cfg.heartbeat, interval: own ? cfg.heartbeat.interval : 0, phase: phase === "production" ? "serving" : "waiting", onRun }, version: VERSION });
    await host.start();
    log.info({ identity: cfg.identity, phase, collectives: runtime.collectives, agents: runtime.activeAgentNames(), broker: nc.getServer(), tls: tls ? { ca: tls.ca, cert: tls.cert } : undefined, policies: phase === "production" ? [...policies.keys()] : "provisioning callers only", audit: { file: cfg.audit?.file, stream: cfg.audit?.stream?.name } }, "muster server ready");
    return { phase, runtime, host, nc };
  };

  let stopped = false;
  let switching: Promise<void> | undefined;
  let current = await serve(provisioned ? "production" : "provisioning");
  onClassesChange = () => {
    if (!switching && !stopped) current.host.registerNow();
  };

  const switchToProduction = (): Promise<void> => {
    if (switching || stopped || current.phase !== "provisioning") return switching ?? Promise.resolve();
    switching = (async () => {
      log.info("provisioned: leaving the provisioning collective for production credentials");
      const old = current;
      await old.host.stop(); // in-flight work (the disable reply) finishes first
      await closeConnection(old.nc);
      for (;;) {
        try {
          // the production run just wrote classes.txt: answer -C and register with it at once,
          // not one refresh interval and a splayed registration later
          await Promise.all([facts.refresh(true), classes?.refresh()]);
          current = await serve("production");
          current.host.registerNow();
          return;
        } catch (e) {
          // e.g. the certificate is not on disk yet: keep trying rather than leave the node dark
          log.error({ err: (e as Error).message }, "cannot start in production; retrying in 10 s");
          await new Promise((r) => setTimeout(r, 10_000).unref());
          if (stopped) return;
        }
      }
    })().finally(() => (switching = undefined));
    return switching;
  };

  return {
    get runtime() {
      return current.runtime;
    },
    get host() {
      return current.host;
    },
    get nc() {
      return current.nc;
    },
    get phase() {
      return current.phase;
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      clearInterval(refresh);
      classes?.stop();
      await switching?.catch(() => undefined);
      await current.host.stop();
      await auditor.close(); // in-flight requests have been audited; flush before the connection goes
      await closeConnection(current.nc);
    },
  };
}
