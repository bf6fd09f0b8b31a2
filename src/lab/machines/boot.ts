import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { issueBootstrapCredential, writeBootstrapCredential } from "../../broker/bootstrap.js";
import { loadOrCreateSigningKey } from "../../security/keys.js";
import { freePort } from "../ports.js";
import type { MusterProcess } from "../processes.js";
import { LAB_NET, machineAddress, machineMac, machineName, machineSshAlias } from "./addresses.js";
import { machineFile, type MachineConfig } from "./machine.js";
import { addTap, netnsPath } from "./network.js";
import { destroyMachineDisk, powerOnMachine } from "./power.js";
import { startRelay } from "./relay.js";
import { instanceId, metaData, networkConfig, renderArgv, renderScript, renderUserData, type BootMachineContext, type MachinePlan } from "./seed.js";
import { forgetHostKey } from "./ssh.js";
import type { LabMachinesState, MachineNode } from "./state.js";
import { prepareVmDisk } from "./vm.js";

// Booting one machine into the lab the way a cloud boots an instance: its bootstrap credential, a
// NoCloud seed whose user-data is what packaging/cloud-init.mjs renders, its disk, an ssh relay
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
 * Make a machine and power it on: its bootstrap credential, its NoCloud seed (meta-data and
 * network-config from the "platform", user-data from the renderer), its disk, and its supervisor
 * (`proc`: the machine's power, which the caller keeps; its ssh relay goes to `c.track`).
 */
export async function bootLabMachine(c: BootMachineContext, p: MachinePlan): Promise<{ node: MachineNode; proc: MusterProcess }> {
  const { ms } = c;
  const dir = join(resolve(c.labDir), "machines", p.identity);
  if (existsSync(dir)) await destroyMachineDisk(dir);
  forgetHostKey(ms, p.identity);
  // its bootstrap credential and user-data (which carries it) are the machine's secrets: root only
  mkdirSync(join(dir, "seed"), { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  const creds = writeBootstrapCredential(issueBootstrapCredential({ cert: c.caCert, key: c.caKey }, p.identity), join(dir, "creds"));
  const argv = renderArgv(c, p, creds, readFileSync(`${c.ms.ssh.key}.pub`, "utf8").trim());
  writeFileSync(join(dir, "render.sh"), renderScript(argv), { mode: 0o700 });
  const userData = await renderUserData(p.identity, argv);
  const address = machineAddress(p.serial);
  const mac = machineMac(p.serial);
  const seed = { "meta-data": metaData(p.identity, instanceId(p.identity, Date.now())), "network-config": networkConfig(address, c.ms.kind === "vm" ? { mac } : {}), "user-data": userData };
  for (const [f, text] of Object.entries(seed)) writeFileSync(join(dir, "seed", f), text, { mode: 0o600 });

  const cfg: MachineConfig = {
    identity: p.identity,
    serial: p.serial,
    kind: ms.kind,
    image: ms.kind === "vm" ? ms.vmImage!.disk : ms.image,
    netns: netnsPath(ms.netns),
    bridge: LAB_NET.bridge,
    address,
    mac,
    name: machineName(p.serial),
  };
  if (ms.kind === "nspawn") {
    // The NoCloud seed is a directory in the machine, as on a cloud whose seed is baked into the disk.
    const seedDir = join(dir, "upper", "var", "lib", "cloud", "seed", "nocloud");
    // Only the seed itself root-only: a directory made in the overlay's upper layer hides the
    // image's own modes, and a /var or /var/lib of 0700 stops every service that is not root.
    mkdirSync(seedDir, { recursive: true });
    chmodSync(seedDir, 0o700);
    for (const [f, text] of Object.entries(seed)) writeFileSync(join(seedDir, f), text, { mode: 0o600 });
  } else {
    cfg.vm = { ...(await prepareVmDisk(dir, ms.vmImage!, p.serial)), monitor: join(ms.socketDir, `${cfg.name}.monitor`) };
    addTap(ms.netns, cfg.vm.tap);
  }
  writeFileSync(machineFile(dir), JSON.stringify(cfg, null, 2));

  // The operator's way in: sshd on the machine, relayed to a loopback address of the host.
  const sshHost = machineSshAlias(p.serial);
  const sshPort = await freePort(sshHost);
  const relay = await startRelay({ name: `ssh-${p.serial}`, listen: { host: sshHost, port: sshPort }, target: { host: address, port: 22, netns: netnsPath(ms.netns) } }, ms.socketDir, { logFile: join(dir, "ssh-relay.log"), detached: c.detached });
  relay.procs.forEach((pr, i) => c.track(`relay ssh-${p.serial} ${i}`, pr));

  const proc = powerOnMachine(dir, c.detached);
  return {
    node: { identity: p.identity, country: p.region.country, region: p.region.region, ipaddress: address, dir, pid: proc.pid, role: p.role, machine: { kind: ms.kind, dir, ssh: { host: sshHost, port: sshPort }, relayPids: relay.pids, poweredOnAt: Date.now() } },
    proc,
  };
}
