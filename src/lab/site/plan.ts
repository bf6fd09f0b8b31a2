import type { MachineKind } from "../machines/index.js";
import { nodeIdentity } from "../names.js";
import { LAB_REGIONS, type LabRegion } from "../regions.js";
import { labRole, type LabRole } from "../roles.js";
import { checkPlan, type PlanStep } from "../schedule.js";
import { SITE_ROLES, siteMachines, type SiteRoleName } from "./roles.js";

// The site coming up, as data (STYLE.md 15), run by the lab's runner (runner.ts) with the steps of
// site/steps.ts. Every role is a row (SITE_ROLE_READY below, SITE_ROLES in roles.ts): its machines
// boot from the same image through their role's user-data, and a role says what "up" means for it.
// The host keeps the operator's side only: the site's files, the package server and mirror, the
// relays and the admins' webhook receiver.
//
// The overlap: the image (built once, with the lab's Debian mirror) and the package while the
// network is made; every machine powers on as soon as the relays are up, brokers first (the others
// retry until they answer, as they would in a cloud); each machine is up when cloud-init is done and
// its role's units run; the brokers form their cluster, and the operator makes the fleet's stores and
// enrolls the site machines' node keys; once the masters have made their CAs (and issued PuppetDB its
// certificates) PuppetDB on the console's machine serves them TLS (restarting while the masters'
// puppetservers start), and once the masters are up the brokers trust them (clients-ca.pem, a
// reload); then the fleet answers: the masters' and the
// notifier's muster servers, the registry and the console, the nodes waiting to be provisioned. The
// provisioners start on their own as soon as they are up.

export const SITE_STEP_KINDS = [
  "check-host",
  "site-files",
  "site-image",
  "machine-network",
  "site-packages",
  "receiver",
  "site-relays",
  "site-machines-ready",
  "boot-site-machine",
  "boot-site-node",
  "ssh-config",
  "save-state",
  "machine-up",
  "wait-brokers",
  "site-stores",
  "site-puppetdb",
  "trust-masters",
  "wait-fleet",
  "wait-console",
  "wait-provisioning",
] as const;
export type SiteStepKind = (typeof SITE_STEP_KINDS)[number];

/** Besides cloud-init and its units, what says a machine of each role is up (nodes: they wait to be provisioned). */
export const SITE_ROLE_READY: Record<SiteRoleName | "node", { ready: SiteStepKind; withinMs: number }> = {
  broker: { ready: "wait-brokers", withinMs: 300_000 },
  master: { ready: "wait-fleet", withinMs: 600_000 },
  provisioner: { ready: "machine-up", withinMs: 400_000 },
  console: { ready: "wait-console", withinMs: 400_000 },
  node: { ready: "wait-provisioning", withinMs: 400_000 },
};

export interface SiteStepArgs {
  "check-host": { kind: MachineKind };
  "site-files": { nodes: string[] };
  /** One image per Debian release the site's machines run. */
  "site-image": { release: string; kind: MachineKind; cache?: string };
  "machine-network": Record<string, never>;
  "site-packages": { deb?: string };
  receiver: Record<string, never>;
  "site-relays": Record<string, never>;
  "site-machines-ready": { kind: MachineKind; release: string };
  "boot-site-machine": { identity: string; role: SiteRoleName };
  "boot-site-node": { identity: string; region: LabRegion; serial: number; puppet: LabRole; release: string };
  "ssh-config": Record<string, never>;
  "save-state": Record<string, never>;
  /** cloud-init done and the role's units active, inside the machine. */
  "machine-up": { identity: string; units: string[]; timeoutMs: number };
  "wait-brokers": { timeoutMs: number };
  /** What the operator does once the brokers answer (docs/deploy.md#3-the-broker): the fleet's stores, the site machines' node keys enrolled. */
  "site-stores": { enroll: string[] };
  "site-puppetdb": { masters: string[]; timeoutMs: number };
  "trust-masters": { masters: string[]; timeoutMs: number };
  "wait-fleet": { identities: string[]; timeoutMs: number };
  "wait-console": { timeoutMs: number };
  "wait-provisioning": { identities: string[]; timeoutMs: number };
}

export type SiteStep = { [K in SiteStepKind]: PlanStep<K, SiteStepArgs[K]> }[SiteStepKind];
export type SitePlan = SiteStep[];

/** Which kinds of step use what which other kinds made: every step of those kinds must be done first. */
export const SITE_STEP_NEEDS: Readonly<Record<SiteStepKind, readonly SiteStepKind[]>> = {
  "check-host": [],
  "site-files": ["check-host"],
  "site-image": ["check-host"],
  "machine-network": ["check-host"],
  "site-packages": ["machine-network", "site-image"],
  receiver: ["check-host"],
  "site-relays": ["machine-network", "site-packages", "receiver"],
  "site-machines-ready": ["site-files", "site-image", "site-relays"],
  "boot-site-machine": ["site-machines-ready"],
  "boot-site-node": ["site-machines-ready"],
  "ssh-config": ["boot-site-machine", "boot-site-node"],
  "save-state": ["boot-site-machine", "boot-site-node", "ssh-config"],
  "machine-up": ["boot-site-machine"],
  "wait-brokers": ["site-files", "site-relays"],
  "site-stores": ["wait-brokers"],
  "site-puppetdb": ["boot-site-machine"],
  "trust-masters": ["wait-brokers", "boot-site-machine"],
  "wait-fleet": ["trust-masters"],
  "wait-console": ["site-files", "site-relays"],
  "wait-provisioning": ["wait-brokers", "boot-site-node"],
};

