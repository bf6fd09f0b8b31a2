// How long the fleet takes to see a machine die, measured on a lab of machines (bench/machines.ts
// --detection). The tests only wait for it, with deadlines that catch a hang
// (test/lab/machines.test.ts); the figures live here and in docs/bench.md (Real machines).
//
//   - a provisioned machine's power cut: until `muster health` says unreachable, the console's
//     /api/health says so, and the admins' alert arrives; then power on until each says reachable;
//   - a machine's power cut during its bootstrap Puppet run: until the provisioner marks it gone.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { labWebToken, type Lab } from "../src/lab/lab.js";
import { machineExec } from "../src/lab/machines/index.js";
import type { ProvisionState } from "../src/provisioner/state.js";
import { cliPath } from "./paths.js";

export interface Detection {
  machine: string;
  /** Power cut to unreachable: `muster health`, the console's /api/health, the admins' alert (s). */
  cut_to_unreachable_s: { health: number; console: number; alert: number };
  /** Power on to reachable again, the machine's boot included (s). */
  on_to_reachable_s: { health: number; console: number; alert: number };
  /** A machine added to the lab, its power cut during its bootstrap Puppet run: to marked gone (s). */
  bootstrap_cut_to_gone_s: number;
}

const EVERY_MS = 250;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Seconds from `t0` until `probe` holds, asked every 250 ms; undefined past `timeoutMs`. */
async function until(t0: number, timeoutMs: number, probe: () => boolean | Promise<boolean>): Promise<number> {
  for (;;) {
    if (await probe()) return +((Date.now() - t0) / 1000).toFixed(1);
    if (Date.now() - t0 > timeoutMs) throw new Error(`not seen within ${timeoutMs / 1000} s`);
    await sleep(EVERY_MS);
  }
}

export async function measureDetection(lab: Lab, store: ProvisionState): Promise<Detection> {
  const s = lab.state;
  const env = { ...process.env, MUSTER_BROKER: s.broker, MUSTER_TLS_CA: s.tls.ca, MUSTER_TLS_CERT: s.tls.admin.cert!, MUSTER_TLS_KEY: s.tls.admin.key! };
  const healthCli = (id: string) => {
    const r = spawnSync(process.execPath, [cliPath, "health", "--json", "-I", id], { env, encoding: "utf8" });
    return (JSON.parse(r.stdout || "{}") as { nodes?: { identity: string; reachable: boolean }[] }).nodes?.find((n) => n.identity === id)?.reachable;
  };
  const web = s.web!;
  const token = labWebToken(web.tokens_file, "viewer");
  const unreachableOnConsole = async (id: string) => {
    const body = (await (await fetch(new URL("api/health", web.url), { headers: { authorization: `Bearer ${token}` } })).json()) as { nodes: { identity: string; problems: { kind: string }[] }[] };
    return body.nodes.some((n) => n.identity === id && n.problems.some((p) => p.kind === "unreachable"));
  };
  const alerts = (id: string, what: RegExp) =>
    existsSync(s.receiver.file)
      ? readFileSync(s.receiver.file, "utf8")
          .split("\n")
          .filter((l) => l && what.test((JSON.parse(l) as { subject: string }).subject) && l.includes(id)).length
      : 0;

  const id = s.nodes[s.nodes.length - 1]!.identity;
  const told = { gone: alerts(id, /unreachable/), back: alerts(id, /reachable again/) };
  const cutAt = Date.now();
  await lab.stopServer(id, "SIGKILL"); // no last heartbeat, no shutdown event
  const [cutHealth, cutConsole, cutAlert] = await Promise.all([
    until(cutAt, 300_000, () => healthCli(id) === false),
    until(cutAt, 300_000, () => unreachableOnConsole(id)),
    until(cutAt, 300_000, () => alerts(id, /unreachable/) > told.gone),
  ]);
  const onAt = Date.now();
  lab.startServer(id);
  const [onHealth, onConsole, onAlert] = await Promise.all([
    until(onAt, 300_000, () => healthCli(id) === true),
    until(onAt, 300_000, async () => !(await unreachableOnConsole(id))),
    until(onAt, 300_000, () => alerts(id, /reachable again/) > told.back),
  ]);

  // a machine that dies while its bootstrap Puppet run is under way: the provisioner's liveness checks
  const [added] = await lab.addNodes({ count: 1 });
  const c = added!.identity;
  await store.waitFor([c], (r) => r.current === "bootstrap", 600_000);
  await until(Date.now(), 120_000, () => machineExec(added!.machine!.dir, ["pgrep", "-f", "puppet agent"]).status === 0);
  const bootCutAt = Date.now();
  await lab.stopServer(c, "SIGKILL");
  await store.waitFor([c], (r) => r.gone !== undefined, 300_000);
  const gone = +((Date.now() - bootCutAt) / 1000).toFixed(1);
  return { machine: id, cut_to_unreachable_s: { health: cutHealth, console: cutConsole, alert: cutAlert }, on_to_reachable_s: { health: onHealth, console: onConsole, alert: onAlert }, bootstrap_cut_to_gone_s: gone };
}
