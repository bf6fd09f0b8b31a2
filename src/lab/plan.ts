import { masterRelayAddress, RELAY_ADDRESS, type MachineKind } from "./machines/index.js";
import { LAB_NOTIFIER, masterIdentity, nodeIdentity } from "./names.js";
import { LAB_REGIONS, type LabRegion } from "./regions.js";
import { labRole, type LabRole } from "./roles.js";
import { checkPlan, type PlanStep } from "./schedule.js";

// A lab coming up, as data (STYLE.md 15): which steps, in which order, waiting for what. Pure:
// planLab() decides and steps.ts carries each step out, run by runner.ts, which starts every step as
// soon as the steps it comes after are done and tears down exactly what was started when any fails.
//
// The overlap it keeps: nats-server first; the two puppetserver JVMs start at once and warm up while
// the machine image is built or fetched, the package built and published, the network and relays
// made, the receiver, registry, web console and notifier started and the nodes started or booted;
// once the masters answer, the broker trusts their CAs and their muster servers start; then the
// waits (the nodes in the provisioning collective, counted from their power-on; the masters and
// the notifier in the fleet; the registry; the console); then the provisioner.

/** The kinds of step a lab is made of (steps.ts has one implementation per kind). */
export const STEP_KINDS = [
  "check-host",
  "credentials",
  "ports",
  "nats",
  "puppetserver",
  "machine-image",
  "receiver",
  "registry",
  "web",
  "machine-network",
  "machine-packages",
  "machine-relays",
  "machines-ready",
  "boot-machine",
  "ssh-config",
  "start-node",
  "notifier",
  "wait-provisioning",
  "trust-masters",
  "master-server",
  "save-state",
  "wait-fleet",
  "wait-registry",
  "wait-web",
  "provisioner",
] as const;
export type StepKind = (typeof STEP_KINDS)[number];

/**
 * What a lab's machines are for, a row per role: the step that says a machine of the role is up,
 * and how long it may take by kind of machine. Nodes are today's only role; the site adds its
 * brokers, masters, provisioners and console as rows (with the step kinds that make them ready).
 */
export const MACHINE_ROLES = {
  /** Waits to be provisioned: answers the provisioner's discovery in the provisioning collective. */
  node: { ready: "wait-provisioning", withinMs: { nspawn: 300_000, vm: 900_000 } },
} as const satisfies Record<string, { ready: StepKind; withinMs: Record<MachineKind, number> }>;
export type MachineRoleName = keyof typeof MACHINE_ROLES;

/** What each kind of step is given (the plan decides it; the run's context holds what earlier steps made). */
export interface StepArgs {
  "check-host": { kind: MachineKind };
  /** The lab's PKI (the broker's certificate names `brokerIps` too), keys and broker users. */
  credentials: { brokerIps: string[]; nodes: string[]; services: string[] };
  /** Ports picked before anything listens: the broker's monitoring, and the masters' (relayed before they answer). */
  ports: { masterHosts: string[] };
  nats: Record<string, never>;
  /** `announce`: the progress line (one for all masters, on the first). */
  puppetserver: { index: number; region: LabRegion; certname: string; altIps: string[]; announce?: string };
  "machine-image": { kind: MachineKind; cache?: string };
  receiver: Record<string, never>;
  registry: Record<string, never>;
  web: Record<string, never>;
  "machine-network": { masters: number };
  "machine-packages": { deb?: string };
  "machine-relays": { masterHosts: string[] };
  "machines-ready": { kind: MachineKind; count: number };
  "boot-machine": { role: MachineRoleName; identity: string; region: LabRegion; serial: number; puppet: LabRole };
  "ssh-config": Record<string, never>;
  "start-node": { identity: string; region: LabRegion; serial: number };
  notifier: { identity: string };
  /** `machines`: say each one as it answers, and fail at once when one powers off. */
  "wait-provisioning": { identities: string[]; timeoutMs: number; machines: boolean };
  "trust-masters": Record<string, never>;
  /** `ipaddress`: where nodes reach the master (its relay on the lab network, for machines). */
  "master-server": { index: number; identity: string; region: LabRegion; ipaddress: string };
  "save-state": Record<string, never>;
  "wait-fleet": { identities: string[]; timeoutMs: number };
  "wait-registry": { timeoutMs: number };
  "wait-web": { timeoutMs: number };
  provisioner: { overrides?: Record<string, unknown> };
}

