// `npm run bench`: the collective's speed and memory, each beside a floor measured in the same run.
//
//   node dist/bench/run.js [--nodes 1000,10000] [--rounds 5] [--warmup 1] [--no-rss] [--rss-only]
//                          [--profile DIR] [--out bench/results/latest.json]
//
// For each node count N it starts two child processes on one nats-server: the bare NATS floor and
// the muster emulator, each hosting N nodes behind one connection (bench/nodes.ts). This process
// is the client, on its own connections. Rounds interleave floor and muster so both see the same
// machine state. Then it measures the resident memory of an idle `muster server` beside an idle
// bare node process. What each number means: docs/bench.md.

import { fork, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir, totalmem, release } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { connect, createInbox, type NatsConnection } from "@nats-io/transport-node";
import { MusterClient } from "../src/client/client.js";
import { generateFleet } from "../src/emulator/fleet.js";
import { startNats, type NatsHandle } from "../src/lab/nats.js";
import { encodeRequest } from "../src/protocol/envelope.js";
import { emptyFilter } from "../src/protocol/types.js";
import { buildRequest } from "../src/client/request.js";
import { loadOrCreateSigningKey } from "../src/security/keys.js";
import { VERSION } from "../src/version.js";

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = resolve(here, "..", ".."); // dist/bench -> repo
const cliPath = join(repoRoot, "dist", "src", "cli", "main.js");

const { values: args } = parseArgs({
  options: {
    nodes: { type: "string", default: "1000,10000" },
    rounds: { type: "string", default: "5" },
    warmup: { type: "string", default: "1" },
    "idle-ms": { type: "string", default: "250" },
    "no-rss": { type: "boolean", default: false },
    "rss-only": { type: "boolean", default: false },
    profile: { type: "string" },
    out: { type: "string", default: join(repoRoot, "bench", "results", "latest.json") },
    help: { type: "boolean", short: "h", default: false },
  },
});
if (args.help) {
  process.stdout.write(readFileSync(fileURLToPath(import.meta.url), "utf8").split("\n").slice(0, 12).join("\n") + "\n");
  process.exit(0);
}
const sizes = args["rss-only"] ? [] : args.nodes!.split(",").map((s) => Number(s.trim()));
const rounds = Number(args.rounds);
const warmup = Number(args.warmup);
const idleMs = Number(args["idle-ms"]);
if (sizes.some((n) => !Number.isInteger(n) || n < 1) || !Number.isInteger(rounds) || rounds < 1 || !Number.isInteger(warmup) || warmup < 0) {
  process.stderr.write("bench: --nodes takes counts like 1000,10000; --rounds and --warmup whole numbers\n");
  process.exit(64);
}

const TIMEOUT_MS = 60_000;
const FLOOR = "benchfloor";
const MUSTER = "bench";
const dec = new TextDecoder();
const children = new Set<ChildProcess>();
// A bench that dies must not leave node processes behind (nats-server is stopped in finally/signals).
process.on("exit", () => {
  for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
});

// ---- statistics ---------------------------------------------------------------------------

interface Series {
  samples: number[];
  median: number;
  p90: number;
}

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

function series(samples: number[]): Series {
  const sorted = [...samples].sort((a, b) => a - b);
  return { samples: samples.map((s) => Math.round(s * 100) / 100), median: quantile(sorted, 0.5), p90: quantile(sorted, 0.9) };
}

// ---- child processes ------------------------------------------------------------------------

interface NodesProcess {
  pid: number;
  stop(): Promise<void>;
}

async function startNodes(mode: "floor" | "muster", count: number, url: string, env: NodeJS.ProcessEnv): Promise<NodesProcess> {
  const execArgv = args.profile ? ["--cpu-prof", `--cpu-prof-dir=${resolve(args.profile)}`, `--cpu-prof-name=${mode}-${count}-${Date.now()}.cpuprofile`] : [];
  const child = fork(join(here, "nodes.js"), [mode, String(count), url, mode === "floor" ? FLOOR : MUSTER], { env, execArgv, stdio: ["ignore", "inherit", "inherit", "ipc"] });
  children.add(child);
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  await new Promise<void>((ok, fail) => {
    const t = setTimeout(() => fail(new Error(`${mode} nodes (${count}) not ready after ${TIMEOUT_MS} ms`)), TIMEOUT_MS);
    child.once("message", () => {
      clearTimeout(t);
      ok();
    });
    child.once("exit", (code) => {
      clearTimeout(t);
      fail(new Error(`${mode} nodes (${count}) exited with ${code} before ready`));
    });
  });
  return {
    pid: child.pid!,
    async stop() {
      if (child.exitCode === null) {
        child.send({ type: "stop" });
        const t = setTimeout(() => child.kill("SIGKILL"), 10_000);
        await exited;
        clearTimeout(t);
      }
      children.delete(child);
    },
  };
}

