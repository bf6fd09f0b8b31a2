import { siteSlot, type MachineSlot } from "../machines/index.js";
import { LAB_REGIONS, type LabRegion } from "../regions.js";

// The site (`muster lab up --site`): every role of docs/deploy.md on a machine of its own. Pure
// data: which machines there are, their fixed names and addresses, what each role installs and
// runs, and what "up" means for it. Operators' scripts and outside checks use these names, so they
// are fixed; the nodes (nodeNN.<region>.lab) are the lab's as always.

export type SiteRoleName = "broker" | "master" | "provisioner" | "console";

export interface SiteRole {
  role: SiteRoleName;
  /** What docs/deploy.md calls it. */
  what: string;
  /** Debian packages its user-data installs (from the lab's mirror and muster's repository). */
  packages: string[];
  /** The systemd units that are the role. */
  units: string[];
  /** docs/deploy.md's section for it. */
  section: string;
}

export const SITE_ROLES: Record<SiteRoleName, SiteRole> = {
  broker: { role: "broker", what: "a nats-server cluster member with JetStream", packages: ["nats-server"], units: ["nats-server.service"], section: "3-the-broker" },
  master: { role: "master", what: "puppetserver and muster-server hosting puppetca", packages: ["puppetserver", "muster"], units: ["puppetserver.service", "muster-server.service"], section: "4-puppet-masters" },
  provisioner: { role: "provisioner", what: "muster-provisioner, one of two sharing the state", packages: ["muster"], units: ["muster-provisioner.service"], section: "5-provisioners-two-for-ha" },
  console: { role: "console", what: "muster-registry, the web console and the notifier", packages: ["muster"], units: ["muster-registry.service", "muster-web.service", "muster-server.service"], section: "6-the-registry-and-the-console" },
};

export interface SiteMachine {
  identity: string;
  role: SiteRoleName;
  /** Its address on the lab network. */
  address: string;
  /** The loopback address the host reaches it on (its relays). */
  hostAlias: string;
  /** Where it sits on the lab network (address, MAC, veth). */
  slot: MachineSlot;
  /** 1-based within the role (nats2.lab: 2). */
  n: number;
  /** Masters: the region whose nodes they provision. */
  region?: LabRegion;
  /**
   * The host name its "cloud" gives it (meta-data local-hostname), when that is not its identity:
   * some clouds give a short name and no way to resolve the full one on the machine itself. The
   * site has one such master, so the lab meets what they do (issue 40: its certname must still be
   * its identity).
   */
  hostname?: string;
}

/** Where site machines sit on the lab network (nodes are on 10.77.1.0/24, relays on 10.77.0.0/24). */
const SITE_BASE: Record<SiteRoleName, number> = { broker: 0, master: 10, provisioner: 20, console: 30 };

function machine(role: SiteRoleName, identity: string, n: number, region?: LabRegion, hostname?: string): SiteMachine {
  const slot = siteSlot(SITE_BASE[role] + n);
  return { identity, role, address: slot.address, hostAlias: slot.sshAlias, slot, n, ...(region ? { region } : {}), ...(hostname ? { hostname } : {}) };
}

/** The master whose cloud gives it only a short host name (its region's). */
const SHORT_NAMED_REGION = "us";

/** Every machine of the site besides its nodes, in the order they are described (brokers first). */
export function siteMachines(): SiteMachine[] {
  return [
    ...[1, 2, 3].map((n) => machine("broker", `nats${n}.lab`, n)),
    ...LAB_REGIONS.map((r, i) => machine("master", `puppet-${r.name}.lab`, i + 1, r, r.name === SHORT_NAMED_REGION ? `puppet-${r.name}` : undefined)),
    ...[1, 2].map((n) => machine("provisioner", `provisioner${n}.lab`, n)),
    machine("console", "console.lab", 1),
  ];
}

export const siteMachine = (identity: string): SiteMachine | undefined => siteMachines().find((m) => m.identity === identity);

/** Site ports. */
export const SITE_PORTS = { nats: 4222, natsRoute: 6222, natsMonitor: 8222, puppet: 8140, registry: 8089, web: 8443 } as const;

/** The brokers as every muster process of the site names them. */
export function siteBrokerUrls(): string[] {
  return siteMachines()
    .filter((m) => m.role === "broker")
    .map((m) => `tls://${m.identity}:${SITE_PORTS.nats}`);
}

/** A site machine's short name: its hostname, and a broker's server_name in its nats-server.conf. */
export function shortName(identity: string): string {
  return identity.split(".")[0]!;
}

/** The routes every broker lists (its own among them). */
export function siteRoutes(): string[] {
  return siteMachines()
    .filter((m) => m.role === "broker")
    .map((m) => `nats-route://${m.identity}:${SITE_PORTS.natsRoute}`);
}

/**
 * The site's names for /etc/hosts: the lab network has no DNS server, so the image's hosts
 * template (cloud-init manage_etc_hosts, a Jinja template) carries them, as a site's DNS would. A
 * machine given only a short host name does not get its own full name (the template leaves its
 * line out on that machine): nothing there resolves it, as on the clouds it stands for.
 */
export function siteHostsLines(): string {
  return siteMachines()
    .map((m) => {
      const line = `${m.address} ${m.identity} ${shortName(m.identity)}`;
      return m.hostname ? `{% if hostname != "${m.hostname}" %}${line}{% endif %}` : line;
    })
    .join("\n");
}