export type LabStep = { [K in StepKind]: PlanStep<K, StepArgs[K]> }[StepKind];
export type LabPlan = LabStep[];

/**
 * Which kinds of step use what which other kinds made (steps.ts reads it from the run's context):
 * every step of those kinds must be done first. checkPlan holds a plan to it.
 */
export const STEP_NEEDS: Readonly<Record<StepKind, readonly StepKind[]>> = {
  "check-host": [],
  credentials: ["check-host"],
  ports: ["check-host"],
  nats: ["credentials", "ports"],
  puppetserver: ["ports"],
  "machine-image": ["check-host"],
  receiver: ["nats"],
  registry: ["nats", "credentials"],
  web: ["registry"],
  "machine-network": ["check-host"],
  "machine-packages": ["check-host"],
  "machine-relays": ["nats", "ports", "machine-network", "machine-packages"],
  "machines-ready": ["credentials", "machine-image", "machine-relays"],
  "boot-machine": ["machines-ready", "registry"],
  "ssh-config": ["boot-machine"],
  "start-node": ["nats", "credentials", "registry"],
  notifier: ["nats", "credentials", "receiver"],
  "wait-provisioning": ["start-node", "boot-machine"],
  "trust-masters": ["nats", "puppetserver", "registry"],
  "master-server": ["trust-masters"],
  "save-state": ["receiver", "registry", "web", "notifier", "master-server", "start-node", "boot-machine", "ssh-config"],
  "wait-fleet": ["master-server", "notifier"],
  "wait-registry": ["registry"],
  "wait-web": ["web"],
  provisioner: ["save-state", "wait-provisioning", "wait-fleet", "wait-registry", "wait-web"],
};

/** What planLab needs to know of a lab (LabOptions' shape). */
export interface LabShape {
  nodes: number;
  provisioner: boolean;
  provisionerConfig?: Record<string, unknown>;
  machines?: { kind: MachineKind; deb?: string; imageCache?: string };
}

/** How long process nodes may take to wait in the provisioning collective, and the lab's services to answer. */
const PROCESS_NODES_WITHIN_MS = 120_000;
const SERVICES_WITHIN_MS = 60_000;