// ---- the floor: bare NATS request fan-out -------------------------------------------------------

/** Publishes once (broadcast) or once per node (direct) with a reply inbox; resolves when all N distinct nodes answered. */
function floorRound(nc: NatsConnection, identities: string[], kind: "broadcast" | "direct", payload: Uint8Array): Promise<number> {
  const want = identities.length;
  return new Promise((ok, fail) => {
    const t0 = performance.now();
    const seen = new Set<string>();
    const inbox = createInbox();
    const timer = setTimeout(() => {
      sub.unsubscribe();
      fail(new Error(`floor ${kind}: ${seen.size}/${want} replies after ${TIMEOUT_MS} ms`));
    }, TIMEOUT_MS);
    const sub = nc.subscribe(inbox, {
      callback: (err, msg) => {
        if (err) return;
        seen.add(dec.decode(msg.data));
        if (seen.size === want) {
          const ms = performance.now() - t0;
          clearTimeout(timer);
          sub.unsubscribe();
          ok(ms);
        }
      },
    });
    if (kind === "broadcast") nc.publish(`${FLOOR}.broadcast.agent.ping`, payload, { reply: inbox });
    else for (const id of identities) nc.publish(`${FLOOR}.node.${id}`, payload, { reply: inbox });
  });
}

// ---- muster ---------------------------------------------------------------------------------

interface DiscoveryRound {
  foundAllMs: number; // when the last node was found (NaN if some never were)
  totalMs: number; // when discover() returned: the last reply plus the idle window
  found: number;
}

async function musterDiscovery(client: MusterClient, want: number): Promise<DiscoveryRound> {
  let n = 0;
  let foundAllMs = NaN;
  const t0 = performance.now();
  const found = await client.discover({
    timeoutMs: TIMEOUT_MS,
    idleMs,
    onFound: () => {
      if (++n === want) foundAllMs = performance.now() - t0;
    },
  });
  return { foundAllMs, totalMs: performance.now() - t0, found: found.length };
}

async function musterPingDirect(client: MusterClient, nodes: string[]): Promise<{ ms: number; ok: number }> {
  const t0 = performance.now();
  const res = await client.call("rpcutil", "ping", {}, { nodes, timeoutMs: TIMEOUT_MS });
  return { ms: performance.now() - t0, ok: res.stats.ok };
}

async function musterPingBroadcast(client: MusterClient, want: number): Promise<{ allMs: number; totalMs: number; ok: number }> {
  let n = 0;
  let allMs = NaN;
  const t0 = performance.now();
  const replies = await client.broadcastRequest("rpcutil", "ping", {}, emptyFilter(), {
    timeoutMs: TIMEOUT_MS,
    idleMs,
    onReply: (r) => {
      if (r.statuscode === 0 && ++n === want) allMs = performance.now() - t0;
    },
  });
  return { allMs, totalMs: performance.now() - t0, ok: replies.filter((r) => r.statuscode === 0).length };
}

// ---- one node count -------------------------------------------------------------------------

interface SizeResult {
  nodes: number;
  floor: { broadcast: Series; direct: Series };
  muster: {
    discoveryFoundAll: Series;
    discoveryTotal: Series;
    discoveryFound: number[];
    pingDirect: Series;
    pingDirectOk: number[];
    pingBroadcastAll: Series;
    pingBroadcastTotal: Series;
    pingBroadcastOk: number[];
  };
  ratios: { discoveryFoundAll: number; discoveryTotal: number; pingDirect: number; pingBroadcastAll: number };
  rssMB: { floorNodes: number; musterNodes: number };
}

function rssMB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Math.round((Number(m[1]) / 1024) * 10) / 10 : NaN;
}

