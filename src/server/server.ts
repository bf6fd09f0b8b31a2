import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";
import { coreAgentFactories, loadBuiltinFactories, ALWAYS_LOADED, BUILTIN_AGENT_NAMES, type AgentFactory } from "../agents/builtin.js";
import type { NodeIntrospection } from "../agents/rpcutil/index.js";
import { closeConnection, connectBroker, resolveBrokers } from "../broker/connect.js";
import { MusterError } from "../errors.js";
import { Auditor } from "../security/audit.js";
import { loadOrCreateSigningKey, readTrustedKeyDir, TrustStore, type TrustedKey } from "../security/keys.js";
import { mergePolicies } from "../security/policy-files.js";
import { compilePolicies, policyWarnings, type CompiledPolicies } from "../security/policy.js";
import { VERSION } from "../version.js";
import type { Agent } from "./agent.js";
import { mainCollective, type ServerConfig } from "./config.js";
import { agentDataPlugin, factDataPlugin } from "./data-plugins.js";
import { loadExternalAgents } from "./external.js";
import { NodeHost } from "./host.js";
import { RequestIntake } from "./intake.js";
import { FactSource } from "./metadata.js";
import { NodeRuntime, type AuditEntry, type LoadedAgent } from "./runtime.js";
import { newIntakeStats, type IntakeStats } from "./stats.js";

// `muster server`: one node. Loads facts, classes and agents, connects (forever, with backoff),
// subscribes and serves until stopped.

export interface RunningServer {
  runtime: NodeRuntime;
  host: NodeHost;
  nc: NatsConnection;
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
  /** Names of built-in agents to load besides discovery and rpcutil. */
  builtin?: string[];
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
  factories?: Record<string, AgentFactory>;
}

/** Builds a NodeRuntime with its agents and data plugins wired to introspect it. */
export function buildRuntime(b: RuntimeBuild): NodeRuntime {
  const factories = b.factories ?? coreAgentFactories;
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
  const names = [...new Set([...ALWAYS_LOADED, ...(b.builtin ?? [])])];
  const agents: LoadedAgent[] = [];
  for (const name of names) {
    const f = factories[name];
    if (!f) throw new MusterError("MUSTER_CONFIG_INVALID", `unknown built-in agent '${name}'; known: ${BUILTIN_AGENT_NAMES.join(", ")}`);
    const config = b.plugins[name] ?? {};
    agents.push({ agent: f({ node, identity: b.identity, config }), config, log: b.log.child({ agent: name }) });
  }
  for (const a of b.extraAgents ?? []) agents.push({ agent: a, config: b.plugins[a.ddl.metadata.name] ?? {}, log: b.log.child({ agent: a.ddl.metadata.name }) });
  rt = new NodeRuntime({ identity: b.identity, collectives: b.collectives, mainCollective: b.mainCollective, agents, facts: b.facts, classes: b.classes, log: b.log, intakeStats: b.intakeStats, audit: b.audit, policies: b.policies });
  rt.addDataPlugin(factDataPlugin);
  rt.addDataPlugin(agentDataPlugin(() => rt!.loadedAgents().map((la) => la.agent.ddl)));
  return rt;
}

export async function startServer(cfg: ServerConfig, log: Logger, opts: { broker?: string } = {}): Promise<RunningServer> {
  const facts = new FactSource({ facter: cfg.facts.facter, facterCommand: cfg.facts.facter_command, factsFile: cfg.facts.file, classesFile: cfg.classes_file, extra: cfg.facts.extra, log });
  await facts.refresh();
  const refresh = setInterval(() => void facts.refresh(), cfg.facts.refresh_interval * 1000);
  refresh.unref();

  const extra: Agent[] = [];
  if (cfg.agents.directory) {
    const { agents, errors } = loadExternalAgents(cfg.agents.directory);
    for (const e of errors) log.error(e);
    extra.push(...agents);
  }
  const intakeStats = newIntakeStats();
  const policySources = mergePolicies(cfg.policies, cfg.policy_dir);
  const policies = compilePolicies(policySources);
  // the audit file is opened now: a path the node cannot write is a config error, not a silent gap
  const auditor = new Auditor(cfg.audit, { identity: cfg.identity, log });
  const runtime = buildRuntime({
    identity: cfg.identity,
    collectives: cfg.collectives,
    mainCollective: mainCollective(cfg),
    facts: () => facts.facts,
    classes: () => facts.classes,
    builtin: cfg.agents.builtin,
    factories: await loadBuiltinFactories(cfg.agents.builtin ?? []),
    extraAgents: extra,
    plugins: cfg.plugins,
    log,
    intakeStats,
    audit: auditor.record,
    policies,
    extraStats: () => ({ ...auditor.stats }),
  });
  for (const w of policyWarnings(policySources, runtime.loadedAgents().map((la) => la.agent.ddl))) log.warn(w);
  const intake = new RequestIntake({ trust: buildTrustStore(cfg.security), freshness: { maxClockSkew: cfg.security.max_clock_skew }, maxBytes: cfg.max_message_bytes, stats: intakeStats, log });
  const nc = await connectBroker({ servers: resolveBrokers(opts.broker, cfg.brokers), name: `muster-server:${cfg.identity}`, log, persistent: true });
  auditor.connect(nc);
  const host = new NodeHost({ nc, intake, runtimes: [runtime], log, wildcard: false, registration: cfg.registration, version: VERSION });
  await host.start();
  log.info({ identity: cfg.identity, collectives: cfg.collectives, agents: runtime.activeAgentNames(), broker: nc.getServer(), policies: [...policies.keys()], audit: { file: cfg.audit?.file, stream: cfg.audit?.stream?.name } }, "muster server ready");
  let stopped = false;
  return {
    runtime,
    host,
    nc,
    async stop() {
      if (stopped) return;
      stopped = true;
      clearInterval(refresh);
      await host.stop();
      await auditor.close(); // in-flight requests have been audited; flush before the connection goes
      await closeConnection(nc);
    },
  };
}
