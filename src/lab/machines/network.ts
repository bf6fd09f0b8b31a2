import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { MusterError } from "../../errors.js";
import { LAB_NET } from "./plan.js";

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
