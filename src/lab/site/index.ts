import { mkdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import type { MusterClient } from "../../client/client.js";
import { powerOffMachine, powerOnMachine, type MachineKind } from "../machines/index.js";
import type { MusterProcess } from "../processes.js";
import { runPlan } from "../runner.js";
import { labMachinesOf, rememberPid, setMachinePid, stateFile, writeLabState, type LabState } from "../state.js";
import { planSite, SITE_STEP_NEEDS, SITE_SUITE } from "./plan.js";
import { siteExec } from "./reach.js";
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
        await siteExec(m, ["systemctl", "reboot"]);
        return;
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
    async stop() {
      await ledger.stop();
      rmSync(stateFile(dir), { force: true });
    },
  };
}
