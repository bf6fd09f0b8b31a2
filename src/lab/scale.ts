import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { MusterError } from "../errors.js";
import { isValidIdentity } from "../protocol/subjects.js";
import { reloadBrokerUsers } from "./broker.js";
import { provisionerKey } from "./credentials.js";
import { bootLabMachine, bootMachine, destroyMachineDisk, freshMachineDir, machineBootContext, machineDir, machineStory, machineWaiting, nodeSlot, writeSshConfig } from "./machines/index.js";
import { nodeIdentity } from "./names.js";
import { labNodeContext, startLabNode } from "./nodes.js";
import { isAlive, type MusterProcess } from "./processes.js";
import { LAB_REGIONS, type LabRegion } from "./regions.js";
import { labRole } from "./roles.js";
import { labRunning, writeLabState, type LabNode, type LabState } from "./state.js";
import { siteBootContext, siteBrokerUsers } from "./site/scale.js";
import { waitForNodes } from "./waits.js";

// Nodes that arrive and leave after `lab up`, as auto-scaling would boot and terminate them:
// `muster lab add` boots new waiting nodes into the running lab (their own broker users and
// bootstrap credentials, isolated in the provisioning collective like the first ones) and
// the running provisioner takes them unattended; `muster lab remove` terminates one. Both work on
// a detached lab (from lab.json, by pid) and on an attached one (the tests' Lab object).

export interface AddNodesOptions {
  /** How many new nodes (default 1), numbered after the highest number handed out so far. */
  count?: number;
  /** Their country (a LAB_REGIONS country); default: regions in turn, as `lab up` does. */
  country?: string;
  /** Exact identities instead of new numbers: a machine coming back under an old name. */
  identities?: string[];
  /** A site's machines only: their Debian release when not the site's (a fleet mid-upgrade). */
  suite?: string;
  /**
   * One machine (one identity) booted from this user-data, made as an operator made it (the
   * guide's own command, say), instead of the lab's render. It makes its broker user as any
   * other; the user-data carries its credential and everything else.
   */
  userData?: string;
  progress?: (line: string) => void;
}

interface Spawning {
  detached: boolean;
  /**
   * The attached lab keeps its processes to stop them later: each node's own (its muster server, or
   * a machine's power supervisor, with `node` set) and the ones that serve it (a machine's ssh relay).
   */
  track?: (name: string, p: MusterProcess, o?: { node: string }) => void;
}

const NODE_NAME = /^node(\d+)\.([a-z0-9-]+)\.lab$/;

export function labRegionFor(country: string): LabRegion {
  const r = LAB_REGIONS.find((x) => x.country === country.toLowerCase() || x.name === country.toLowerCase());
  if (!r) throw new MusterError("MUSTER_USAGE", `the lab has no region for country ${JSON.stringify(country)}; choose one of ${LAB_REGIONS.map((x) => `${x.country} (${x.name}, ${x.region})`).join(", ")}`);
  return r;
}

function highestSerial(s: LabState): number {
  const used = s.nodes.map((n) => Number(NODE_NAME.exec(n.identity)?.[1] ?? 0));
  return Math.max(s.nodeSerial ?? 0, 0, ...used);
}

/** A node machine from user-data the caller made: a cloud's instance, booted as bootLabMachine boots the lab's. */
async function bootFromUserData(boot: Parameters<typeof bootLabMachine>[0], p: { identity: string; region: LabRegion; serial: number }, userData: string): ReturnType<typeof bootLabMachine> {
  const dir = machineDir(boot.labDir, p.identity);
  await freshMachineDir(boot.ms, dir, p.identity);
  const slot = nodeSlot(p.serial);
  const { machine, proc } = await bootMachine(boot, { identity: p.identity, slot, userData });
  return { node: { identity: p.identity, country: p.region.country, region: p.region.region, ipaddress: slot.address, dir, pid: proc.pid, role: labRole(p.serial - 1), machine }, proc };
}