/** The steps that bring up a lab of this shape (pure). */
export function planLab(o: LabShape): LabPlan {
  const plan: LabPlan = [];
  const step = <K extends StepKind>(id: string, kind: K, after: string[], args: StepArgs[K]) => (plan.push({ id, kind, after, args } as LabStep), id);
  const m = o.machines;
  const nodes = Array.from({ length: o.nodes }, (_, i) => ({ identity: nodeIdentity(i, regionOf(i)), region: regionOf(i), serial: i + 1, puppet: labRole(i) }));
  const masters = LAB_REGIONS.map((region, index) => ({ index, region, identity: masterIdentity(region) }));
  const masterHosts = LAB_REGIONS.map((r) => r.host);

  // before anything starts: can this host run machines (root, tools, overlayfs)?
  const host = m ? [step("check-host", "check-host", [], { kind: m.kind })] : [];
  step("credentials", "credentials", host, { brokerIps: m ? [RELAY_ADDRESS] : [], nodes: nodes.map((n) => n.identity), services: [LAB_NOTIFIER, ...masters.map((x) => x.identity)] });
  step("ports", "ports", host, { masterHosts });
  step("nats", "nats", ["credentials", "ports"], {});
  const jvms = masters.map((x) =>
    step(`puppetserver ${x.identity}`, "puppetserver", ["nats"], {
      index: x.index,
      region: x.region,
      certname: x.identity,
      altIps: m ? [masterRelayAddress(x.index)] : [],
      ...(x.index === 0 ? { announce: `starting ${masters.length} puppetservers (${LAB_REGIONS.map((r) => `${r.name} on ${r.host}`).join(", ")}); this takes 30-90 s` } : {}),
    }),
  );
  if (m) step("machine-image", "machine-image", ["nats"], { kind: m.kind, ...(m.imageCache ? { cache: m.imageCache } : {}) });
  step("receiver", "receiver", ["nats"], {});
  // before the nodes, so none of their registrations is missed
  step("registry", "registry", ["nats"], {});
  step("web", "web", ["registry"], {});

  let nodeSteps: string[];
  if (m) {
    // whole machines: their network, the package, the relays, then power on, as a cloud would
    step("machine-network", "machine-network", ["machine-image"], { masters: masters.length });
    step("machine-packages", "machine-packages", ["machine-network"], m.deb ? { deb: m.deb } : {});
    step("machine-relays", "machine-relays", ["machine-packages"], { masterHosts });
    step("machines-ready", "machines-ready", ["machine-relays", "registry"], { kind: m.kind, count: nodes.length });
    // one after the other: each forgets its old host key in the one known_hosts file
    let previous = "machines-ready";
    nodeSteps = nodes.map((n) => (previous = step(`boot ${n.identity}`, "boot-machine", [previous], { role: "node", identity: n.identity, region: n.region, serial: n.serial, puppet: n.puppet })));
    step("ssh-config", "ssh-config", nodeSteps, {});
  } else {
    nodeSteps = nodes.map((n) => step(`start ${n.identity}`, "start-node", ["registry"], { identity: n.identity, region: n.region, serial: n.serial }));
  }
  step("notifier", "notifier", ["receiver", "registry"], { identity: LAB_NOTIFIER });
  // nodes announce themselves as they come up, while the JVMs still start: a machine's power-on
  // to waiting is timed as it happens, not when the masters are up
  const ready = m ? waitsByRole(nodes.map((n) => ({ role: "node" as const, identity: n.identity })), m.kind) : [{ kind: "wait-provisioning" as const, identities: nodes.map((n) => n.identity), timeoutMs: PROCESS_NODES_WITHIN_MS }];
  const nodesReady = ready.map((w) => step(w.kind, w.kind, nodeSteps, { identities: w.identities, timeoutMs: w.timeoutMs, machines: Boolean(m) }));

  step("trust-masters", "trust-masters", [...jvms, "registry"], {});
  const servers = masters.map((x) => step(`master-server ${x.identity}`, "master-server", ["trust-masters"], { index: x.index, identity: x.identity, region: x.region, ipaddress: m ? masterRelayAddress(x.index) : x.region.host }));
  step("state", "save-state", [...servers, "notifier", "web", ...nodeSteps, ...(m ? ["ssh-config"] : [])], {});
  step("wait-fleet", "wait-fleet", ["state"], { identities: [...masters.map((x) => x.identity), LAB_NOTIFIER], timeoutMs: SERVICES_WITHIN_MS });
  step("wait-registry", "wait-registry", ["state"], { timeoutMs: SERVICES_WITHIN_MS });
  step("wait-web", "wait-web", ["state"], { timeoutMs: SERVICES_WITHIN_MS });
  // with when each machine began waiting
  step("state-waited", "save-state", ["wait-fleet", ...nodesReady, "wait-registry", "wait-web"], {});
  if (o.provisioner) step("provisioner", "provisioner", ["state-waited"], o.provisionerConfig ? { overrides: o.provisionerConfig } : {});
  const problems = checkPlan(plan, STEP_NEEDS);
  if (problems.length) throw new Error(`the lab's plan cannot run:\n${problems.join("\n")}`);
  return plan;
}

/** Node `i`'s region: the regions in turn. */
const regionOf = (i: number): LabRegion => LAB_REGIONS[i % LAB_REGIONS.length]!;

/** The readiness waits of some machines: one wait per kind of readiness, over every machine its roles put there. */
function waitsByRole(machines: { role: MachineRoleName; identity: string }[], kind: MachineKind): { kind: "wait-provisioning"; identities: string[]; timeoutMs: number }[] {
  const waits = new Map<string, { kind: "wait-provisioning"; identities: string[]; timeoutMs: number }>();
  for (const x of machines) {
    const role = MACHINE_ROLES[x.role];
    const w = waits.get(role.ready) ?? { kind: role.ready, identities: [], timeoutMs: 0 };
    w.identities.push(x.identity);
    w.timeoutMs = Math.max(w.timeoutMs, role.withinMs[kind]);
    waits.set(role.ready, w);
  }
  return [...waits.values()];
}
