import { mkdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import type { MusterClient } from "../../client/client.js";
import { machineLeader, powerOffMachine, powerOnMachine, type MachineKind } from "../machines/index.js";
import type { MusterProcess } from "../processes.js";
import { runPlan } from "../runner.js";
import { addLabNodes, type AddNodesOptions } from "../scale.js";
import { labMachinesOf, rememberPid, setMachinePid, stateFile, writeLabState, type LabNode, type LabState } from "../state.js";
import { planSite, SITE_STEP_NEEDS, SITE_SUITE } from "./plan.js";
import { machineUp, siteExec } from "./reach.js";
import { SITE_ROLES } from "./roles.js";
import { siteClient } from "./operator.js";
import { SITE_STEPS, type SiteRun } from "./steps.js";

// `muster lab up --site`: the whole site as machines (site/plan.ts), from the package, on the
// current Debian. This is the site's front door for the CLI and the tests: bring it up, act on
// its machines as a cloud would (power, exec), and take it down.

export { SITE_SUITE } from "./plan.js";
export { siteMachines, siteMachine, type SiteRoleName } from "./roles.js";
export { siteExec } from "./reach.js";

export interface SiteOptions {
  dir: string;
  /** Nodes besides the site's own machines (default 4). */
  nodes: number;
  /** The Debian release of the site's machines and nodes (default trixie: Debian 13, Puppet 8). */
  suite?: string;
  kind?: MachineKind;
  /** The .deb the machines install (default: built now from this checkout). */
  deb?: string;
  imageCache?: string;
  detached: boolean;
  progress?: (line: string) => void;
}

export type PowerAction = "on" | "off" | "cut" | "reboot";

export interface Site {
  state: LabState;
  /** A client of the site as its operator. */
  client(name?: string): Promise<MusterClient>;
  /** A command inside a machine (site or node), as `muster lab exec` runs it. */
  exec(identity: string, argv: string[], input?: string): Promise<{ status: number | null; stdout: string; stderr: string }>;
  /** A machine's power, as `muster lab power` switches it. */
  power(action: PowerAction, identity: string): Promise<void>;
  /** Resolves once a site machine is up again: cloud-init done and its role's units active. */
  waitUp(identity: string, timeoutMs?: number): Promise<void>;
  /** Boot nodes into the site, as `muster lab add` does (`suite`: another Debian release). */
  addNodes(o: AddNodesOptions): Promise<LabNode[]>;
  stop(): Promise<void>;
}

export async function startSite(o: SiteOptions): Promise<Site> {
  const dir = resolve(o.dir);
  mkdirSync(join(dir, "logs"), { recursive: true });
  const shape = { nodes: o.nodes, suite: o.suite ?? SITE_SUITE, kind: o.kind ?? "nspawn", ...(o.deb ? { deb: o.deb } : {}), ...(o.imageCache ? { imageCache: o.imageCache } : {}) };
  const run: SiteRun = { dir, o: { ...shape, detached: o.detached }, say: o.progress ?? (() => undefined), servers: new Map(), site: [], nodes: [] };
  const ledger = await runPlan(planSite(shape), SITE_STEPS, run, SITE_STEP_NEEDS);
  const state = run.state!;
  const machine = (identity: string) => {
    const m = labMachinesOf(state).find((x) => x.identity === identity);
    if (!m) throw new Error(`no machine ${identity} in the site`);
    return m;
  };
  return {
    state,
    client: (name = "muster-lab-site") => siteClient(state, name),
    exec: (identity, argv, input) => siteExec(machine(identity), argv, input),
    async power(action, identity) {
      const m = machine(identity);
      if (action === "reboot") {
        // resolves once the machine boots again: its init is a new process (the supervisor restarts nspawn)
        const before = machineLeader(m.machine.dir);
        await siteExec(m, ["systemctl", "reboot"]);
        const deadline = Date.now() + 180_000;
        for (;;) {
          const now = machineLeader(m.machine.dir);
          if (now !== undefined && now !== before) return;
          if (Date.now() > deadline) throw new Error(`${identity} did not boot again within 180 s of systemctl reboot (see ${m.machine.dir}/console.log)`);
          await new Promise((r) => setTimeout(r, 250)); // a reboot announces itself nowhere but in the process table
        }
      }
      if (action === "on") {
        const p: MusterProcess = powerOnMachine(m.machine.dir, o.detached);
        rememberPid(dir, p.pid);
        ledger.add(`machine ${identity}`, () => p.stop("SIGTERM", 60_000));
        setMachinePid(state, identity, p.pid);
        writeLabState(state);
        return;
      }
      await powerOffMachine(m.machine.dir, m.pid, { cut: action === "cut" });
    },
    async waitUp(identity, timeoutMs = 600_000) {
      const m = state.site!.machines.find((x) => x.identity === identity);
      if (!m) throw new Error(`${identity} is not one of the site's own machines`);
      await machineUp(m, SITE_ROLES[m.role].units, timeoutMs, new AbortController().signal, () => undefined, run.say);
    },
    addNodes: (a) =>
      addLabNodes(state, {
        ...a,
        detached: o.detached,
        track: (name, p, x) => {
          rememberPid(dir, p.pid);
          ledger.add(name, () => p.stop("SIGTERM", x ? 60_000 : undefined));
        },
      }),
    async stop() {
      await ledger.stop();
      rmSync(stateFile(dir), { force: true });
    },
  };
}
