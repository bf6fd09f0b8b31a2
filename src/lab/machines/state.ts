import type { LabRole } from "../roles.js";
import { RELAY_ADDRESS } from "./addresses.js";
import type { MachineImage } from "./image.js";
import type { MachineKind } from "./machine.js";
import type { VmImage } from "./vm.js";

// What the lab remembers of its machines (in lab.json, through LabState): the machines' side of the
// lab as a whole, and what a node that is a machine has besides a process node's fields.

export interface LabMachinesState {
  kind: MachineKind;
  /** The lab's network namespace (its name; /run/netns/<name>). */
  netns: string;
  /** The image every machine boots from (nspawn: a root directory). */
  image: string;
  imageKey: string;
  /** vm: the base disk, kernel and initramfs. */
  vmImage?: VmImage;
  /**
   * What machines install from: a signed apt repository (packaging/apt-repo.mjs, as `npm run
   * package` writes one) in the package server's directory, holding the .deb the lab was started
   * with and any published since (`muster lab publish`). `url` is the repository as machines see it.
   */
  packages: LabPackages;
  /** The broker as machines reach it (through the relay). */
  broker: string;
  relays: { name: string; pids: number[]; listen: string; target: string }[];
  /** Unix sockets of the relays: short, so it lives under /run. */
  socketDir: string;
  /** The lab's SSH key (root on every machine) and the ssh_config that names the machines. */
  ssh: { key: string; config: string; knownHosts: string };
}

export interface LabPackages {
  dir: string;
  deb: string;
  url: string;
  key: string;
  gnupgHome: string;
  hostUrl: string;
  pid: number;
  log: string;
}

/** What a lab node that is a machine has besides a process node's fields. */
export interface LabNodeMachine {
  kind: MachineKind;
  /** <lab>/machines/<identity> */
  dir: string;
  /** Where the operator's ssh reaches it (a relay on loopback). */
  ssh: { host: string; port: number };
  relayPids: number[];
  /** When it was first powered on (ms epoch). */
  poweredOnAt: number;
  /** The Debian release it runs (its image's). */
  release?: string;
  /** When it first answered in the provisioning collective: booted, package installed, muster-server up. */
  waitingAt?: number;
}

/** A lab node that is a machine, as booting one makes it (LabState's LabNode is this, its machine optional). */
export interface MachineNode {
  identity: string;
  country: string;
  region: string;
  ipaddress: string;
  dir: string;
  /** A process node's muster server; a machine's power supervisor. */
  pid: number;
  /** Role, customer and environment (roles.ts labRole). */
  role: LabRole;
  machine: LabNodeMachine;
}

/** The machines' side of a lab, once its image, network, package server, relays and ssh key are there (pure). */
export function labMachinesState(o: {
  kind: MachineKind;
  image: { image: MachineImage; vm?: VmImage };
  network: { netns: string; socketDir: string };
  packages: LabPackages;
  relays: LabMachinesState["relays"];
  natsPort: number;
  ssh: LabMachinesState["ssh"];
}): LabMachinesState {
  return {
    kind: o.kind,
    netns: o.network.netns,
    image: o.image.image.root,
    imageKey: o.image.image.key,
    ...(o.image.vm ? { vmImage: o.image.vm } : {}),
    packages: o.packages,
    broker: `tls://${RELAY_ADDRESS}:${o.natsPort}`,
    relays: o.relays,
    socketDir: o.network.socketDir,
    ssh: o.ssh,
  };
}

/** Note that a machine answers in the provisioning collective; returns the line to tell the operator. */
export function machineWaiting(n: { identity: string; machine?: LabNodeMachine }): string {
  const m = n.machine!;
  m.waitingAt ??= Date.now();
  return `${n.identity} is waiting to be provisioned (${((m.waitingAt - m.poweredOnAt) / 1000).toFixed(1)} s after power on: booted, cloud-init installed the package, muster-server up)`;
}
