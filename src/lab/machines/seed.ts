import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { stringify as toYaml } from "yaml";
import { MusterError } from "../../errors.js";
import { MACHINE_FILES_DIR } from "../manifests.js";
import type { LabRegion } from "../regions.js";
import { roleFacts, type LabRole } from "../roles.js";
import { LAB_NET } from "./addresses.js";
import { MUSTER_BIN } from "../processes.js";
import { USER_DATA_COMMAND } from "./packages.js";
import type { LabMachinesState } from "./state.js";
import type { MusterProcess } from "../processes.js";

// A machine's NoCloud seed, as a cloud makes it: meta-data and network-config from the "platform"
// (pure), and user-data from the renderer operators use (`muster user-data`, the command
// docs/deploy.md gives), run with the lab's values.

const execFileP = promisify(execFile);


/** What booting machines into a lab needs (machineBootContext makes it). */
export interface BootMachineContext {
  labDir: string;
  ms: LabMachinesState;
  caCert: string;
  caKey: string;
  provisionerKey: string;
  /** Callers besides the provisioner whose requests machines obey (the operator). */
  trusted: { name: string; key: string }[];
  /** The brokers as nodes name them (the site's three); default the lab's one, through its relay. */
  brokers?: string[];
  /**
   * Names for cloud-init's hosts template (the site's, for a node of another release than the
   * site's): added in the machine's own disk, so the node boots the plain image of its release.
   */
  hosts?: string;
  detached: boolean;
  /** Each process booting a machine starts besides its supervisor (its ssh relay). */
  track: (name: string, p: MusterProcess) => void;
}

/** One machine to boot: who it is, where, its number on the lab network, its role. */
export interface MachinePlan {
  identity: string;
  region: LabRegion;
  serial: number;
  role: LabRole;
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

/** The facts a lab machine starts with (its user-data's --fact flags). */
export function machineFacts(p: MachinePlan): Record<string, string> {
  return { country: p.region.country, ec2_placement_region: p.region.region, ...roleFacts(p.role), muster_lab_kind: "machine" };
}

/** The renderer's command line for this machine (pure): docs/deploy.md's `muster user-data ...`, with the lab's values. */
export function renderArgv(c: BootMachineContext, p: MachinePlan, creds: { ca: string; cert: string; key: string }, sshPub: string): string[] {
  return [
    USER_DATA_COMMAND,
    "--apt-repo",
    c.ms.packages.url,
    "--apt-key",
    c.ms.packages.key,
    ...(c.brokers ?? [c.ms.broker]).flatMap((b) => ["--broker", b]),
    "--ca",
    creds.ca,
    "--identity",
    p.identity,
    "--cert",
    creds.cert,
    "--key",
    creds.key,
    "--provisioner-key",
    c.provisionerKey,
    ...c.trusted.flatMap((t) => ["--trusted-key", `${t.name}=${t.key}`]),
    ...Object.entries(machineFacts(p)).flatMap(([k, v]) => ["--fact", `${k}=${v}`]),
    // `muster resource` may apply file resources there and nowhere else (the lab site makes the directory)
    "--plugin",
    "resource.allowed_types=file",
    "--plugin",
    `resource.file_paths=${MACHINE_FILES_DIR}`,
    "--ssh-authorized-key",
    sshPub,
  ];
}

const shellQuote = (a: string) => (/^[A-Za-z0-9_./:=@%+-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`);

/** The script that shows how a machine's user-data was made (<machine>/render.sh). */
export function renderScript(argv: string[]): string {
  return `#!/bin/sh\n# how this machine's user-data was made (docs/deploy.md)\nmuster ${argv.map(shellQuote).join(" \\\n  ")} > user-data\n`;
}

/** Run the renderer (this muster, as an operator's workstation runs its own): the machine's user-data. */
export async function renderUserData(identity: string, argv: string[]): Promise<string> {
  try {
    return (await execFileP(process.execPath, [MUSTER_BIN, ...argv], { maxBuffer: 4 << 20 })).stdout;
  } catch (e) {
    throw new MusterError("MUSTER_USAGE", `muster ${USER_DATA_COMMAND} failed for ${identity}: ${(e as { stderr?: string }).stderr?.trim() || (e as Error).message}`);
  }
}
