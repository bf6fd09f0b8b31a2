// `npm run bench:daemon-requests`: what one request costs an idle node daemon in CPU, in each of
// its V8 profiles (src/server/v8-tuning.ts: `size`, the default, without V8's optimising
// compilers; `speed`, V8's defaults), on the same broker, the profiles alternating round by round.
//
//   node dist/bench/daemon-requests.js [--requests 10000] [--rounds 2] [--runtime shipped] [--out bench/results/daemon-requests.json]
//
// Each round starts one `muster server` (the bin, its unit's NODE_OPTIONS, no TLS, no Facter) per
// profile, lets one client send it `--requests` directed `rpcutil ping`s, 20 at a time, and reads
// the daemon's CPU (user + system, /proc/PID/stat) before and after. The figure is CPU per
// request; the wall time is what the client waited in all.

import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { MusterClient } from "../src/client/client.js";
import { startNats } from "../src/lab/nats.js";
import { loadOrCreateSigningKey } from "../src/security/keys.js";
import { cliPath, repoRoot } from "./paths.js";
import { benchRuntimes, scratchEnv } from "./runtimes.js";

const { values: args } = parseArgs({
  options: {
    requests: { type: "string", default: "10000" },
    rounds: { type: "string", default: "2" },
    runtime: { type: "string", default: "shipped" },
    out: { type: "string", default: join(repoRoot, "bench", "results", "daemon-requests.json") },
    help: { type: "boolean", short: "h", default: false },
  },
});
if (args.help) {
  process.stdout.write(readFileSync(fileURLToPath(import.meta.url), "utf8").split("\n").slice(0, 9).join("\n") + "\n");
  process.exit(0);
}
const requests = Number(args.requests);
const rounds = Number(args.rounds);
if (!Number.isInteger(requests) || requests < 20 || !Number.isInteger(rounds) || rounds < 1) {
  process.stderr.write("bench: --requests takes a whole number of 20 or more, --rounds one of 1 or more\n");
  process.exit(64);
}
const PROFILES = ["size", "speed"] as const;
const AT_ONCE = 20;

/** CPU time (user + system) of a process so far, in ms. */
function cpuMs(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(f[11]) + Number(f[12])) * (1000 / 100); // clock ticks (USER_HZ 100)
}

async function main(): Promise<void> {
  const loadavgAtStart = loadavg();
  const [rt] = await benchRuntimes(args.runtime!);
  const dir = mkdtempSync(join(tmpdir(), "muster-bench-daemon-requests-"));
  const env = scratchEnv(dir);
  loadOrCreateSigningKey();
  const nats = await startNats({ jetstream: false });
  const children = new Set<ChildProcess>();
  const samples: { profile: string; round: number; cpuMs: number; wallMs: number; usPerRequest: number }[] = [];
  try {
    for (let round = 1; round <= rounds; round++) {
      // alternate which profile goes first, so neither always runs on a warmer machine
      for (const profile of round % 2 ? PROFILES : [...PROFILES].reverse()) {
        const identity = `requests-${profile}-${round}.example.net`;
        const file = join(dir, `${identity}.yaml`);
        writeFileSync(file, [`identity: ${identity}`, `collectives: [muster]`, `brokers: ["${nats.url}"]`, `facts:`, `  facter: false`, `log:`, `  level: warn`, ""].join("\n"));
        const server = spawn(rt!.path, [cliPath, "server", "--config", file], { env: { ...env, MUSTER_SERVER_V8: profile, NODE_OPTIONS: "--max-semi-space-size=1" }, stdio: ["ignore", "pipe", "inherit"] });
        children.add(server);
        await new Promise<void>((ok, fail) => {
          const t = setTimeout(() => fail(new Error(`muster server (${profile}) not ready after 60 s`)), 60_000);
          server.stdout!.on("data", (d: Buffer) => {
            if (!/ ready$/m.test(d.toString())) return;
            clearTimeout(t);
            ok();
          });
          server.once("exit", (code) => fail(new Error(`muster server (${profile}) exited with ${code} before ready`)));
        });
        const client = await MusterClient.connect({ brokers: [nats.url], collective: "muster", name: "bench-daemon-requests" });
        const ping = () => client.call("rpcutil", "ping", {}, { nodes: [identity], timeoutMs: 10_000 });
        await ping();
        const c0 = cpuMs(server.pid!);
        const t0 = performance.now();
        for (let sent = 0; sent < requests; sent += AT_ONCE) {
          const results = await Promise.all(Array.from({ length: AT_ONCE }, ping));
          if (results.some((r) => r.stats.responded !== 1)) throw new Error(`muster server (${profile}) left a ping unanswered`);
        }
        const wallMs = performance.now() - t0;
        const used = cpuMs(server.pid!) - c0;
        const n = Math.ceil(requests / AT_ONCE) * AT_ONCE;
        samples.push({ profile, round, cpuMs: used, wallMs: Math.round(wallMs), usPerRequest: Math.round((used * 1000) / n) });
        process.stderr.write(`  round ${round}, ${profile}: ${n} pings, daemon CPU ${used} ms (${Math.round((used * 1000) / n)} µs a request), ${Math.round(wallMs)} ms\n`);
        await client.close();
        server.kill("SIGTERM");
        await new Promise((r) => server.once("exit", r));
        children.delete(server);
      }
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.ceil(xs.length / 2) - 1]!;
    const per = Object.fromEntries(PROFILES.map((p) => [p, median(samples.filter((s) => s.profile === p).map((s) => s.usPerRequest))]));
    const text = [`${rt!.name}, ${requests} directed rpcutil pings a round, ${rounds} rounds; load average ${loadavgAtStart.map((x) => x.toFixed(1)).join(" ")} at start, ${loadavg().map((x) => x.toFixed(1)).join(" ")} at end`, ...PROFILES.map((p) => `  MUSTER_SERVER_V8=${p}: ${per[p]} µs of daemon CPU a request (median)`), `  size / speed: ${(per.size! / per.speed!).toFixed(2)}x`, ""].join("\n");
    process.stdout.write(text);
    const out = resolve(repoRoot, args.out!);
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, JSON.stringify({ time: new Date().toISOString(), runtime: rt, requests, rounds, loadavgAtStart, loadavgAtEnd: loadavg(), samples, medianUsPerRequest: per, report: text.split("\n") }, null, 2) + "\n");
    process.stderr.write(`bench: wrote ${out}\n`);
  } finally {
    for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
    await nats.stop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  process.stderr.write(`bench failed: ${(e as Error).stack ?? String(e)}\n`);
  process.exitCode = 1;
});
