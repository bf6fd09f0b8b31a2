import { LAB_COLLECTIVE, LAB_PROVISIONING_COLLECTIVE } from "../names.js";
import type { BootMachineContext, LabMachinesState, LabPackages, MachineImage, VmImage } from "../machines/index.js";
import type { MusterProcess } from "../processes.js";
import type { LabNode, LabState, SiteMachineState } from "../state.js";
import type { LabReach } from "../waits.js";
import type { SiteFiles } from "./files.js";
import type { SiteShape } from "./plan.js";
import { siteMachines } from "./roles.js";

// What the site's steps (steps.ts) share while it comes up, and lab.json made from it at the end.

export interface SiteRun {
  dir: string;
  o: SiteShape & { detached: boolean };
  say: (line: string) => void;
  /** Each machine's power supervisor, by identity. */
  servers: Map<string, MusterProcess>;
  files?: SiteFiles;
  image?: { image: MachineImage; vm?: VmImage };
  network?: { netns: string; socketDir: string };
  packages?: LabPackages;
  receiver?: LabState["receiver"];
  relays?: LabMachinesState["relays"];
  /** The loopback ports this workstation reaches the site on (the relays). */
  reach?: SiteReach;
  machines?: LabMachinesState;
  boot?: BootMachineContext;
  site: SiteMachineState[];
  nodes: LabNode[];
  state?: LabState;
}

export interface SiteReach {
  brokers: { identity: string; client: string; monitor: string }[];
  web: string;
  registry: string;
}

export function need<K extends keyof SiteRun>(run: SiteRun, what: K): NonNullable<SiteRun[K]> {
  const v = run[what];
  if (v === undefined || v === null) throw new Error(`a site step ran before ${String(what)} was made: its plan lacks a dependency (site/plan.ts SITE_STEP_NEEDS)`);
  return v as NonNullable<SiteRun[K]>;
}

/** What waiting for the site's servers needs (before lab.json exists, from what the steps made). */
export const siteReach = (run: SiteRun): LabReach => ({
  broker: need(run, "reach").brokers[0]!.client,
  site: { machines: [], brokers: need(run, "reach").brokers.map((b) => b.client), suite: run.o.suite, files: { dir: need(run, "files").dir, users: need(run, "files").users, clientsCa: need(run, "files").clientsCa } },
  collective: LAB_COLLECTIVE,
  provisioningCollective: LAB_PROVISIONING_COLLECTIVE,
  tls: siteTls(need(run, "files")),
  provisionerEnv: { MUSTER_CONFIG_DIR: need(run, "files").dir, MUSTER_CALLER: "provisioner" },
  ...(run.machines ? { machines: run.machines } : {}),
});

export const siteTls = (f: SiteFiles): LabState["tls"] => ({ ca: f.creds.ca.cert, admin: { ca: f.creds.ca.cert, ...f.creds.admin }, provisioner: { ca: f.creds.ca.cert, ...f.creds.provisioner } });

/** lab.json for the site: what the steps made, in LabState's shape (host-only fields say there is none). */
export function siteState(run: SiteRun): LabState {
  const files = need(run, "files");
  const reach = need(run, "reach");
  const consoleMachine = siteMachines().find((m) => m.role === "console")!;
  return {
    version: 1,
    dir: run.dir,
    collective: LAB_COLLECTIVE,
    provisioningCollective: LAB_PROVISIONING_COLLECTIVE,
    broker: reach.brokers[0]!.client,
    natsPid: 0,
    masters: [],
    nodes: run.nodes,
    notifier: { identity: consoleMachine.identity, pid: 0 },
    receiver: need(run, "receiver"),
    registry: { pid: 0, url: reach.registry, token_file: files.registryToken, config: "/etc/muster/registry.yaml on console.lab", log: "journalctl -u muster-registry on console.lab" },
    web: { pid: 0, url: reach.web, tokens_file: files.webTokens, config: "/etc/muster/web.yaml on console.lab", log: "journalctl -u muster-web on console.lab" },
    startedAt: Date.now(),
    tls: siteTls(files),
    provisionerEnv: { MUSTER_CONFIG_DIR: files.dir, MUSTER_CALLER: "provisioner" },
    monitor: reach.brokers[0]!.monitor,
    services: siteMachines()
      .filter((m) => m.role === "master" || m.role === "console")
      .map((m) => m.identity),
    nodeSerial: run.o.nodes,
    // the site's nodes are machines, rendered with what they trust (site/render.ts): no process node's settings
    nodeSecurity: {},
    machines: need(run, "machines"),
    site: { machines: run.site, brokers: reach.brokers.map((b) => b.client), suite: run.o.suite, files: { dir: files.dir, users: files.users, clientsCa: files.clientsCa } },
  };
}
