import { createHash } from "node:crypto";
import { stringify as toYaml } from "yaml";

// Where the lab's machines live on its private network, and what their NoCloud seeds say: pure, so
// `lab up`, `lab add` and the tests make the same machine from the same number.
//
// The lab's network namespace holds one bridge. On it: the relay addresses (the broker, the package
// server and each Puppet master, relayed to the host's loopback where those services run) and one
// address per machine. Nothing else is on that network and it has no route out.

/** The lab network: 10.77.0.0/16 inside the lab's own namespace (no other host can see it). */
export const LAB_NET = { prefix: 16, bridge: "mbr0", gateway: "10.77.0.1" } as const;

/** Where `muster resource` may put files on a lab machine (the lab's Puppet site makes it). */
export const MACHINE_FILES_DIR = "/srv/muster-lab/files";

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

/**
 * The host side of a machine's veth is named after the machine (`vb-` + 12 characters), so names
 * that agree in their first 12 characters would clash: the lab names machines by number instead.
 */
export function machineName(serial: number): string {
  checkSerial(serial);
  return `lab-m${serial}`;
}

/** NoCloud meta-data: what a cloud's metadata service says of an instance. */
export function metaData(identity: string, instanceId: string): string {
  return toYaml({ "instance-id": instanceId, "local-hostname": identity });
}

/**
 * NoCloud network-config (version 2): the machine's address and no gateway (there is nowhere to
 * go). The interface is `host0` in systemd-nspawn; under QEMU the NIC is matched by its MAC and
 * renamed host0, so one image serves both.
 */
export function networkConfig(address: string, o: { mac?: string } = {}): string {
  const iface: Record<string, unknown> = o.mac ? { match: { macaddress: o.mac }, "set-name": "host0" } : {};
  return toYaml({ version: 2, ethernets: { host0: { ...iface, addresses: [`${address}/${LAB_NET.prefix}`] } } });
}

/** An instance id that changes when a machine under the same name is made anew (cloud-init runs again). */
export function instanceId(identity: string, made: number): string {
  return `${identity}-${made.toString(36)}`;
}
