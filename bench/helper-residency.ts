import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import { askHelper } from "../src/privileged/client.js";
import { benchRuntimes, scratchEnv } from "./runtimes.js";
import { repoRoot } from "./paths.js";

// How long the privileged helper is resident on a node under a normal load (issue 39's
// alternative to its memory target): it is socket-activated and exits after --idle-exit seconds
// with no connection, and on a provisioned node the one thing that starts it is the gather of
// Puppet's facts (`puppet.facts`: after each Puppet run, every 30 minutes by default; every
// facts.gather_interval, an hour, where Puppet does not run). Each round starts the helper as its unit does (as root, the
// shipped runtime, the unit's --idle-exit), asks for the facts once, and times spawn to exit.
// A day's residency is that figure times the gathers in a day (one per 30-minute Puppet run).
//
//   npm run build && node dist/bench/helper-residency.js [--rounds 5] [--idle-exit 10] [--runtime shipped]

const args = process.argv.slice(2);
const opt = (name: string, dflt: string) => {
  const i = args.indexOf(`--${name}`);
  return i === -1 ? dflt : args[i + 1]!;
};
const rounds = Number(opt("rounds", "5"));
const idleExitS = Number(opt("idle-exit", "10"));
const perDay = 86_400 / Number(opt("interval", "1800"));
if (process.getuid?.() !== 0) throw new Error("the helper runs as root, as its unit does: run this bench as root");

const [runtime] = await benchRuntimes(opt("runtime", "shipped"));
const dir = mkdtempSync(join(tmpdir(), "muster-bench-helper-"));
const env = scratchEnv(join(dir, "home"));
try {
  const dirs = { confdir: join(dir, "puppet", "etc"), vardir: join(dir, "puppet", "var") };
  mkdirSync(dirs.confdir, { recursive: true });
  const config = join(dir, "server.yaml");
  writeFileSync(config, toYaml({ identity: "bench.helper.test", facts: { facter: true }, agents: { builtin: ["puppet"] }, plugins: { puppet: dirs } }));
  const cli = join(repoRoot, "dist", "src", "cli", "main.js");
  const rows: { residentS: number; factsS: number; startS: number }[] = [];
  for (let i = 0; i < rounds; i++) {
    const sock = join(dir, `helper-${i}.sock`);
    const t0 = performance.now();
    const child = spawn(runtime!.path, [cli, "privileged", "serve", "--config", config, "--socket", sock, "--client-user", "0", "--idle-exit", String(idleExitS), "--log-level", "warn"], { env, stdio: ["ignore", "ignore", "inherit"] });
    const exited = new Promise<number>((res) => child.once("exit", () => res(performance.now())));
    // socket activation hands the first connection over once the helper listens; here it is waited for
    while (!existsSync(sock)) await new Promise((r) => setTimeout(r, 5));
    const listening = performance.now();
    const facts = (await askHelper(sock, "puppet.facts", {})) as Record<string, unknown>;
    const answered = performance.now();
    if (!facts || typeof facts !== "object" || !("os" in facts)) throw new Error("puppet.facts answered without Puppet's facts");
    const end = await exited;
    rows.push({ residentS: (end - t0) / 1000, factsS: (answered - listening) / 1000, startS: (listening - t0) / 1000 });
    process.stderr.write(`round ${i + 1}: resident ${((end - t0) / 1000).toFixed(2)} s (start ${((listening - t0) / 1000).toFixed(2)} s, facts ${((answered - listening) / 1000).toFixed(2)} s, then --idle-exit ${idleExitS} s)\n`);
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const resident = median(rows.map((r) => r.residentS));
  const dayS = resident * perDay;
  console.log(
    JSON.stringify(
      {
        runtime: runtime!.name,
        idleExitS,
        gathersPerDay: perDay,
        residentPerGatherS: Math.round(resident * 100) / 100,
        startS: Math.round(median(rows.map((r) => r.startS)) * 100) / 100,
        factsS: Math.round(median(rows.map((r) => r.factsS)) * 100) / 100,
        residentPerDayS: Math.round(dayS),
        percentOfDay: Math.round((dayS / 86_400) * 10_000) / 100,
      },
      null,
      2,
    ),
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
