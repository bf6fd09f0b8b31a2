import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { issueBootstrapCredential, writeBootstrapCredential } from "../../broker/bootstrap.js";
import { loadOrCreateSigningKey } from "../../security/keys.js";
import { freePort } from "../ports.js";
import type { MusterProcess } from "../processes.js";
import { LAB_NET, nodeSlot, type MachineSlot } from "./addresses.js";
import { HOSTS_TEMPLATE, hostsTemplateWith } from "./hosts-template.js";
import { machineFile, type MachineConfig } from "./machine.js";
import { addTap, netnsPath } from "./network.js";
import { destroyMachineDisk, powerOnMachine } from "./power.js";
import { startRelay } from "./relay.js";
import { instanceId, metaData, networkConfig, renderArgv, renderScript, renderUserData, type BootMachineContext, type MachinePlan } from "./seed.js";
import { forgetHostKey } from "./ssh.js";
import type { LabMachinesState, LabNodeMachine, MachineNode } from "./state.js";
import { prepareVmDisk } from "./vm.js";

// Booting one machine into the lab the way a cloud boots an instance: its bootstrap credential, a
// NoCloud seed whose user-data is what `muster user-data` renders, its disk, an ssh relay
// for the operator, then power on. From there nothing is special: cloud-init installs the package,
// systemd starts muster-server, the provisioner finds the node waiting.

/**
 * What booting machines into this lab needs. Machines obey the provisioner and the operator who
 * runs the lab (their key, made on first use as for any muster command).
 */
export function machineBootContext(labDir: string, ms: LabMachinesState, ca: { cert: string; key: string }, provisionerKey: string, detached: boolean, track: BootMachineContext["track"]): BootMachineContext {
  const operator = loadOrCreateSigningKey();
  return { labDir, ms, caCert: ca.cert, caKey: ca.key, provisionerKey, trusted: [{ name: operator.name, key: operator.publicKey }], detached, track };
}

/**
 * Make a node machine and power it on: its bootstrap credential and its user-data from the
 * renderer's node command, then bootMachine.
 */
export async function bootLabMachine(c: BootMachineContext, p: MachinePlan): Promise<{ node: MachineNode; proc: MusterProcess }> {
  const dir = join(resolve(c.labDir), "machines", p.identity);
  await freshMachineDir(c.ms, dir, p.identity);
  const creds = writeBootstrapCredential(issueBootstrapCredential({ cert: c.caCert, key: c.caKey }, p.identity), join(dir, "creds"));
  const argv = renderArgv(c, p, creds, readFileSync(`${c.ms.ssh.key}.pub`, "utf8").trim());
  const slot = nodeSlot(p.serial);
  const { machine, proc } = await bootMachine(c, { identity: p.identity, slot, argv });
  return { node: { identity: p.identity, country: p.region.country, region: p.region.region, ipaddress: slot.address, dir, pid: proc.pid, role: p.role, machine }, proc };
}


