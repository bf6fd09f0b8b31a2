import { execFile, execFileSync, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { issueBootstrapCredential, writeBootstrapCredential } from "../../broker/bootstrap.js";
import { MusterError } from "../../errors.js";
import { loadOrCreateSigningKey } from "../../security/keys.js";
import type { LabRole } from "../manifests.js";
import { roleFacts } from "../manifests.js";
import { waitForPort } from "../nats.js";
import { freePort } from "../ports.js";
import { isAlive, spawnMuster, stopPid, type MusterProcess } from "../processes.js";
import type { LabRegion } from "../regions.js";
import { ensureImage, hostRelease, machineImageSpec, requireTools, type MachineImage } from "./image.js";
import { isMounted, machineFile, machineLeader, machineSupervisor, powerCut, unmountRoot, unmountUnder, type MachineConfig, type MachineKind } from "./machine.js";
import { addTap, createLabNetwork, deleteLabNetwork, netnsPath, netnsPids, removeTap } from "./network.js";
import { instanceId, LAB_NET, MACHINE_FILES_DIR, labNetnsName, machineAddress, machineMac, machineName, machineSshAlias, masterRelayAddress, metaData, networkConfig, PACKAGE_PORT, RELAY_ADDRESS } from "./plan.js";
import { startRelay, type Relay, type RelaySpec } from "./relay.js";

// The lab's machines as a whole: their network and relays, the package server, and booting one
// machine into the lab the way a cloud boots an instance: a NoCloud seed whose user-data is what
// packaging/cloud-init.mjs renders (the command docs/deploy.md gives operators), then power on.
// From there nothing is special: cloud-init installs the package, systemd starts muster-server, the
// provisioner finds the node waiting.

const execFileP = promisify(execFile);
const REPO = fileURLToPath(new URL("../../../../", import.meta.url));
/** The renderer operators use (docs/deploy.md#4-nodes). */
export const CLOUD_INIT_RENDERER = join(REPO, "packaging", "cloud-init.mjs");

export interface LabMachinesState {
  kind: MachineKind;
  /** The lab's network namespace (its name; /run/netns/<name>). */
  netns: string;
  /** The image every machine boots from (nspawn: a root directory). */
  image: string;
  imageKey: string;
  /** vm: the base disk, kernel and initramfs. */
  vmImage?: { disk: string; kernel: string; initrd: string };
  /**
   * What machines install from: a signed apt repository (packaging/apt-repo.mjs, as `npm run
   * package` writes one) in the package server's directory, holding the .deb the lab was started
   * with and any published since (`muster lab publish`). `url` is the repository as machines see it.
   */
  packages: { dir: string; deb: string; url: string; key: string; gnupgHome: string; hostUrl: string; pid: number; log: string };
  /** The broker as machines reach it (through the relay). */
  broker: string;
  relays: { name: string; pids: number[]; listen: string; target: string }[];
  /** Unix sockets of the relays: short, so it lives under /run. */
  socketDir: string;
  /** The lab's SSH key (root on every machine) and the ssh_config that names the machines. */
  ssh: { key: string; config: string; knownHosts: string };
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
  /** When it first answered in the provisioning collective: booted, package installed, muster-server up. */
  waitingAt?: number;
}

/** Note that a machine answers in the provisioning collective; returns the line to tell the operator. */
export function machineWaiting(n: { identity: string; machine?: LabNodeMachine }): string {
  const m = n.machine!;
  m.waitingAt ??= Date.now();
  return `${n.identity} is waiting to be provisioned (${((m.waitingAt - m.poweredOnAt) / 1000).toFixed(1)} s after power on: booted, cloud-init installed the package, muster-server up)`;
}

export interface MachineLabOptions {
  labDir: string;
  kind: MachineKind;
  /** The .deb machines install (npm run package); built into the lab when absent. */
  deb?: string;
  /** Where images are cached (default <cwd>/.muster/images). */
  imageCache?: string;
  natsPort: number;
  masters: { host: string; port: number }[];
  detached: boolean;
  track: (name: string, p: MusterProcess) => void;
  progress: (line: string) => void;
}

/** Host tools the machines need, by the Debian package that has them. */
export function machineTools(kind: MachineKind): Record<string, string> {
  return {
    ...(kind === "nspawn" ? { "systemd-nspawn": "systemd-container" } : { "qemu-system-x86_64": "qemu-system-x86", "qemu-img": "qemu-utils", "cloud-localds": "cloud-image-utils" }),
    mmdebstrap: "mmdebstrap",
    socat: "socat",
    ip: "iproute2",
    nsenter: "util-linux",
    "ssh-keygen": "openssh-client",
    ssh: "openssh-client",
  };
}

/** Check before anything starts that this host can run machines: root, the tools, overlayfs. */
export function checkMachineHost(kind: MachineKind): void {
  if (process.getuid?.() !== 0) throw new MusterError("MUSTER_USAGE", "lab machines need root (network namespaces, overlay mounts, systemd-nspawn/qemu): run `muster lab up --machines N` as root, or use process nodes (--nodes N)");
  requireTools(machineTools(kind));
  if (kind === "nspawn" && !readFileSync("/proc/filesystems", "utf8").includes("overlay")) {
    throw new MusterError("MUSTER_USAGE", "lab machines boot from overlayfs copies of one image, and this kernel has no overlay file system (modprobe overlay)");
  }
  // Root is not always enough (a container without CAP_SYS_ADMIN): try what the lab does first.
  const probe = spawnSync("unshare", ["--net", "--mount", "true"], { encoding: "utf8" });
  if (probe.status !== 0) {
    throw new MusterError("MUSTER_USAGE", `lab machines need network and mount namespaces, and this host refuses them (\`unshare --net --mount true\`: ${(probe.stderr || probe.error?.message || `exit ${probe.status}`).trim()}); in a container, give it CAP_SYS_ADMIN, or use process nodes (--nodes N)`);
  }
}

/** Build the package machines install, when the operator named none (gzip: the contents are the release's). */
export async function buildLabPackage(outDir: string, progress: (l: string) => void): Promise<string> {
  progress("building the package machines install (node packaging/build-deb.mjs --compress gzip); about 30 s");
  const r = await execFileP(process.execPath, [join(REPO, "packaging", "build-deb.mjs"), "--out", outDir, "--compress", "gzip"], { maxBuffer: 64 << 20 });
  const deb = r.stdout.trim().split("\n").at(-1)!;
  if (!deb.endsWith(".deb") || !existsSync(deb)) throw new MusterError("MUSTER_USAGE", `packaging/build-deb.mjs did not print a .deb path (it printed ${JSON.stringify(deb)})`);
  return deb;
}

/** The image for this kind of machine, built on first use. */
export async function labImage(kind: MachineKind, cacheDir: string, progress: (l: string) => void): Promise<{ image: MachineImage; vm?: LabMachinesState["vmImage"] }> {
  const host = hostRelease();
  const image = await ensureImage(cacheDir, machineImageSpec({ ...host, vm: kind === "vm" }), progress);
  if (kind !== "vm") return { image };
  const { vmDisk } = await import("./vm.js");
  return { image, vm: await vmDisk(image, progress) };
}

/**
 * The machines' network, relays and package server. Services stay on the host's loopback; the
 * relays put the broker, the package server and each master on the lab bridge.
 */
export async function prepareMachines(o: MachineLabOptions, image: { image: MachineImage; vm?: LabMachinesState["vmImage"] }): Promise<LabMachinesState> {
  const dir = resolve(o.labDir);
  const netns = labNetnsName(dir);
  clearAbandonedNetworks(o.progress);
  const masterAddrs = o.masters.map((_, i) => masterRelayAddress(i));
  const socketDir = `/run/muster-lab/${netns}`;
  const started: MusterProcess[] = [];
  const track = (name: string, p: MusterProcess) => (started.push(p), o.track(name, p));
  try {
    // whose network this is, written first, for clearAbandonedNetworks
    mkdirSync(socketDir, { recursive: true, mode: 0o700 });
    writeFileSync(join(socketDir, "lab-dir"), `${dir}\n`);
    createLabNetwork(netns, [RELAY_ADDRESS, ...masterAddrs]);
    mkdirSync(join(dir, "logs"), { recursive: true });
    return await prepareOnNetwork({ ...o, track }, image, dir, netns, socketDir, masterAddrs);
  } catch (e) {
    // nothing half-made stays: what started, the network, the relays' sockets
    await Promise.all(started.map((p) => p.stop().catch(() => undefined)));
    deleteLabNetwork(netns);
    rmSync(socketDir, { recursive: true, force: true });
    throw e;
  }
}

async function prepareOnNetwork(o: MachineLabOptions, image: { image: MachineImage; vm?: LabMachinesState["vmImage"] }, dir: string, netns: string, socketDir: string, masterAddrs: string[]): Promise<LabMachinesState> {
  // The package server: the .deb (and, once built, an apt repository) on loopback.
  const pkgDir = join(dir, "packages");
  mkdirSync(pkgDir, { recursive: true });
  const deb = o.deb ? resolve(o.deb) : await buildLabPackage(join(dir, "build"), o.progress);
  const gnupgHome = join(dir, "apt-signing");
  const repo = await publishToRepo(join(pkgDir, "apt"), gnupgHome, deb);
  const pkgPort = await freePort("127.0.0.1");
  const pkgLog = join(dir, "logs", "packages.log");
  const server = spawnMuster(["lab", "serve-packages", "--dir", pkgDir, "--port", String(pkgPort)], { logFile: pkgLog, detached: o.detached });
  o.track("package server", server);
  await waitForPackageServer(pkgPort, server, pkgLog);

  const ns = netnsPath(netns);
  const specs: RelaySpec[] = [
    { name: "broker", listen: { host: RELAY_ADDRESS, port: o.natsPort, netns: ns }, target: { host: "127.0.0.1", port: o.natsPort } },
    { name: "packages", listen: { host: RELAY_ADDRESS, port: PACKAGE_PORT, netns: ns }, target: { host: "127.0.0.1", port: pkgPort } },
    ...o.masters.map((m, i) => ({ name: `master-${i + 1}`, listen: { host: masterAddrs[i]!, port: m.port, netns: ns }, target: { host: m.host, port: m.port } })),
  ];
  const relays: Relay[] = [];
  for (const spec of specs) {
    const r = await startRelay(spec, socketDir, { logFile: join(dir, "logs", `relay-${spec.name}.log`), detached: o.detached });
    r.procs.forEach((p, i) => o.track(`relay ${spec.name} ${i}`, p));
    relays.push(r);
  }
  o.progress(`lab network ${netns}: bridge ${LAB_NET.bridge} ${RELAY_ADDRESS}/${LAB_NET.prefix}, relays for the broker, the package server and ${o.masters.length} masters; no route out`);

  const ssh = labSshKey(dir);
  return {
    kind: o.kind,
    netns,
    image: image.image.root,
    imageKey: image.image.key,
    ...(image.vm ? { vmImage: image.vm } : {}),
    packages: { dir: pkgDir, deb: basename(deb), url: `http://${RELAY_ADDRESS}:${PACKAGE_PORT}/apt`, key: repo.key, gnupgHome, hostUrl: `http://127.0.0.1:${pkgPort}/`, pid: server.pid, log: pkgLog },
    broker: `tls://${RELAY_ADDRESS}:${o.natsPort}`,
    relays: relays.map((r) => ({ name: r.spec.name, pids: r.pids, listen: `${r.spec.listen.host}:${r.spec.listen.port}`, target: `${r.spec.target.host}:${r.spec.target.port}` })),
    socketDir,
    ssh,
  };
}

/** Resolves once the package server listens; rejects, pointing at its log, if it exits first or stays silent. */
async function waitForPackageServer(port: number, server: MusterProcess, log: string): Promise<void> {
  const died = server.exited.then((code) => Promise.reject(new MusterError("MUSTER_USAGE", `the lab's package server exited (${code}) before it listened (see ${log})`)));
  died.catch(() => undefined); // it may also exit later, when the lab stops
  const listening = waitForPort("127.0.0.1", port, 15_000).catch(() => Promise.reject(new MusterError("MUSTER_TIMEOUT", `the lab's package server did not listen on 127.0.0.1:${port} within 15 s (see ${log})`)));
  await Promise.race([listening, died]);
}

/**
 * Add a .deb to the lab's apt repository and sign it again (packaging/apt-repo.mjs, with the lab's
 * own signing key, made on first use): machines get it with `apt-get update && apt-get upgrade`.
 */
export async function publishToRepo(repo: string, gnupgHome: string, deb: string): Promise<{ repo: string; key: string }> {
  try {
    await execFileP(process.execPath, [join(REPO, "packaging", "apt-repo.mjs"), "--repo", repo, "--gnupg-home", gnupgHome, deb], { maxBuffer: 16 << 20 });
  } catch (e) {
    throw new MusterError("MUSTER_USAGE", `packaging/apt-repo.mjs could not add ${deb} to the lab's repository: ${(e as { stderr?: string }).stderr?.trim() || (e as Error).message}`);
  }
  return { repo, key: join(repo, "muster-archive-keyring.asc") };
}

/** The lab's SSH key pair (made once) and the files ssh reads for the machines. */
function labSshKey(dir: string): LabMachinesState["ssh"] {
  const sshDir = join(dir, "ssh");
  mkdirSync(sshDir, { recursive: true, mode: 0o700 });
  const key = join(sshDir, "id_ed25519");
  if (!existsSync(key)) execFileSync("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "muster-lab", "-f", key], { stdio: "ignore" });
  const config = join(sshDir, "config");
  const knownHosts = join(sshDir, "known_hosts");
  if (!existsSync(config)) writeFileSync(config, "# muster lab: the machines, as the operator's ssh reaches them (rewritten as machines come and go)\n");
  return { key, config, knownHosts };
}

/**
 * A lab whose test run was killed outright leaves its network namespace behind (its machines and
 * relays are stopped by their watchdogs). One whose lab directory is gone and that holds no
 * process serves nothing: remove it.
 */
export function clearAbandonedNetworks(progress: (l: string) => void): void {
  const base = "/run/muster-lab";
  if (!existsSync(base)) return;
  for (const ns of readdirSync(base)) {
    let labDir: string;
    try {
      labDir = readFileSync(join(base, ns, "lab-dir"), "utf8").trim();
    } catch {
      continue; // not ours, or not finished being made
    }
    if (existsSync(labDir) || netnsPids(ns).length) continue;
    deleteLabNetwork(ns);
    rmSync(join(base, ns), { recursive: true, force: true });
    progress(`removed the network of a lab that is gone (${ns}, was ${labDir})`);
  }
}

/**
 * The ssh_config naming every machine (pure): `ssh -F <config> node01.eu.lab`. Host keys are known
 * by identity (HostKeyAlias), not by the loopback relay's address and port, which change.
 */
export function sshConfigText(ssh: LabMachinesState["ssh"], nodes: { identity: string; machine?: LabNodeMachine }[]): string {
  const blocks = nodes
    .filter((n) => n.machine)
    .map((n) =>
      [
        `Host ${n.identity}`,
        `  HostName ${n.machine!.ssh.host}`,
        `  Port ${n.machine!.ssh.port}`,
        `  HostKeyAlias ${n.identity}`,
        "  User root",
        `  IdentityFile ${ssh.key}`,
        "  IdentitiesOnly yes",
        `  UserKnownHostsFile ${ssh.knownHosts}`,
        // each machine makes its host keys on first boot: learnt on first contact, refused if they
        // change; a machine made again under a name is forgotten first (forgetHostKey)
        "  StrictHostKeyChecking accept-new",
        "  LogLevel ERROR",
        "",
      ].join("\n"),
    );
  return `# muster lab: the machines, as the operator's ssh reaches them (rewritten as machines come and go)\n\n${blocks.join("\n")}`;
}

/** Rewrite the ssh_config naming every machine (muster ssh uses it). */
export function writeSshConfig(ms: LabMachinesState, nodes: { identity: string; machine?: LabNodeMachine }[]): void {
  writeFileSync(ms.ssh.config, sshConfigText(ms.ssh, nodes));
}

/** Forget a machine's host key: a new machine under that name makes new keys on its first boot. */
export function forgetHostKey(ms: LabMachinesState, identity: string): void {
  if (existsSync(ms.ssh.knownHosts)) spawnSync("ssh-keygen", ["-q", "-f", ms.ssh.knownHosts, "-R", identity], { stdio: "ignore" });
}

export interface BootMachineContext {
  labDir: string;
  ms: LabMachinesState;
  caCert: string;
  caKey: string;
  provisionerKey: string;
  /** Callers besides the provisioner whose requests machines obey (the operator). */
  trusted: { name: string; key: string }[];
  detached: boolean;
  track: (name: string, p: MusterProcess) => void;
}

export interface MachinePlan {
  identity: string;
  region: LabRegion;
  serial: number;
  role: LabRole;
}

/**
 * What booting machines into this lab needs. Machines obey the provisioner and the operator who
 * runs the lab (their key, made on first use as for any muster command).
 */
export function machineBootContext(labDir: string, ms: LabMachinesState, ca: { cert: string; key: string }, provisionerKey: string, detached: boolean, track: BootMachineContext["track"]): BootMachineContext {
  const operator = loadOrCreateSigningKey();
  return { labDir, ms, caCert: ca.cert, caKey: ca.key, provisionerKey, trusted: [{ name: operator.name, key: operator.publicKey }], detached, track };
}

/** The facts a lab machine starts with (its user-data's --fact flags). */
export function machineFacts(p: MachinePlan): Record<string, string> {
  return { country: p.region.country, ec2_placement_region: p.region.region, ...roleFacts(p.role), muster_lab_kind: "machine" };
}

/** The renderer's command line for this machine (pure): docs/deploy.md's, with the lab's values. */
export function renderArgv(c: BootMachineContext, p: MachinePlan, creds: { ca: string; cert: string; key: string }, sshPub: string): string[] {
  return [
    CLOUD_INIT_RENDERER,
    "--apt-repo",
    c.ms.packages.url,
    "--apt-key",
    c.ms.packages.key,
    "--broker",
    c.ms.broker,
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

/**
 * Make a machine and power it on: its bootstrap credential, its NoCloud seed (meta-data and
 * network-config from the "platform", user-data from the renderer), its disk, and its supervisor.
 */
export async function bootLabMachine(c: BootMachineContext, p: MachinePlan): Promise<{ node: { identity: string; country: string; region: string; ipaddress: string; dir: string; pid: number; role: LabRole; machine: LabNodeMachine }; proc: MusterProcess }> {
  const { ms } = c;
  const dir = join(resolve(c.labDir), "machines", p.identity);
  if (existsSync(dir)) await destroyMachineDisk(dir);
  forgetHostKey(ms, p.identity);
  // its bootstrap credential and user-data (which carries it) are the machine's secrets: root only
  mkdirSync(join(dir, "seed"), { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  const creds = writeBootstrapCredential(issueBootstrapCredential({ cert: c.caCert, key: c.caKey }, p.identity), join(dir, "creds"));
  const argv = renderArgv(c, p, creds, readFileSync(`${c.ms.ssh.key}.pub`, "utf8").trim());
  writeFileSync(join(dir, "render.sh"), `#!/bin/sh\n# how this machine's user-data was made (docs/deploy.md#4-nodes)\nnode ${argv.map(shellQuote).join(" \\\n  ")} > user-data\n`, { mode: 0o700 });
  let userData: string;
  try {
    userData = (await execFileP(process.execPath, argv, { maxBuffer: 4 << 20 })).stdout;
  } catch (e) {
    throw new MusterError("MUSTER_USAGE", `packaging/cloud-init.mjs failed for ${p.identity}: ${(e as { stderr?: string }).stderr?.trim() || (e as Error).message}`);
  }
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
    const { prepareVmDisk } = await import("./vm.js");
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
  c.track(p.identity, proc);
  return {
    node: { identity: p.identity, country: p.region.country, region: p.region.region, ipaddress: address, dir, pid: proc.pid, role: p.role, machine: { kind: ms.kind, dir, ssh: { host: sshHost, port: sshPort }, relayPids: relay.pids, poweredOnAt: Date.now() } },
    proc,
  };
}

/** Power a machine on: its supervisor boots it (and boots it again when it reboots). */
export function powerOnMachine(dir: string, detached: boolean): MusterProcess {
  if (machineLeader(dir) || machineSupervisor(dir)) throw new MusterError("MUSTER_USAGE", `${basename(dir)} is already running`);
  return spawnMuster(["lab", "machine-run", dir], { logFile: join(dir, "supervisor.log"), detached });
}

/**
 * Power a machine off and wait until it is off: cleanly (the machine shuts down) or, with `cut`,
 * by cutting the power. A clean shutdown that takes longer than `graceMs` becomes a cut. Works
 * when the supervisor is gone too (killed outright): the machine is cut and its root unmounted.
 */
export async function powerOffMachine(dir: string, supervisorPid?: number, o: { cut?: boolean; graceMs?: number } = {}): Promise<void> {
  const sup = machineSupervisor(dir) ?? (supervisorPid && isAlive(supervisorPid) ? supervisorPid : undefined);
  if (o.cut || !sup) powerCut(dir);
  else process.kill(sup, "SIGTERM");
  const deadline = Date.now() + (o.graceMs ?? 60_000);
  const on = () => (sup !== undefined && isAlive(sup)) || machineLeader(dir) !== undefined;
  while (on() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100)); // not our child when detached: no exit event
  if (on()) {
    powerCut(dir);
    if (sup) await stopPid(sup, 10_000);
  }
  unmountRoot(dir); // the supervisor does it, unless it was killed
}

/** Delete a powered-off machine's disk and everything else of it (as a cloud deletes a terminated instance's volume). */
export async function destroyMachineDisk(dir: string): Promise<void> {
  powerCut(dir);
  unmountRoot(dir);
  const root = join(dir, "root");
  if (existsSync(root) && isMounted(root)) throw new MusterError("MUSTER_USAGE", `${root} is still mounted; not deleting through it (umount it, then try again)`);
  rmSync(dir, { recursive: true, force: true });
}

/**
 * What a lab that died (or whose `lab up` was interrupted before it wrote its state) leaves of
 * its machines: each one off and unmounted, its network and relays' sockets gone. Safe to call
 * on a lab that stopped cleanly: nothing is left to do.
 */
export async function clearMachineRemains(labDir: string): Promise<string[]> {
  const dir = resolve(labDir);
  const cleared: string[] = [];
  const machines = join(dir, "machines");
  if (existsSync(machines)) {
    await Promise.all(
      readdirSync(machines).map(async (d) => {
        const m = join(machines, d);
        if (!machineSupervisor(m) && !machineLeader(m)) return;
        await powerOffMachine(m, undefined, { graceMs: 20_000 });
        cleared.push(`machine ${d}`);
      }),
    );
    unmountUnder(machines);
  }
  const netns = labNetnsName(dir);
  const socketDir = `/run/muster-lab/${netns}`;
  if (existsSync(netnsPath(netns)) || existsSync(socketDir)) {
    // the relays inside it; the host-side halves die with their sockets' peers
    for (const pid of netnsPids(netns)) await stopPid(pid, 2000, { group: true });
    deleteLabNetwork(netns);
    rmSync(socketDir, { recursive: true, force: true });
    cleared.push(`network ${netns}`);
  }
  return cleared;
}

/** Stop the machines' relays, package server and network (after the machines are off). */
export async function teardownMachines(ms: LabMachinesState, nodes: { machine?: LabNodeMachine }[]): Promise<string[]> {
  const stopped: string[] = [];
  for (const pid of [...ms.relays.flatMap((r) => r.pids), ...nodes.flatMap((n) => n.machine?.relayPids ?? []), ms.packages.pid]) {
    if (isAlive(pid)) {
      await stopPid(pid, 3000, { group: true }); // socat forks a child per connection: the group
      stopped.push(String(pid));
    }
  }
  if (ms.kind === "vm") for (const d of machineDirs(ms)) removeTap(ms.netns, readMachineTap(d));
  deleteLabNetwork(ms.netns);
  rmSync(ms.socketDir, { recursive: true, force: true });
  return stopped;
}

function machineDirs(ms: LabMachinesState): string[] {
  const root = resolve(ms.packages.dir, "..", "machines");
  return existsSync(root) ? readdirSync(root).map((d) => join(root, d)).filter((d) => statSync(d).isDirectory()) : [];
}

function readMachineTap(dir: string): string {
  try {
    return (JSON.parse(readFileSync(machineFile(dir), "utf8")) as MachineConfig).vm?.tap ?? "";
  } catch {
    return "";
  }
}