async function benchSize(url: string, env: NodeJS.ProcessEnv, count: number): Promise<SizeResult> {
  const identities = generateFleet(count).map((n) => n.identity);
  const floorNodes = await startNodes("floor", count, url, env);
  let musterNodes: NodesProcess | undefined;
  const floorNc = await connect({ servers: url, name: "bench-floor-client" });
  let client: MusterClient | undefined;
  try {
    musterNodes = await startNodes("muster", count, url, env);
    client = await MusterClient.connect({ brokers: [url], collective: MUSTER, name: "bench-client" });
    // The floor's request is as large as muster's signed request: the same bytes cross the wire.
    const payload = new Uint8Array(encodeRequest(buildRequest({ key: client.key, collective: MUSTER, agent: "rpcutil", action: "ping", data: {}, filter: emptyFilter(), ttl: 60 })).length);
    const fb: number[] = [], fd: number[] = [], dfa: number[] = [], dt: number[] = [], df: number[] = [];
    const pd: number[] = [], pdo: number[] = [], pba: number[] = [], pbt: number[] = [], pbo: number[] = [];
    for (let r = -warmup; r < rounds; r++) {
      const keep = r >= 0;
      const b = await floorRound(floorNc, identities, "broadcast", payload);
      const d = await musterDiscovery(client, count);
      const pb = await musterPingBroadcast(client, count);
      const fdir = await floorRound(floorNc, identities, "direct", payload);
      const p = await musterPingDirect(client, identities);
      const line = `  N=${count} ${keep ? `round ${r + 1}/${rounds}` : "warm-up"}: floor bcast ${b.toFixed(1)} ms, discovery ${d.foundAllMs.toFixed(1)}/${d.totalMs.toFixed(1)} ms (${d.found}), ping bcast ${pb.allMs.toFixed(1)} ms (${pb.ok}), floor direct ${fdir.toFixed(1)} ms, ping direct ${p.ms.toFixed(1)} ms (${p.ok})\n`;
      process.stderr.write(line);
      if (!keep) continue;
      fb.push(b);
      fd.push(fdir);
      dfa.push(d.foundAllMs);
      dt.push(d.totalMs);
      df.push(d.found);
      pd.push(p.ms);
      pdo.push(p.ok);
      pba.push(pb.allMs);
      pbt.push(pb.totalMs);
      pbo.push(pb.ok);
    }
    const floor = { broadcast: series(fb), direct: series(fd) };
    const muster = {
      discoveryFoundAll: series(dfa),
      discoveryTotal: series(dt),
      discoveryFound: df,
      pingDirect: series(pd),
      pingDirectOk: pdo,
      pingBroadcastAll: series(pba),
      pingBroadcastTotal: series(pbt),
      pingBroadcastOk: pbo,
    };
    const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;
    return {
      nodes: count,
      floor,
      muster,
      ratios: {
        discoveryFoundAll: ratio(muster.discoveryFoundAll.median, floor.broadcast.median),
        discoveryTotal: ratio(muster.discoveryTotal.median, floor.broadcast.median),
        pingDirect: ratio(muster.pingDirect.median, floor.direct.median),
        pingBroadcastAll: ratio(muster.pingBroadcastAll.median, floor.broadcast.median),
      },
      rssMB: { floorNodes: rssMB(floorNodes.pid), musterNodes: rssMB(musterNodes.pid) },
    };
  } finally {
    await client?.close();
    await floorNc.close().catch(() => undefined);
    await musterNodes?.stop();
    await floorNodes.stop();
  }
}

// ---- idle resident memory ----------------------------------------------------------------------

interface IdleRss {
  rssMB: number;
  settledAfterMs: number;
}

