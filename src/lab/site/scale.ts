import { resolve } from "node:path";
import type { BootMachineContext } from "../machines/index.js";
import * as machines from "../machines/index.js";
import type { MusterProcess } from "../processes.js";
import { labMachinesOf, type LabState } from "../state.js";
import { writeUsers } from "./files.js";
import { siteBrokerUrls, siteHostsLines } from "./roles.js";
import { linkMirror, pushToBrokers } from "./operator.js";
import { siteCredentials } from "./credentials.js";

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
 * What booting nodes into the site needs: the image of their release (built on first use, with
 * the lab's mirror and the site's names), the site's brokers, and the callers they obey.
 */
export async function siteBootContext(s: LabState, suite: string | undefined, detached: boolean, say: (l: string) => void, track: BootMachineContext["track"]): Promise<BootMachineContext> {
  const ms = s.machines!;
  const release = suite ?? s.site!.suite;
  let forRelease = ms;
  if (release !== s.site!.suite) {
    const img = await machines.labImage(ms.kind, resolve(".muster", "images"), say, { release, site: { hosts: siteHostsLines() } });
    if (img.image.mirror) linkMirror(ms.packages.dir, release, img.image.mirror);
    forRelease = { ...ms, image: img.image.root, imageKey: img.image.key };
  }
  const creds = siteCredentials(s.site!.files.dir);
  const boot = await machines.machineBootContext(s.dir, forRelease, creds.ca, creds.keys.provisioner.publicKey, detached, track);
  return { ...boot, brokers: siteBrokerUrls(), trusted: [...boot.trusted, { name: "console", key: creds.keys.console.publicKey }] };
}

/** The site machine or node under this name, if any. */
export const siteMachineOf = (s: LabState, identity: string) => labMachinesOf(s).find((m) => m.identity === identity);

export type { MusterProcess };