/** Who the new nodes are: identities, regions, and the number that gives each its address. */
export function planNewNodes(s: LabState, o: AddNodesOptions): { identity: string; region: LabRegion; serial: number }[] {
  const fixed = o.country ? labRegionFor(o.country) : undefined;
  let serial = highestSerial(s);
  if (o.identities?.length) {
    if (o.count !== undefined && o.count !== o.identities.length) throw new MusterError("MUSTER_USAGE", "give either --count or --identity, not both");
    return o.identities.map((identity) => {
      if (!isValidIdentity(identity) || !/^[A-Za-z0-9._-]+$/.test(identity)) throw new MusterError("MUSTER_USAGE", `not a valid node identity: ${JSON.stringify(identity)}`);
      if (s.nodes.some((n) => n.identity === identity)) throw new MusterError("MUSTER_USAGE", `${identity} is already in the lab; \`muster lab remove ${identity}\` first to bring it back as a new machine`);
      if ((s.services ?? []).includes(identity) || s.masters.some((m) => m.identity === identity) || s.notifier.identity === identity) throw new MusterError("MUSTER_USAGE", `${identity} is a lab service, not a node`);
      const m = NODE_NAME.exec(identity);
      const region = fixed ?? LAB_REGIONS.find((r) => r.name === m?.[2]) ?? LAB_REGIONS[0]!;
      // An old name keeps its old address, as a re-imaged machine would; an unknown one gets a new number.
      const n = m ? Number(m[1]) : ++serial;
      if (n < 1 || n > 254) throw new MusterError("MUSTER_USAGE", `${identity}: lab node numbers run from 1 to 254`);
      return { identity, region, serial: n };
    });
  }
  const count = o.count ?? 1;
  if (!Number.isInteger(count) || count < 1 || count > 50) throw new MusterError("MUSTER_USAGE", "--count takes a whole number from 1 to 50");
  if (serial + count > 254) throw new MusterError("MUSTER_USAGE", `the lab has handed out ${serial} node numbers; addresses 127.0.1.x run out at 254`);
  return Array.from({ length: count }, () => {
    const i = serial++;
    const region = fixed ?? LAB_REGIONS[i % LAB_REGIONS.length]!;
    return { identity: nodeIdentity(i, region), region, serial: i + 1 };
  });
}

/** The broker's users for exactly these nodes: on this host's nats-server, or copied to a site's brokers. */
const brokerUsers = (s: LabState, nodes: string[]) => (s.site ? siteBrokerUsers(s, nodes) : reloadBrokerUsers(s, nodes));

/**
 * Boot new nodes into a running lab: broker users first, then their muster servers, waiting to be
 * provisioned; resolves once every one of them answers the provisioner's discovery.
 */