/** Starts a process, waits for `ready` on stdout (if given), then until VmRSS stops moving; reads it. */
async function idleRss(cmd: string, argv: string[], env: NodeJS.ProcessEnv, readyText?: string): Promise<IdleRss> {
  const child = spawn(cmd, argv, { env, stdio: ["ignore", "pipe", "pipe"] });
  children.add(child);
  let out = "";
  let err = "";
  child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
  try {
    await new Promise<void>((ok, fail) => {
      const t = setTimeout(() => fail(new Error(`${argv.join(" ")}: not ready after 120 s; stderr: ${err.slice(-1000)}`)), 120_000);
      child.once("exit", (code) => fail(new Error(`${argv.join(" ")} exited with ${code}; stderr: ${err.slice(-1000)}`)));
      const check = () => {
        if (!readyText || out.includes(readyText)) {
          clearTimeout(t);
          ok();
        }
      };
      child.stdout!.on("data", (d: Buffer) => {
        out += d.toString();
        check();
      });
      check();
    });
    // Idle: no sample in the last 3 s moved more than 0.5 MB, and at least 3 s since ready.
    // Polling is the measurement itself here (memory has no "settled" event); bounded at 30 s.
    const t0 = Date.now();
    const samples: number[] = [];
    for (;;) {
      await new Promise((r) => setTimeout(r, 250));
      samples.push(rssMB(child.pid!));
      const last = samples.slice(-12);
      if (last.length === 12 && Math.max(...last) - Math.min(...last) <= 0.5) break;
      if (Date.now() - t0 > 30_000) break;
    }
    return { rssMB: samples[samples.length - 1]!, settledAfterMs: Date.now() - t0 };
  } finally {
    const gone = new Promise((r) => (child.exitCode === null ? child.once("exit", r) : r(undefined)));
    child.kill("SIGTERM");
    const t = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await gone;
    clearTimeout(t);
    children.delete(child);
  }
}

async function benchRss(url: string, env: NodeJS.ProcessEnv, dir: string) {
  const serverRss = async (facter: boolean) => {
    const cfg = join(dir, `server-facter-${facter}.yaml`);
    writeFileSync(cfg, [`identity: bench-rss-${facter ? "facter" : "nofacter"}.example.net`, `collectives: [${MUSTER}]`, `brokers: ["${url}"]`, `facts:`, `  facter: ${facter}`, `log:`, `  level: warn`, ""].join("\n"));
    return idleRss(process.execPath, [cliPath, "server", "--config", cfg], env, "ready");
  };
  const floor = await idleRss(process.execPath, ["-e", "setInterval(()=>{},1000)"], env);
  const facterFalse = await serverRss(false);
  const facterTrue = await serverRss(true);
  return { floorNodeMB: floor.rssMB, server: { facterFalse, facterTrue }, ratios: { facterFalse: Math.round((facterFalse.rssMB / floor.rssMB) * 100) / 100, facterTrue: Math.round((facterTrue.rssMB / floor.rssMB) * 100) / 100 } };
}

// ---- report ---------------------------------------------------------------------------------

function machine() {
  const nats = spawnSync("nats-server", ["--version"], { encoding: "utf8" }).stdout.trim();
  return { cpu: cpus()[0]?.model ?? "unknown", cores: cpus().length, memGB: Math.round(totalmem() / 2 ** 30), kernel: release(), node: process.version, natsServer: nats, muster: VERSION };
}

const f = (n: number) => (Number.isFinite(n) ? n.toFixed(1) : "n/a");

