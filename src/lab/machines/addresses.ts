import { createHash } from "node:crypto";

// Where the lab's machines live on its private network: pure, so `lab up`, `lab add` and the tests
// make the same machine from the same number.
//
// The lab's network namespace holds one bridge. On it: the relay addresses (the broker, the package
// server and each Puppet master, relayed to the host's loopback where those services run) and one
// address per machine. Nothing else is on that network and it has no route out.

/** The lab network: 10.77.0.0/16 inside the lab's own namespace (no other host can see it). */
export const LAB_NET = { prefix: 16, bridge: "mbr0", gateway: "10.77.0.1" } as const;

/** The broker and the package server are relayed on the bridge's first address. */
export const RELAY_ADDRESS = LAB_NET.gateway;

/** The package server's port on the relay address (the lab's own HTTP server behind it). */
export const PACKAGE_PORT = 8080;

/** Puppet master `index` (LAB_REGIONS order) as machines reach it. */
export function masterRelayAddress(index: number): string {
  if (!Number.isInteger(index) || index < 0 || index > 88) throw new Error(`master index out of range: ${index}`);
  return `10.77.0.${11 + index}`;
}

/** Machine `serial` (1-254: the node number) on the lab network. */
export function machineAddress(serial: number): string {
  checkSerial(serial);
  return `10.77.1.${serial}`;
}

/** The loopback address the host reaches machine `serial`'s sshd on (through a relay). */
export function machineSshAlias(serial: number): string {
  checkSerial(serial);
  return `127.0.2.${serial}`;
}

/** A stable, locally administered MAC for machine `serial` (QEMU's 52:54:00 prefix). */
export function machineMac(serial: number): string {
  checkSerial(serial);
  return `52:54:00:4d:01:${serial.toString(16).padStart(2, "0")}`;
}

function checkSerial(serial: number): void {
  if (!Number.isInteger(serial) || serial < 1 || serial > 254) throw new Error(`machine numbers run from 1 to 254, got ${serial}`);
}

/** The lab's network namespace: one per lab directory, so a test's lab and the operator's never meet. */
export function labNetnsName(labDir: string): string {
  return `muster-${createHash("sha256").update(labDir).digest("hex").slice(0, 10)}`;
}

/** Where the lab network's relays keep their Unix sockets (short: under /run), and whose network it is. */
export const NETWORKS_DIR = "/run/muster-lab";
export const labSocketDir = (netns: string) => `${NETWORKS_DIR}/${netns}`;

/**
 * The host side of a machine's veth is named after the machine (`vb-` + 12 characters), so names
 * that agree in their first 12 characters would clash: the lab names machines by number instead.
 */
export function machineName(serial: number): string {
  checkSerial(serial);
  return `lab-m${serial}`;
}

/**
 * Where one machine sits: its address, the loopback alias the host reaches it on, its MAC, and the
 * names its veth (nspawn) or tap (QEMU) take. Nodes are numbered 1-254 on 10.77.1.0/24; the site's
 * own machines (brokers, masters, provisioners, the console) sit on 10.77.2.0/24.
 */
export interface MachineSlot {
  /** What MachineConfig.serial records (a node's number; 1000 + the last octet for a site machine). */
  serial: number;
  address: string;
  sshAlias: string;
  mac: string;
  name: string;
  tap: string;
}

/** Node `serial`'s slot. */
export function nodeSlot(serial: number): MachineSlot {
  return { serial, address: machineAddress(serial), sshAlias: machineSshAlias(serial), mac: machineMac(serial), name: machineName(serial), tap: `mtap${serial}` };
}

/** The slot of the site machine at 10.77.2.<octet> (site/roles.ts places them). */
export function siteSlot(octet: number): MachineSlot {
  checkSerial(octet);
  return { serial: 1000 + octet, address: `10.77.2.${octet}`, sshAlias: `127.0.3.${octet}`, mac: `52:54:00:4d:02:${octet.toString(16).padStart(2, "0")}`, name: `lab-s${octet}`, tap: `stap${octet}` };
}
