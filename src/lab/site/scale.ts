import { resolve } from "node:path";
import type { BootMachineContext } from "../machines/index.js";
import * as machines from "../machines/index.js";
import type { MusterProcess } from "../processes.js";
import { MusterError } from "../../errors.js";
import { isAlive } from "../processes.js";
import { labMachinesOf, writeLabState, type LabState, type SiteMachineState } from "../state.js";
import { prepareSiteFiles, writeUsers } from "./files.js";
import { siteBrokerUrls, siteHostsLines, siteMachine, siteMachines, SITE_ROLES } from "./roles.js";
import { linkMirror, pushToBrokers, RECEIVER_RELAY_PORT, siteRenderContext } from "./operator.js";
import { siteCredentials } from "./credentials.js";
import { machineUp } from "./reach.js";
import { siteRenderArgv } from "./render.js";

// Nodes coming and going in the site (`muster lab add` / `lab remove` on a site): the same as in
// any lab, but the broker users live on the broker machines (a new muster-users.conf copied to each,
// a reload, as docs/deploy.md section 3 says), and a node may run another Debian release than the
// site's (`--suite bookworm`: a Debian 12 node with Puppet 7, as in a fleet mid-upgrade).

/** Give the site's brokers the users of exactly these nodes: the file, copied to each, reloaded. */
export async function siteBrokerUsers(s: LabState, nodes: string[], say: (l: string) => void = () => undefined): Promise<void> {
  const site = s.site!;
  writeUsers(site.files.dir, nodes);
  const off = await pushToBrokers(site.machines, site.files.users, "/etc/nats/muster-users.conf");
  if (off.length) say(`${off.join(", ")} ${off.length > 1 ? "are" : "is"} off: copy ${site.files.users} to /etc/nats/muster-users.conf there once ${off.length > 1 ? "they are" : "it is"} back (the other brokers have the new users)`);
}

/**
 * What booting nodes into the site needs: the image of their release (built on first use), the
 * site's names, the site's brokers, and the callers they obey.
 */
export async function siteBootContext(s: LabState, suite: string | undefined, detached: boolean, say: (l: string) => void, track: BootMachineContext["track"]): Promise<BootMachineContext> {
  const ms = s.machines!;
  const release = suite ?? s.site!.suite;
  let forRelease = ms;
  // A node of another release boots that release's plain image, the one a lab of it boots (often
  // built already), with the site's names added in its own disk: a node installs nothing of the
  // mirror's, and an image with the site's mirror and names costs a second build of minutes.
  // A VM's disk is made from its image whole: it keeps the site's image of its release.
  const plain = release !== s.site!.suite && ms.kind === "nspawn";
  if (release !== s.site!.suite) {
    const img = await machines.labImage(ms.kind, resolve(".muster", "images"), say, plain ? { release } : { release, site: { hosts: siteHostsLines() } });
    if (img.image.mirror) linkMirror(ms.packages.dir, release, img.image.mirror);
    forRelease = { ...ms, image: img.image.root, imageKey: img.image.key };
  }
  const creds = siteCredentials(s.site!.files.dir);
  const boot = await machines.machineBootContext(s.dir, forRelease, creds.ca, creds.keys.provisioner.publicKey, detached, track);
  return { ...boot, brokers: siteBrokerUrls(), trusted: [...boot.trusted, { name: "console", key: creds.keys.console.publicKey }], ...(plain ? { hosts: siteHostsLines() } : {}) };
}

/** The site machine or node under this name, if any. */
export const siteMachineOf = (s: LabState, identity: string) => labMachinesOf(s).find((m) => m.identity === identity);

export type { MusterProcess };

/**
 * Terminate one of the site's own machines as a cloud would (`muster lab remove nats3.lab`): its
 * power cut, its disk and relays gone, and lab.json without it. What the others know of it stays
 * (a broker's place in the cluster, a master's CA): bring a machine back under its name with
 * `muster lab add --identity`.
 */
export async function removeSiteMachine(s: LabState, identity: string): Promise<void> {
  const m = s.site!.machines.find((x) => x.identity === identity)!;
  await machines.powerOffMachine(m.machine.dir, m.pid, { cut: true });
  for (const pid of m.machine.relayPids) if (isAlive(pid)) process.kill(pid, "SIGTERM");
  await machines.destroyMachineDisk(m.machine.dir);
  s.site!.machines = s.site!.machines.filter((x) => x !== m);
  machines.writeSshConfig(s.machines!, [...s.site!.machines, ...s.nodes]);
  writeLabState(s);
}

/**
 * A new machine for a site role under its fixed name (`muster lab add --identity provisioner2.lab`):
 * booted with that role's user-data, as at `lab up`; resolves once it is up (cloud-init done, its
 * units active). A new master makes a new CA: its region's nodes need provisioning afresh.
 */
export async function addSiteMachine(s: LabState, identity: string, o: { detached: boolean; say: (l: string) => void; track: BootMachineContext["track"] }): Promise<SiteMachineState> {
  const m = siteMachine(identity);
  if (!m) throw new MusterError("MUSTER_USAGE", `${identity} is not a site machine (${siteMachines().map((x) => x.identity).join(", ")})`);
  if (s.site!.machines.some((x) => x.identity === identity)) throw new MusterError("MUSTER_USAGE", `${identity} is in the site already: \`muster lab remove ${identity}\` first to make it anew`);
  const files = prepareSiteFiles(s.dir, s.nodes.map((n) => n.identity), receiverUrl());
  const boot = { ...(await machines.machineBootContext(s.dir, s.machines!, files.creds.ca, files.creds.keys.provisioner.publicKey, o.detached, o.track)) };
  const dir = machines.machineDir(s.dir, identity);
  await machines.freshMachineDir(s.machines!, dir, identity);
  const { machine, proc } = await machines.bootMachine(boot, { identity, slot: m.slot, argv: siteRenderArgv(siteRenderContext(s.machines!, files), m), ...(m.hostname ? { hostname: m.hostname } : {}) });
  o.track(`machine ${identity}`, proc);
  const made: SiteMachineState = { identity, role: m.role, address: m.address, pid: proc.pid, machine };
  s.site!.machines.push(made);
  machines.writeSshConfig(s.machines!, [...s.site!.machines, ...s.nodes]);
  writeLabState(s);
  o.say(`${identity} powered on (${m.role}); waiting for it to be up`);
  await machineUp(made, SITE_ROLES[m.role].units, 600_000, new AbortController().signal, () => undefined, o.say);
  return made;
}

const receiverUrl = () => `http://${machines.RELAY_ADDRESS}:${RECEIVER_RELAY_PORT}/`;
