import { appendFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { TlsSettings } from "../broker/connect.js";
import type { LabMachinesState, LabNodeMachine, MachineNode } from "./machines/index.js";
import { cmdlineOf, isAlive } from "./processes.js";
import type { LabRegion } from "./regions.js";

// What a lab is, as its state file (<lab>/lab.json) says: every process it started with its pid,
// where each service listens, the broker's TLS and the machines. `lab status`, `lab add`, `lab
// down` and the tests read it. Until `lab up` has written it, <lab>/pids.jsonl remembers each
// process the lab started, so `lab down` stops what an interrupted `lab up` left.

/** A node of the lab: a process on this host, or a whole machine (machines/state.ts MachineNode). */
export interface LabNode extends Omit<MachineNode, "machine"> {
  /** A whole machine (systemd-nspawn or QEMU) instead of a process: `pid` is its power supervisor. */
  machine?: LabNodeMachine;
}

export interface LabRegistry {
  pid: number;
  /** http://127.0.0.1:<port>: what the masters' search_nodes asks (with the token). */
  url: string;
  token_file: string;
  config: string;
  log: string;
}

/** The lab's web console (`muster web`): where it listens and the tokens to log in with. */
export interface LabWeb {
  pid: number;
  url: string;
  /** Lines of `<token> <role> <name>`: one operator, one viewer. */
  tokens_file: string;
  config: string;
  log: string;
}

export interface LabMaster {
  identity: string;
  region: LabRegion;
  host: string;
  port: number;
  dir: string;
  pid: number; // puppetserver JVM
  serverPid: number; // its muster server (puppetca agent)
}

export interface LabState {
  version: 1;
  dir: string;
  collective: string;
  broker: string;
  natsPid: number;
  masters: LabMaster[];
  nodes: LabNode[];
  notifier: { identity: string; pid: number };
  receiver: { url: string; file: string; pid: number };
  registry: LabRegistry;
  /** Absent in labs started before the console existed. */
  web?: LabWeb;
  provisioner?: { pid: number; config: string; metrics: string; log: string };
  startedAt: number;
  provisioningCollective: string;
  /** The broker's TLS: the lab CA and the credentials of the lab's own users. */
  tls: { ca: string; admin: TlsSettings; provisioner: TlsSettings };
  /** MUSTER_CONFIG_DIR and MUSTER_CALLER for a process that signs as the provisioner. */
  provisionerEnv: Record<string, string>;
  /** nats-server monitoring (connz shows which user each connection mapped to). */
  monitor: string;
  /** Service identities with broker users of their own (notifier, masters): kept when nodes come and go. */
  services?: string[];
  /** The highest node number handed out: added nodes continue from here (a cloud never reuses a name unasked). */
  nodeSerial?: number;
  /** The nodes' `security` settings, so nodes added later trust exactly what the first ones trust. */
  nodeSecurity?: Record<string, unknown>;
  /** The muster executable the lab's processes run (an unpacked package's), when not this checkout's. */
  bin?: string;
  /** A lab whose nodes are machines: their network, relays, image and package. */
  machines?: LabMachinesState;
  /**
   * The site (`lab up --site`): the brokers, masters, provisioners and console are machines too,
   * and the host keeps only the operator's side (this state, the relays, the package server, the
   * receiver). Host-only fields above then say so: no nats-server pid, no host masters.
   */
  site?: LabSiteState;
}

export interface SiteMachineState {
  identity: string;
  role: "broker" | "master" | "provisioner" | "console";
  address: string;
  /** Its power supervisor. */
  pid: number;
  machine: LabNodeMachine;
}

export interface LabSiteState {
  machines: SiteMachineState[];
  /** The brokers as this workstation reaches them (relays on loopback). */
  brokers: string[];
  /** The Debian release of the site's machines (nodes may be added with another). */
  suite: string;
  /** What the operator keeps on the workstation: the site's files (site/files.ts). */
  files: { dir: string; users: string; clientsCa: string };
  /**
   * When PuppetDB began to serve (ms): a node whose production run began earlier is not in it (the
   * masters' terminus drops what it cannot send), and `lab up` runs its Puppet again (settle.ts).
   */
  puppetdbSince?: number;
}

/** A machine powered on again has a new power supervisor: note its pid where the state names the machine. */
export function setMachinePid(s: LabState, identity: string, pid: number): void {
  for (const m of [...(s.site?.machines ?? []), ...s.nodes]) if (m.identity === identity) m.pid = pid;
}

/** Whether the lab runs: its broker (on this host, or a site's broker machines). */
export function labRunning(s: LabState): boolean {
  return s.site ? s.site.machines.some((m) => m.role === "broker" && isAlive(m.pid)) : isAlive(s.natsPid);
}

/** The brokers a client of this lab connects to. */
export const labBrokers = (s: Pick<LabState, "broker" | "site">): string[] => s.site?.brokers ?? [s.broker];

/** Every machine of the lab, nodes and site machines alike, with its role. */
export function labMachinesOf(s: LabState): { identity: string; role: string; pid: number; machine: LabNodeMachine }[] {
  return [...(s.site?.machines ?? []), ...s.nodes.flatMap((n) => (n.machine ? [{ identity: n.identity, role: "node", pid: n.pid, machine: n.machine }] : []))];
}

export const stateFile = (dir: string) => join(dir, "lab.json");

export function readLabState(dir: string): LabState | undefined {
  const f = stateFile(dir);
  if (!existsSync(f)) return undefined;
  try {
    return JSON.parse(readFileSync(f, "utf8")) as LabState;
  } catch {
    return undefined;
  }
}

export function writeLabState(s: LabState): void {
  writeFileSync(stateFile(s.dir), JSON.stringify(s, null, 2));
}

/** Every process the state names, with what it is (what `lab status` lists). */
export function labPids(s: LabState): { name: string; pid: number }[] {
  return [
    // a site's services run on its machines: only what this host runs has a pid here
    ...(s.site ? [] : [{ name: "nats-server", pid: s.natsPid }]),
    ...s.masters.flatMap((m) => [
      { name: `puppetserver ${m.identity}`, pid: m.pid },
      { name: `muster server ${m.identity}`, pid: m.serverPid },
    ]),
    ...(s.site?.machines ?? []).map((m) => ({ name: `machine ${m.identity} (${m.role})`, pid: m.pid })),
    ...s.nodes.map((n) => ({ name: `${n.machine ? "machine" : "muster server"} ${n.identity}`, pid: n.pid })),
    ...(s.machines
      ? [
          { name: `package server ${s.machines.packages.hostUrl}`, pid: s.machines.packages.pid },
          ...s.machines.relays.flatMap((r) => r.pids.map((pid, i) => ({ name: `relay ${r.name} ${i ? r.target : r.listen}`, pid }))),
          ...labMachinesOf(s).flatMap((n) => n.machine.relayPids.map((pid, i) => ({ name: `relay ssh ${n.identity}${i ? "" : ` ${n.machine.ssh.host}:${n.machine.ssh.port}`}`, pid }))),
        ]
      : []),
    ...(s.site
      ? []
      : [
          { name: `muster server ${s.notifier.identity}`, pid: s.notifier.pid },
          ...(s.registry ? [{ name: `registry ${s.registry.url}`, pid: s.registry.pid }] : []),
          ...(s.web ? [{ name: `web console ${s.web.url}`, pid: s.web.pid }] : []),
        ]),
    { name: "webhook receiver", pid: s.receiver.pid },
    ...(s.provisioner ? [{ name: "provisioner", pid: s.provisioner.pid }] : []),
  ];
}

const pidsFile = (dir: string) => join(dir, "pids.jsonl");

/** Note a process the lab started, with its command line (so a pid taken since by another process is not killed). */
export function rememberPid(dir: string, pid: number): void {
  if (pid > 0) appendFileSync(pidsFile(dir), `${JSON.stringify({ pid, cmd: cmdlineOf(pid) })}\n`);
}

/** The processes rememberPid noted (none when there is no file). */
export function rememberedPids(dir: string): { pid: number; cmd: string }[] {
  try {
    return readFileSync(pidsFile(dir), "utf8")
      .split("\n")
      .flatMap((l) => {
        try {
          return [JSON.parse(l) as { pid: number; cmd: string }];
        } catch {
          return []; // a line cut short when lab up was killed mid-write
        }
      });
  } catch {
    return []; // none remembered
  }
}