function report(results: SizeResult[], rss: Awaited<ReturnType<typeof benchRss>> | undefined): string {
  const lines: string[] = [];
  lines.push(`rounds: ${rounds} (after ${warmup} warm-up), discovery idle window ${idleMs} ms; times in ms, median / p90`);
  lines.push("");
  lines.push("| nodes | measure | floor | muster | ratio (median) | complete |");
  lines.push("|---:|---|---:|---:|---:|---|");
  for (const r of results) {
    const all = (xs: number[]) => (xs.every((x) => x === r.nodes) ? "all" : `${Math.min(...xs)}/${r.nodes}`);
    const cell = (s: Series) => `${f(s.median)} / ${f(s.p90)}`;
    lines.push(`| ${r.nodes} | discovery, every node found | ${cell(r.floor.broadcast)} | ${cell(r.muster.discoveryFoundAll)} | ${r.ratios.discoveryFoundAll}x | ${all(r.muster.discoveryFound)} |`);
    lines.push(`| ${r.nodes} | discovery, total incl. ${idleMs} ms idle window | ${cell(r.floor.broadcast)} | ${cell(r.muster.discoveryTotal)} | ${r.ratios.discoveryTotal}x | |`);
    lines.push(`| ${r.nodes} | rpcutil ping, broadcast, every reply | ${cell(r.floor.broadcast)} | ${cell(r.muster.pingBroadcastAll)} | ${r.ratios.pingBroadcastAll}x | ${all(r.muster.pingBroadcastOk)} |`);
    lines.push(`| ${r.nodes} | rpcutil ping, direct to all N, every reply | ${cell(r.floor.direct)} | ${cell(r.muster.pingDirect)} | ${r.ratios.pingDirect}x | ${all(r.muster.pingDirectOk)} |`);
  }
  if (results.length) {
    lines.push("");
    lines.push("node processes' resident memory after the rounds (MB): " + results.map((r) => `N=${r.nodes}: floor ${r.rssMB.floorNodes}, emulator ${r.rssMB.musterNodes}`).join("; "));
  }
  if (rss) {
    lines.push("");
    lines.push("| idle process | VmRSS (MB) | vs bare node |");
    lines.push("|---|---:|---:|");
    lines.push(`| node -e "setInterval(()=>{},1000)" (floor) | ${rss.floorNodeMB} | 1x |`);
    lines.push(`| muster server, facts.facter: false | ${rss.server.facterFalse.rssMB} | ${rss.ratios.facterFalse}x |`);
    lines.push(`| muster server, facts.facter: true | ${rss.server.facterTrue.rssMB} | ${rss.ratios.facterTrue}x |`);
  }
  const big = results.find((r) => r.nodes === 10_000);
  lines.push("");
  lines.push("targets:");
  if (big) {
    lines.push(`  10,000-node discovery finds every node within 3x the floor: ${big.ratios.discoveryFoundAll}x, ${big.muster.discoveryFound.every((x) => x === big.nodes) ? "all found" : "NOT all found"} -> ${big.ratios.discoveryFoundAll <= 3 && big.muster.discoveryFound.every((x) => x === big.nodes) ? "met" : "NOT MET"}`);
    lines.push(`  ping to 10,000 nodes, every reply under 1 s: median ${f(big.muster.pingDirect.median)} ms, p90 ${f(big.muster.pingDirect.p90)} ms -> ${big.muster.pingDirect.p90 < 1000 && big.muster.pingDirectOk.every((x) => x === big.nodes) ? "met" : "NOT MET"}`);
  } else lines.push("  (run with 10000 in --nodes for the node-count targets)");
  if (rss) {
    const worst = Math.max(rss.server.facterFalse.rssMB, rss.server.facterTrue.rssMB);
    lines.push(`  idle muster server under 60 MB resident: ${worst} MB -> ${worst < 60 ? "met" : "NOT MET"}`);
  }
  return lines.join("\n") + "\n";
}

// ---- main -----------------------------------------------------------------------------------

async function main(): Promise<void> {
  // Keys and config in a scratch dir: the bench neither reads nor creates the user's keys.
  const dir = mkdtempSync(join(tmpdir(), "muster-bench-"));
  // No inherited muster settings (a developer's MUSTER_BROKER or MUSTER_CONFIG must not leak in).
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("MUSTER_") && k !== "XDG_CONFIG_HOME") env[k] = v;
  env.MUSTER_CONFIG_DIR = dir;
  process.env.MUSTER_CONFIG_DIR = dir;
  loadOrCreateSigningKey(); // create it once, before children race to
  if (args.profile) mkdirSync(resolve(args.profile), { recursive: true });
  let nats: NatsHandle | undefined;
  const cleanup = async () => {
    for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
    await nats?.stop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  };
  for (const sig of ["SIGINT", "SIGTERM"] as const) {
    process.once(sig, () => {
      void cleanup().finally(() => process.exit(130));
    });
  }
  try {
    // JetStream off: neither side uses it, and the broker is the same for floor and muster.
    nats = await startNats({ jetstream: false });
    const results: SizeResult[] = [];
    for (const n of sizes) {
      process.stderr.write(`bench: ${n} nodes\n`);
      results.push(await benchSize(nats.url, env, n));
    }
    let rss: Awaited<ReturnType<typeof benchRss>> | undefined;
    if (!args["no-rss"]) {
      process.stderr.write("bench: idle resident memory\n");
      rss = await benchRss(nats.url, env, dir);
    }
    const text = report(results, rss);
    process.stdout.write(text);
    mkdirSync(dirname(resolve(args.out!)), { recursive: true });
    writeFileSync(resolve(args.out!), JSON.stringify({ time: new Date().toISOString(), machine: machine(), options: { nodes: sizes, rounds, warmup, idleMs }, results, rss, report: text.split("\n") }, null, 2) + "\n");
    process.stderr.write(`bench: wrote ${resolve(args.out!)}\n`);
  } finally {
    await cleanup();
  }
}

main().catch((e) => {
  process.stderr.write(`bench failed: ${(e as Error).stack ?? String(e)}\n`);
  process.exitCode = 1;
});
