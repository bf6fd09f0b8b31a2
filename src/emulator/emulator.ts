import { DEFAULT_HEARTBEAT_INTERVAL_S } from "../protocol/heartbeat.js";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";
import type { AgentCatalogue } from "../agent/catalogue.js";
import { builtinAgents } from "../agents/builtin.js";
import { NodeHost } from "../server/host.js";
import { RequestIntake } from "../server/intake.js";
import type { NodeRuntime } from "../server/runtime.js";
import { buildRuntime, buildTrustStore, type RuntimeBuild } from "../server/server.js";
import { compilePolicies } from "../security/policy.js";
import { newIntakeStats } from "../server/stats.js";
import type { ServerConfig } from "../server/config.js";
import { VERSION } from "../version.js";
import { generateSigningKey, type SigningKey } from "../protocol/signing.js";
import type { FleetNode } from "./fleet.js";

// Many virtual nodes in one process behind one NATS connection. Each is a full NodeRuntime (same
// pipeline, agents and filters as `muster server`); a message is decoded and verified once.

export interface EmulatorOptions {
  nc: NatsConnection;
  nodes: FleetNode[];
  collective: string;
  log: Logger;
  security?: Partial<ServerConfig["security"]>;
  registration?: { interval: number; splay: boolean };
  /** Seconds between each node's heartbeats (default 10; 0: none). */
  heartbeat?: number;
  plugins?: Record<string, Record<string, unknown>>;
  /** The agents the nodes may host (default: the built-in ones). */
  agents?: AgentCatalogue;
  /** Factories by name instead of the catalogue's (simulated agents); the catalogue's `always` still apply. */
  factories?: RuntimeBuild["factories"];
  /** Action policies by agent, as in the server config's `policies`; every emulated node applies them. */
  policies?: Record<string, unknown>;
  /** Each node's own key (default: a new one per node, in memory); "none" leaves replies and events unsigned, as before issue 13 (the bench's "before" figures only: clients flag such replies). */
  nodeKey?: ((identity: string) => SigningKey) | "none";
}

export interface RunningEmulator {
  runtimes: NodeRuntime[];
  host: NodeHost;
  stop(): Promise<void>;
}

export async function startEmulator(o: EmulatorOptions): Promise<RunningEmulator> {
  const intakeStats = newIntakeStats();
  const security = { trusted_keys: [], max_clock_skew: 60, ...o.security };
  const intake = new RequestIntake({ trust: buildTrustStore(security), freshness: { maxClockSkew: security.max_clock_skew }, maxBytes: 1024 * 1024, stats: intakeStats, log: o.log });
  const nodeLog = o.log.child({ emulated: true });
  const policies = o.policies ? compilePolicies(o.policies) : undefined;
  const agents = o.agents ?? builtinAgents;
  const factories = o.factories ?? (await agents.load(o.nodes.flatMap((n) => n.agents)));
  // One key per emulated node, in memory: each signs its own replies and events as a server would.
  const runtimes = o.nodes.map((n) => {
    const collectives = n.collectives ?? [o.collective];
    const classes = [...new Set(n.classes)].sort(); // as a server reads classes.txt: sorted, no duplicates
    return buildRuntime({
      identity: n.identity,
      collectives,
      mainCollective: collectives[0] ?? o.collective,
      facts: () => n.facts,
      classes: () => classes,
      always: agents.always,
      builtin: n.agents,
      plugins: o.plugins ?? {},
      log: nodeLog,
      intakeStats,
      factories,
      policies,
      nodeKey: o.nodeKey === "none" ? undefined : (o.nodeKey?.(n.identity) ?? generateSigningKey(n.identity).key),
    });
  });
  const host = new NodeHost({ nc: o.nc, intake, runtimes, log: o.log, wildcard: true, registration: o.registration, heartbeat: { interval: o.heartbeat ?? DEFAULT_HEARTBEAT_INTERVAL_S, status: ["puppet"], phase: "serving" }, component: "emulator", version: VERSION });
  await host.start();
  return {
    runtimes,
    host,
    async stop() {
      await host.stop();
    },
  };
}
