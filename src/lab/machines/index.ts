// The lab's machines, as the rest of muster sees them: the one door into lab/machines. The rest of
// src/lab and `muster lab` import machines only from here (test/lab/structure.test.ts holds that);
// the files behind it are free to change.
//
//   host.ts        what the host must have (root, tools, overlayfs, namespaces)
//   image.ts       the image machines boot (mmdebstrap, cached; image-lock.ts one build at a time), vm.ts its QEMU disk
//   packages.ts    what machines install: the .deb, the lab's signed apt repository, its server
//   network.ts     the lab's network namespace and bridge; relay.ts the relays onto it
//   ssh.ts         the operator's ssh key, config and known hosts for the machines
//   seed.ts        a machine's NoCloud seed (the cloud-init renderer's command line)
//   hosts-template.ts  the site's names in cloud-init's hosts template (image.ts and boot.ts write it)
//   boot.ts        making a machine and powering it on; power.ts its power switch and disk
//   machine.ts     what a machine is on disk; supervisor.ts its power supervisor; story.ts its account of a boot
//   remains.ts     taking the machines' side of a lab down, from its state or from what is left
//   state.ts       what lab.json keeps of the machines
//   addresses.ts   where everything is on the lab network (pure)

import { join, resolve } from "node:path";

export { LAB_NET, masterRelayAddress, nodeSlot, PACKAGE_PORT, RELAY_ADDRESS, siteSlot, type MachineSlot } from "./addresses.js";
export { checkMachineHost, hostRelease } from "./host.js";
export { ensureImage, imageInfo, labImage, machineImageSpec, type MachineImage } from "./image.js";
export { decodeMountPath, keepContinued, machineExec, machineExecArgv, machineExecAsync, machineLeader, machineSupervisor, unmountUnder, type MachineKind } from "./machine.js";
export { MIRROR_PATH } from "./mirror.js";
export { labLinks, labRoutes, makeLabNetwork, netnsPath } from "./network.js";
export { packageServerPort, packagingFile, publishToRepo, startLabPackages, USER_DATA_COMMAND } from "./packages.js";
export { startPackageServer } from "./package-server.js";
export { destroyMachineDisk, powerOffMachine, powerOnMachine } from "./power.js";
export { labRelaySpecs, startRelays, type RelaySpec } from "./relay.js";
export { machineStory } from "./story.js";
export { clearMachineRemains, teardownMachines } from "./remains.js";
export type { BootMachineContext, MachinePlan } from "./seed.js";
export { labSshKey, writeSshConfig } from "./ssh.js";
export { labMachinesState, machineWaiting, type LabMachinesState, type LabNodeMachine, type LabPackages, type MachineNode } from "./state.js";
export { superviseMachine } from "./supervisor.js";
export type { VmImage } from "./vm.js";

// Booting loads what issuing a bootstrap credential needs (the broker's auth rules, and with them
// the NATS client) and the YAML of the seeds: ~20 MB that a machine's supervisor and the package
// server, which come through this door too, never use. So boot.ts loads on first use.
type Boot = typeof import("./boot.js");

/** Make a machine and power it on (boot.ts). */
export const bootLabMachine = async (...a: Parameters<Boot["bootLabMachine"]>): ReturnType<Boot["bootLabMachine"]> => (await import("./boot.js")).bootLabMachine(...a);

/** Boot one machine in its slot with the user-data a renderer command line makes (boot.ts). */
export const bootMachine = async (...a: Parameters<Boot["bootMachine"]>): ReturnType<Boot["bootMachine"]> => (await import("./boot.js")).bootMachine(...a);

/** A machine made anew under a name: its old disk and host key gone (boot.ts). */
export const freshMachineDir = async (...a: Parameters<Boot["freshMachineDir"]>): ReturnType<Boot["freshMachineDir"]> => (await import("./boot.js")).freshMachineDir(...a);

/** Where a machine of the lab keeps its disk, seed and logs. */
export const machineDir = (labDir: string, identity: string) => join(resolve(labDir), "machines", identity);

/** What booting machines into a lab needs (boot.ts). */
export const machineBootContext = async (...a: Parameters<Boot["machineBootContext"]>): Promise<ReturnType<Boot["machineBootContext"]>> => (await import("./boot.js")).machineBootContext(...a);