export interface SiteShape {
  /** How many nodes, and the Debian release of the site (its machines and, by default, its nodes). */
  nodes: number;
  suite: string;
  kind: MachineKind;
  deb?: string;
  imageCache?: string;
}

/** The site's Debian release by default: the current stable, with Puppet 8. */
export const SITE_SUITE = "trixie";

/** The steps that bring up the site (pure). */
export function planSite(o: SiteShape): SitePlan {
  const plan: SitePlan = [];
  const step = <K extends SiteStepKind>(id: string, kind: K, after: string[], args: SiteStepArgs[K]) => (plan.push({ id, kind, after, args } as SiteStep), id);
  const nodes = Array.from({ length: o.nodes }, (_, i) => ({ identity: nodeIdentity(i, region(i)), region: region(i), serial: i + 1, puppet: labRole(i) }));
  const machines = siteMachines();

  step("check-host", "check-host", [], { kind: o.kind });
  step("site-files", "site-files", ["check-host"], { nodes: nodes.map((n) => n.identity) });
  step("image", "site-image", ["check-host"], { release: o.suite, kind: o.kind, ...(o.imageCache ? { cache: o.imageCache } : {}) });
  step("machine-network", "machine-network", ["check-host"], {});
  step("site-packages", "site-packages", ["machine-network", "image"], o.deb ? { deb: o.deb } : {});
  step("receiver", "receiver", ["check-host"], {});
  step("site-relays", "site-relays", ["machine-network", "site-packages", "receiver"], {});
  step("machines-ready", "site-machines-ready", ["site-files", "image", "site-relays"], { kind: o.kind, release: o.suite });
  // one after the other, brokers first: each forgets its old host key in the one known_hosts file
  let previous = "machines-ready";
  const boots = [
    ...machines.map((m) => (previous = step(`boot ${m.identity}`, "boot-site-machine", [previous], { identity: m.identity, role: m.role }))),
    ...nodes.map((n) => (previous = step(`boot ${n.identity}`, "boot-site-node", [previous], { ...n, release: o.suite }))),
  ];
  step("ssh-config", "ssh-config", boots, {});
  // lab.json names every machine before anything is waited for: `lab down` finds them all
  step("state", "save-state", ["ssh-config"], {});
  const up = machines.map((m) => step(`up ${m.identity}`, "machine-up", ["state"], { identity: m.identity, units: SITE_ROLES[m.role].units, timeoutMs: SITE_ROLE_READY[m.role].withinMs }));
  const brokersUp = machines.filter((m) => m.role === "broker").map((m) => `up ${m.identity}`);
  const mastersUp = machines.filter((m) => m.role === "master").map((m) => `up ${m.identity}`);
  step("wait-brokers", "wait-brokers", brokersUp, { timeoutMs: SITE_ROLE_READY.broker.withinMs });
  step("site-stores", "site-stores", ["wait-brokers"], { enroll: machines.filter((m) => m.role === "master" || m.role === "console").map((m) => m.identity) });
  // the masters' CAs (and the certificates they issued PuppetDB) go to the brokers and to PuppetDB on the console's machine
  const consoleUp = machines.filter((m) => m.role === "console").map((m) => `up ${m.identity}`);
  // PuppetDB takes the masters' files as soon as their CAs exist (early in their user-data) and
  // restarts while their puppetservers start. Nothing here holds the nodes' first runs until it
  // serves (the provisioners start on their own): `lab up` runs again those that came earlier
  // (settle.ts), as docs/deploy.md section 10 tells an operator
  const masterIds = machines.filter((m) => m.role === "master").map((m) => m.identity);
  step("site-puppetdb", "site-puppetdb", ["state", ...consoleUp], { masters: masterIds, timeoutMs: SITE_ROLE_READY.master.withinMs });
  step("trust-masters", "trust-masters", ["wait-brokers", ...mastersUp], { masters: masterIds, timeoutMs: SITE_ROLE_READY.master.withinMs });
  const inFleet = machines.filter((m) => m.role === "master" || m.role === "console").map((m) => m.identity);
  step("wait-fleet", "wait-fleet", ["trust-masters", ...up], { identities: inFleet, timeoutMs: SITE_ROLE_READY.master.withinMs });
  step("wait-console", "wait-console", up.filter((u) => machines.find((m) => `up ${m.identity}` === u)?.role === "console"), { timeoutMs: SITE_ROLE_READY.console.withinMs });
  step("wait-provisioning", "wait-provisioning", ["wait-brokers"], { identities: nodes.map((n) => n.identity), timeoutMs: SITE_ROLE_READY.node.withinMs });
  step("state-up", "save-state", ["wait-fleet", "wait-console", "wait-provisioning", "site-stores", "site-puppetdb"], {});
  const problems = checkPlan(plan, SITE_STEP_NEEDS);
  if (problems.length) throw new Error(`the site's plan cannot run:\n${problems.join("\n")}`);
  return plan;
}

const region = (i: number): LabRegion => LAB_REGIONS[i % LAB_REGIONS.length]!;