export async function addLabNodes(s: LabState, o: AddNodesOptions & Spawning): Promise<LabNode[]> {
  if (!labRunning(s)) throw new MusterError("MUSTER_USAGE", s.site ? "the site's brokers are not running; start the lab with `muster lab up --site`" : `the lab's broker (pid ${s.natsPid}) is not running; start the lab with \`muster lab up\``);
  if (o.suite && !s.site) throw new MusterError("MUSTER_USAGE", "--suite chooses the Debian release of a site's nodes (`muster lab up --site`); this lab's nodes run the host's");
  const say = o.progress ?? (() => undefined);
  const plan = planNewNodes(s, o);
  say(`adding ${plan.map((p) => `${p.identity} (${p.region.country})`).join(", ")}: broker users first`);
  await brokerUsers(s, [...s.nodes.map((n) => n.identity), ...plan.map((p) => p.identity)]);
  const ctx = labNodeContext(s, o.detached);
  const added: LabNode[] = [];
  if (s.machines) {
    // A machine lab grows by machines, booted through cloud-init like the first ones.
    const track = (name: string, p: MusterProcess) => o.track?.(name, p);
    const boot = s.site ? await siteBootContext(s, o.suite, o.detached, say, track) : await machineBootContext(s.dir, s.machines, { cert: s.tls.ca, key: ctx.caKey }, provisionerKey(s.dir).key.publicKey, o.detached, track);
    if (o.userData !== undefined && (plan.length !== 1 || !o.identities?.length)) throw new MusterError("MUSTER_USAGE", "a node booted from given user-data is one node, named by its identity");
    for (const p of plan) {
      const { node, proc } = o.userData !== undefined ? await bootFromUserData(boot, p, o.userData) : await bootLabMachine(boot, { identity: p.identity, region: p.region, serial: p.serial, role: labRole(p.serial - 1) });
      o.track?.(p.identity, proc, { node: p.identity });
      added.push(node);
      s.nodes.push(node);
    }
    writeSshConfig(s.machines, s.nodes);
  }
  for (const p of s.machines ? [] : plan) {
    // A machine coming back under an old name is a new machine: nothing of the old one survives.
    rmSync(join(s.dir, "nodes", p.identity), { recursive: true, force: true });
    const started = startLabNode(ctx, p.identity, p.region, p.serial);
    o.track?.(p.identity, started.proc, { node: p.identity });
    added.push(started.node);
    s.nodes.push(started.node);
  }
  s.nodeSerial = Math.max(highestSerial(s), ...plan.map((p) => p.serial));
  writeLabState(s);
  if (s.machines) {
    say(`powered on ${added.length} machine(s); waiting for cloud-init to install the package and muster-server to wait in the provisioning collective`);
    await waitForNodes(s, added.map((n) => n.identity), s.machines.kind === "vm" ? 900_000 : 300_000, "provisioning", (id) => say(machineWaiting(added.find((n) => n.identity === id)!))).catch(async (e: unknown) => {
      // what a machine that did not come up says of itself, in the error (a CI log has nothing else)
      const missing = e instanceof MusterError && e.code === "MUSTER_TIMEOUT" ? added.filter((n) => e.message.includes(n.identity) && n.machine?.kind === "nspawn") : [];
      if (!missing.length) throw e;
      const told = await Promise.all(missing.map(async (n) => `${n.identity}:\n${await machineStory(n.machine!.dir)}`));
      throw new MusterError("MUSTER_TIMEOUT", `${(e as Error).message}\n${told.join("\n")}`);
    });
    writeLabState(s);
    return added;
  }
  say(`started ${added.length} muster server(s); waiting for them in the provisioning collective`);
  await waitForNodes(s, added.map((n) => n.identity), 60_000, "provisioning");
  return added;
}

/**
 * Terminate one node as a cloud would: its process (killed, no goodbye), its directory, its
 * broker user. What the fleet knows of it (certificate, records) stays: that is decommission's job.
 */
export async function removeLabNode(s: LabState, identity: string, kill: (n: LabNode) => Promise<void>): Promise<LabNode> {
  const n = s.nodes.find((x) => x.identity === identity);
  if (!n) throw new MusterError("MUSTER_USAGE", `no node ${identity} in the lab (nodes: ${s.nodes.map((x) => x.identity).join(", ") || "none"})`);
  await kill(n);
  if (n.machine) {
    // as a cloud deletes a terminated instance's disk; its ssh relay and ssh_config entry go too
    for (const pid of n.machine.relayPids) if (isAlive(pid)) process.kill(pid, "SIGTERM");
    await destroyMachineDisk(n.machine.dir);
    if (s.machines) writeSshConfig(s.machines, s.nodes.filter((x) => x !== n));
  } else rmSync(n.dir, { recursive: true, force: true });
  const cfg = join(s.dir, "config", `${identity}.yaml`);
  if (existsSync(cfg)) rmSync(cfg);
  s.nodes = s.nodes.filter((x) => x !== n);
  writeLabState(s);
  if (labRunning(s)) await brokerUsers(s, s.nodes.map((x) => x.identity));
  return n;
}