/** A machine made anew under a name: nothing of an earlier one survives, not even its host key. */
export async function freshMachineDir(ms: LabMachinesState, dir: string, identity: string): Promise<void> {
  if (existsSync(dir)) await destroyMachineDisk(dir);
  forgetHostKey(ms, identity);
  // its credentials and user-data (which carries them) are the machine's secrets: root only
  mkdirSync(join(dir, "seed"), { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
}

/**
 * The image's hosts template with `lines` added, in the machine's upper layer: what the image build
 * bakes in for the site's own release (image.ts), given to one machine instead. The directories
 * made on the way have the image's modes (root's, 0755), so nothing of the image is hidden.
 */
function addHostsLines(imageRoot: string, dir: string, lines: string): void {
  const tmpl = join(dir, "upper", HOSTS_TEMPLATE);
  mkdirSync(dirname(tmpl), { recursive: true, mode: 0o755 });
  writeFileSync(tmpl, hostsTemplateWith(readFileSync(join(imageRoot, HOSTS_TEMPLATE), "utf8"), lines), { mode: 0o644 });
}

/**
 * Boot one machine in its slot with the user-data `argv` renders (the renderer's command line,
 * kept as render.sh): its NoCloud seed (meta-data and network-config from the "platform",
 * user-data from the renderer), its disk, an ssh relay for the operator, then power on. The caller
 * keeps `proc`, the machine's power; its ssh relay goes to `c.track`.
 */
export async function bootMachine(c: BootMachineContext, o: { identity: string; slot: MachineSlot; argv?: string[]; userData?: string; hostname?: string }): Promise<{ machine: LabNodeMachine; proc: MusterProcess }> {
  const { ms } = c;
  const { slot } = o;
  const dir = join(resolve(c.labDir), "machines", o.identity);
  mkdirSync(join(dir, "seed"), { recursive: true, mode: 0o700 });
  if (o.argv) writeFileSync(join(dir, "render.sh"), renderScript(o.argv), { mode: 0o700 });
  // user-data rendered here from the renderer's command line, or given whole (made as an operator made it)
  const userData = o.userData ?? (await renderUserData(o.identity, o.argv ?? []));
  // the host name its "cloud" gives it: its identity, unless the cloud gives a short one
  const seed = { "meta-data": metaData(o.hostname ?? o.identity, instanceId(o.identity, Date.now())), "network-config": networkConfig(slot.address, ms.kind === "vm" ? { mac: slot.mac } : {}), "user-data": userData };
  for (const [f, text] of Object.entries(seed)) writeFileSync(join(dir, "seed", f), text, { mode: 0o600 });

  const cfg: MachineConfig = {
    identity: o.identity,
    serial: slot.serial,
    kind: ms.kind,
    image: ms.kind === "vm" ? ms.vmImage!.disk : ms.image,
    netns: netnsPath(ms.netns),
    bridge: LAB_NET.bridge,
    address: slot.address,
    mac: slot.mac,
    name: slot.name,
  };
  if (ms.kind === "nspawn") {
    // The NoCloud seed is a directory in the machine, as on a cloud whose seed is baked into the disk.
    const seedDir = join(dir, "upper", "var", "lib", "cloud", "seed", "nocloud");
    // Only the seed itself root-only: a directory made in the overlay's upper layer hides the
    // image's own modes, and a /var or /var/lib of 0700 stops every service that is not root.
    mkdirSync(seedDir, { recursive: true });
    chmodSync(seedDir, 0o700);
    for (const [f, text] of Object.entries(seed)) writeFileSync(join(seedDir, f), text, { mode: 0o600 });
    if (c.hosts) addHostsLines(ms.image, dir, c.hosts);
  } else {
    cfg.vm = { ...(await prepareVmDisk(dir, ms.vmImage!, slot.tap)), monitor: join(ms.socketDir, `${cfg.name}.monitor`) };
    addTap(ms.netns, cfg.vm.tap);
  }
  writeFileSync(machineFile(dir), JSON.stringify(cfg, null, 2));

  // The operator's way in: sshd on the machine, relayed to a loopback address of the host.
  const sshPort = await freePort(slot.sshAlias);
  const relay = await startRelay({ name: `ssh-${slot.name}`, listen: { host: slot.sshAlias, port: sshPort }, target: { host: slot.address, port: 22, netns: netnsPath(ms.netns) } }, ms.socketDir, { logFile: join(dir, "ssh-relay.log"), detached: c.detached });
  relay.procs.forEach((pr, i) => c.track(`relay ssh-${slot.name} ${i}`, pr));

  const proc = powerOnMachine(dir, c.detached);
  return { machine: { kind: ms.kind, dir, ssh: { host: slot.sshAlias, port: sshPort }, relayPids: relay.pids, poweredOnAt: Date.now(), release: ms.imageKey.split("-")[0] }, proc };
}
