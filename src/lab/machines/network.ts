import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { MusterError } from "../../errors.js";
import { LAB_NET, labNetnsName, labSocketDir, masterRelayAddress, NETWORKS_DIR, RELAY_ADDRESS } from "./addresses.js";

// The lab's own network: a network namespace holding one bridge, the relay addresses on it, and
// nothing else. No interface leads out of it and it has no default route, so nothing a machine
// does can send a packet anywhere but to another machine or a relay.

export const netnsPath = (name: string) => `/run/netns/${name}`;

function ip(args: string[], okIf?: RegExp): void {
  const r = spawnSync("ip", args, { encoding: "utf8" });
  if (r.error) throw new MusterError("MUSTER_USAGE", `cannot run ip (${r.error.message}): apt-get install iproute2`);
  if (r.status !== 0 && !(okIf && okIf.test(r.stderr))) throw new MusterError("MUSTER_USAGE", `ip ${args.join(" ")}: ${r.stderr.trim()}`);
}

/** Create (or complete) the lab network: namespace, loopback, bridge and the relay addresses. */
export function createLabNetwork(name: string, addresses: string[]): string {
  if (!existsSync(netnsPath(name))) ip(["netns", "add", name], /exists/);
  ip(["-n", name, "link", "set", "lo", "up"]);
  // forward_delay 0: a machine's port forwards as soon as it is plugged in (no STP on a one-bridge network)
  ip(["-n", name, "link", "add", LAB_NET.bridge, "type", "bridge", "forward_delay", "0"], /exists/);
  for (const a of addresses) ip(["-n", name, "addr", "add", `${a}/${LAB_NET.prefix}`, "dev", LAB_NET.bridge], /exists/);
  ip(["-n", name, "link", "set", LAB_NET.bridge, "up"]);
  return netnsPath(name);
}

/** A tap device on the bridge for a QEMU machine. */
export function addTap(name: string, tap: string): void {
  ip(["-n", name, "tuntap", "add", "dev", tap, "mode", "tap"], /exists|busy/i);
  ip(["-n", name, "link", "set", tap, "master", LAB_NET.bridge, "up"]);
}

export function removeTap(name: string, tap: string): void {
  if (existsSync(netnsPath(name))) ip(["-n", name, "link", "del", tap], /Cannot find|not exist/);
}

/** Remove the namespace (and with it the bridge and every veth and tap still on it). */
export function deleteLabNetwork(name: string): void {
  if (existsSync(netnsPath(name))) ip(["netns", "delete", name], /No such file/);
}

/** Processes in the namespace (ip netns pids): a namespace with none serves no machine or relay. */
export function netnsPids(name: string): number[] {
  const r = spawnSync("ip", ["netns", "pids", name], { encoding: "utf8" });
  return r.stdout.split("\n").filter(Boolean).map(Number);
}

/** Routes in the lab namespace (what the tests check: no default route, nothing leads out). */
export function labRoutes(name: string): string[] {
  const r = spawnSync("ip", ["-n", name, "-4", "route", "show"], { encoding: "utf8" });
  return r.stdout.split("\n").filter(Boolean);
}

/** Interfaces in the lab namespace, by name. */
export function labLinks(name: string): string[] {
  const r = spawnSync("ip", ["-n", name, "-o", "link", "show"], { encoding: "utf8" });
  return r.stdout
    .split("\n")
    .filter(Boolean)
    .map((l) => l.split(":")[1]!.trim().split("@")[0]!);
}

/**
 * The lab's network: its namespace, the bridge and the relay addresses (the broker's and the
 * package server's, and one per master), and a directory for the relays' sockets that says whose
 * network it is (clearAbandonedNetworks reads it).
 */
export function makeLabNetwork(labDir: string, masters: number, progress: (l: string) => void): { netns: string; socketDir: string } {
  const dir = resolve(labDir);
  const netns = labNetnsName(dir);
  clearAbandonedNetworks(progress);
  const socketDir = labSocketDir(netns);
  // whose network this is, written first, for clearAbandonedNetworks
  mkdirSync(socketDir, { recursive: true, mode: 0o700 });
  writeFileSync(join(socketDir, "lab-dir"), `${dir}\n`);
  createLabNetwork(netns, [RELAY_ADDRESS, ...Array.from({ length: masters }, (_, i) => masterRelayAddress(i))]);
  return { netns, socketDir };
}

/**
 * A lab whose test run was killed outright leaves its network namespace behind (its machines and
 * relays are stopped by their watchdogs). One whose lab directory is gone and that holds no
 * process serves nothing: remove it.
 */
export function clearAbandonedNetworks(progress: (l: string) => void): void {
  if (!existsSync(NETWORKS_DIR)) return;
  for (const ns of readdirSync(NETWORKS_DIR)) {
    let labDir: string;
    try {
      labDir = readFileSync(join(NETWORKS_DIR, ns, "lab-dir"), "utf8").trim();
    } catch {
      continue; // not ours, or not finished being made
    }
    if (existsSync(labDir) || netnsPids(ns).length) continue;
    deleteLabNetwork(ns);
    rmSync(join(NETWORKS_DIR, ns), { recursive: true, force: true });
    progress(`removed the network of a lab that is gone (${ns}, was ${labDir})`);
  }
}
