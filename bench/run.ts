// `npm run bench`: the collective's speed and memory, each beside a floor measured in the same run.
//
//   node dist/bench/run.js [--nodes 1000,10000] [--rounds 5] [--warmup 1] [--idle-ms 250]
//                          [--no-rss | --rss-only] [--profile DIR] [--out bench/results/latest.json]
//
// For each node count N it starts two child processes on one nats-server: the bare NATS floor and
// the muster emulator, each hosting N nodes behind one connection (bench/nodes.ts). This process
// is the client, on its own connections. Rounds interleave floor and muster so both see the same
// machine state. Then it measures the resident memory of an idle `muster server` beside an idle
// bare node process. What each number means: docs/bench.md.

import { fork, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, release, tmpdir, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { connect, createInbox, type NatsConnection } from "@nats-io/transport-node";
import { MusterClient } from "../src/client/client.js";
import { generateFleet } from "../src/emulator/fleet.js";
import { startNats, type NatsHandle } from "../src/lab/nats.js";
import { encodeReply, encodeRequest } from "../src/protocol/envelope.js";
import { emptyFilter, REPLY_PROTOCOL } from "../src/protocol/types.js";
import { buildRequest } from "../src/client/request.js";
import { DEFAULT_NODE_KEYS_BUCKET } from "../src/protocol/buckets.js";
import { encodeNodeKeyEntry, nodeKeyName } from "../src/protocol/node-keys.js";
import { fastest } from "../src/protocol/ed25519.js";
import { signMessage } from "../src/protocol/signing.js";
import { benchNodeKey } from "./node-keys.js";
import { loadOrCreateSigningKey } from "../src/security/keys.js";
import { ensureCA, issueCert } from "../src/security/pki.js";
import { VERSION } from "../src/version.js";
import { idleRss, IDLE_MIN_MS, rssMB } from "./idle-rss.js";
import { benchDir as here, cliPath, repoRoot } from "./paths.js";


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
// Other work on the machine shows up here: the figures are only comparable between quiet runs.
const loadavgAtStart = loadavg();
const FLOOR = "benchfloor";
const MUSTER = "bench";
/** The unsigned emulator's collective: the same identities, kept apart from the signing emulator's. */
const UNSIGNED = "benchunsigned";
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
  /** CPU time (user + system) the process has used so far, ms. */
  cpu(): Promise<number>;
  stop(): Promise<void>;
}

async function startNodes(mode: "floor" | "muster" | "unsigned", count: number, url: string, env: NodeJS.ProcessEnv, replyBytes = 0): Promise<NodesProcess> {
  const execArgv = args.profile ? ["--cpu-prof", `--cpu-prof-dir=${resolve(args.profile)}`, `--cpu-prof-name=${mode}-${count}-${Date.now()}.cpuprofile`] : [];
  const child = fork(join(here, "nodes.js"), [mode, String(count), url, mode === "floor" ? FLOOR : mode === "unsigned" ? UNSIGNED : MUSTER, String(replyBytes)], { env, execArgv, stdio: ["ignore", "inherit", "inherit", "ipc"] });
  children.add(child);
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const waiting: ((ms: number) => void)[] = [];
  await new Promise<void>((ok, fail) => {
    // Starting 50,000 emulated nodes takes longer than the minute that suits 10,000.
    const readyMs = Math.max(TIMEOUT_MS, count * 4);
    const t = setTimeout(() => fail(new Error(`${mode} nodes (${count}) not ready after ${readyMs} ms`)), readyMs);
    child.on("message", (m: { type?: string; ms?: number }) => {
      if (m.type === "ready") {
        clearTimeout(t);
        ok();
      } else if (m.type === "cpu") waiting.shift()?.(m.ms ?? NaN);
    });
    child.once("exit", (code) => {
      clearTimeout(t);
      fail(new Error(`${mode} nodes (${count}) exited with ${code} before ready`));
    });
  });
  return {
    pid: child.pid!,
    cpu: () =>
      new Promise<number>((r) => {
        waiting.push(r);
        child.send({ type: "cpu" });
      }),
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

/**
 * Publishes once (broadcast) or once per node (direct) with a reply inbox; resolves when all N
 * distinct nodes answered. `prefix` picks the floor's muster-sized or bare subjects.
 */
function floorRound(nc: NatsConnection, prefix: string, identities: string[], kind: "broadcast" | "direct", payload: Uint8Array, verify?: FloorVerifier): Promise<number> {
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
        // the signed floor's reply is its body, then the node's signature over body and inbox
        const id = verify ? verify(msg.data, inbox) : paddedIdentity(msg.data);
        if (id !== undefined) seen.add(id);
        if (seen.size === want) {
          const ms = performance.now() - t0;
          clearTimeout(timer);
          sub.unsubscribe();
          ok(ms);
        }
      },
    });
    if (kind === "broadcast") nc.publish(`${prefix}.broadcast.agent.ping`, payload, { reply: inbox });
    else for (const id of identities) nc.publish(`${prefix}.node.${id}`, payload, { reply: inbox });
  });
}

/** The identity a floor reply names: its text up to the padding. */
function paddedIdentity(body: Uint8Array): string {
  const text = dec.decode(body);
  const pad = text.indexOf(" ");
  return pad < 0 ? text : text.slice(0, pad);
}

/** Checks one signed floor reply; the identity it is from when its signature verifies. */
type FloorVerifier = (data: Uint8Array, inbox: string) => string | undefined;

/**
 * The bare client's verification for the signed floor (issue 39's floor: one request, N signed
 * replies, all verified by a bare client): each node's public key parsed once, as muster's key
 * cache does, then per reply the identity read from the body and the signature checked over the
 * body and the inbox with the same ed25519 backend muster uses. Nothing else: no envelope, no JSON.
 */
function floorVerifier(identities: string[]): FloorVerifier {
  const ed = fastest();
  const keys = new Map(identities.map((id) => [id, ed.publicKey(Buffer.from(benchNodeKey(id).publicKey, "base64"))]));
  return (data, inbox) => {
    if (data.length <= 64) return undefined;
    const body = Buffer.from(data.buffer, data.byteOffset, data.length - 64);
    const sig = Buffer.from(data.buffer, data.byteOffset + data.length - 64, 64);
    const id = paddedIdentity(body);
    const key = keys.get(id);
    return key !== undefined && ed.verify(key, Buffer.concat([body, Buffer.from(inbox)]), sig) ? id : undefined;
  };
}

// ---- muster ---------------------------------------------------------------------------------

interface Outcome {
  /** ms until the last of the N nodes answered (NaN if some never did). */
  ms: number;
  /** ms until the call returned: for broadcasts, the last reply plus the idle window. */
  totalMs: number;
  /** distinct nodes that answered (OK status for muster). */
  answered: number;
  /** broadcast discovery: the longest silence between two replies, ms (what the idle window must outlast). */
  maxGapMs?: number;
}

async function musterDiscovery(client: MusterClient, want: number): Promise<Outcome> {
  let n = 0;
  let ms = NaN;
  let last = NaN;
  let maxGapMs = 0;
  const t0 = performance.now();
  const found = await client.discover({
    timeoutMs: TIMEOUT_MS,
    idleMs,
    onFound: () => {
      const t = performance.now();
      if (n > 0) maxGapMs = Math.max(maxGapMs, t - last);
      last = t;
      if (++n === want) ms = t - t0;
    },
  });
  return { ms, totalMs: performance.now() - t0, answered: found.length, maxGapMs };
}

async function musterPingBroadcast(client: MusterClient, want: number): Promise<Outcome> {
  let n = 0;
  let ms = NaN;
  const t0 = performance.now();
  const replies = await client.broadcastRequest("rpcutil", "ping", {}, emptyFilter(), {
    timeoutMs: TIMEOUT_MS,
    idleMs,
    onReply: (r) => {
      if (r.statuscode === 0 && ++n === want) ms = performance.now() - t0;
    },
  });
  return { ms, totalMs: performance.now() - t0, answered: replies.filter((r) => r.statuscode === 0).length };
}

/** With verification on, a node counts as answered only when its reply is proven: its signature, by the key the directory names. */
async function musterPingDirect(client: MusterClient, nodes: string[], verified: boolean): Promise<Outcome> {
  const t0 = performance.now();
  const res = await client.call("rpcutil", "ping", {}, { nodes, timeoutMs: TIMEOUT_MS });
  const ms = performance.now() - t0;
  const answered = verified ? Math.min(res.stats.ok, res.stats.verified) : res.stats.ok;
  return { ms: answered === nodes.length ? ms : NaN, totalMs: ms, answered };
}

/** The node-key directory filled with the keys the bench's emulated nodes sign with (bench/node-keys.ts). */
async function fillKeyDirectory(client: MusterClient, identities: string[]): Promise<void> {
  const kv = await client.bucket(DEFAULT_NODE_KEYS_BUCKET, { create: { history: 1 } });
  for (let i = 0; i < identities.length; i += 500) {
    await Promise.all(identities.slice(i, i + 500).map((id) => kv.put(nodeKeyName(id), encodeNodeKeyEntry({ identity: id, pubkey: benchNodeKey(id).publicKey, source: "certified", time: Date.now(), by: "bench" }))));
  }
}

// ---- one node count -------------------------------------------------------------------------

const MEASURES = {
  floorBroadcast: "floor: one request, N replies",
  floorDirect: "floor: N requests, N replies",
  floorBroadcastBare: "bare floor: one request, N replies",
  floorBroadcastSigned: "signed floor: one request, N replies, each signed by its node",
  floorBroadcastVerified: "verified floor: one request, N replies, each signed by its node and verified by a bare client",
  floorDirectBare: "bare floor: N requests, N replies",
  discoveryUnsigned: "before issue 13: muster discovery, replies unsigned",
  discovery: "muster discovery (broadcast discovery#ping)",
  pingBroadcast: "muster rpcutil ping, broadcast",
  pingDirect: "muster rpcutil ping, directly to all N, every reply verified",
  pingDirectUnsigned: "before issue 13: muster rpcutil ping, directly to all N, replies unsigned",
  pingDirectUnverified: "muster rpcutil ping, directly to all N, not verified",
} as const;
type MeasureKey = keyof typeof MEASURES;

interface Measure {
  /** ms until every node answered */
  ms: Series;
  /** broadcast discovery only: longest silence between two replies, ms */
  maxGapMs?: Series;
  /** ms until the call returned */
  totalMs: Series;
  /** distinct nodes that answered, per round */
  answered: number[];
  /** CPU ms of the process hosting the nodes during the measurement */
  nodesCpuMs: Series;
  /** CPU ms of this (client) process during the measurement */
  clientCpuMs: Series;
}

interface SizeResult {
  nodes: number;
  measures: Record<MeasureKey, Measure>;
  /** muster median / its floor's median (the muster-sized floor; `bare*`: the bare floor) */
  ratios: {
    discovery: number;
    discoveryTotal: number;
    pingBroadcast: number;
    pingDirect: number;
    /** issue 39: rpcutil ping to all N, every reply verified, over one request's N signed replies verified by a bare client */
    verifiedPingDirect: number;
    pingDirectUnverified: number;
    bareDiscovery: number;
    signedDiscovery: number;
    discoveryUnsigned: number;
    pingDirectUnsigned: number;
    barePingBroadcast: number;
    barePingDirect: number;
    nodesCpuDiscovery: number;
    nodesCpuPingDirect: number;
  };
  /** payload sizes, bytes: muster's signed request and discovery reply (the floor sends the same) */
  bytes: { request: number; reply: number };
  rssMB: { floorNodes: number; musterNodes: number };
}

const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;

async function benchSize(url: string, env: NodeJS.ProcessEnv, count: number): Promise<SizeResult> {
  const identities = generateFleet(count).map((n) => n.identity);
  // The floor moves as many bytes as muster: requests as large as muster's signed request, replies
  // as large as a signed discovery reply. The bare floor sends an empty request and bare identities.
  const key = loadOrCreateSigningKey();
  const requestBytes = encodeRequest(buildRequest({ key, collective: MUSTER, agent: "rpcutil", action: "ping", data: {}, filter: emptyFilter(), ttl: 60 })).length;
  const now = Date.now();
  const last = identities[identities.length - 1]!;
  const replyBytes = encodeReply(signMessage({ protocol: REPLY_PROTOCOL, requestid: "0".repeat(32), sender: last, agent: "discovery", action: "ping", time: now, statuscode: 0, statusmsg: "OK", data: { pong: now } }, benchNodeKey(last))).length;
  const floorNodes = await startNodes("floor", count, url, env, replyBytes);
  let musterNodes: NodesProcess | undefined;
  let unsignedNodes: NodesProcess | undefined;
  let unsignedClient: MusterClient | undefined;
  const floorNc = await connect({ servers: url, name: "bench-floor-client" });
  let client: MusterClient | undefined;
  let unverifiedClient: MusterClient | undefined;
  try {
    musterNodes = await startNodes("muster", count, url, env);
    unsignedNodes = await startNodes("unsigned", count, url, env);
    const before = (unsignedClient = await MusterClient.connect({ brokers: [url], collective: UNSIGNED, name: "bench-client-before", key, verify: false }));
    const mc = (client = await MusterClient.connect({ brokers: [url], collective: MUSTER, name: "bench-client", key }));
    unverifiedClient = await MusterClient.connect({ brokers: [url], collective: MUSTER, name: "bench-client-unverified", key, verify: false });
    const uc = unverifiedClient;
    await fillKeyDirectory(mc, identities);
    const verifier = floorVerifier(identities);
    const floorOnce = async (prefix: string, kind: "broadcast" | "direct", payload: Uint8Array, verify?: FloorVerifier): Promise<Outcome> => {
      const ms = await floorRound(floorNc, prefix, identities, kind, payload, verify);
      return { ms, totalMs: ms, answered: count };
    };
    const sized = new Uint8Array(requestBytes);
    const bare = new Uint8Array(0);
    const plan: [MeasureKey, NodesProcess, () => Promise<Outcome>][] = [
      ["floorBroadcast", floorNodes, () => floorOnce(FLOOR, "broadcast", sized)],
      ["floorBroadcastBare", floorNodes, () => floorOnce(`${FLOOR}min`, "broadcast", bare)],
      ["floorBroadcastSigned", floorNodes, () => floorOnce(`${FLOOR}sig`, "broadcast", sized)],
      ["floorBroadcastVerified", floorNodes, () => floorOnce(`${FLOOR}sig`, "broadcast", sized, verifier)],
      ["discoveryUnsigned", unsignedNodes, () => musterDiscovery(before, count)],
      ["discovery", musterNodes, () => musterDiscovery(mc, count)],
      ["pingBroadcast", musterNodes, () => musterPingBroadcast(mc, count)],
      ["floorDirect", floorNodes, () => floorOnce(FLOOR, "direct", sized)],
      ["floorDirectBare", floorNodes, () => floorOnce(`${FLOOR}min`, "direct", bare)],
      ["pingDirectUnsigned", unsignedNodes, () => musterPingDirect(before, identities, false)],
      ["pingDirectUnverified", musterNodes, () => musterPingDirect(uc, identities, false)],
      ["pingDirect", musterNodes, () => musterPingDirect(mc, identities, true)],
    ];
    const raw = Object.fromEntries(Object.keys(MEASURES).map((k) => [k, { ms: [] as number[], totalMs: [] as number[], answered: [] as number[], nodesCpuMs: [] as number[], clientCpuMs: [] as number[], maxGapMs: [] as number[] }])) as Record<MeasureKey, { ms: number[]; totalMs: number[]; answered: number[]; nodesCpuMs: number[]; clientCpuMs: number[]; maxGapMs: number[] }>;
    for (let r = -warmup; r < rounds; r++) {
      const parts: string[] = [];
      for (const [key, nodes, run] of plan) {
        const n0 = await nodes.cpu();
        const c0 = process.cpuUsage();
        const o = await run();
        const c = process.cpuUsage(c0);
        const n1 = await nodes.cpu();
        parts.push(`${key} ${f(o.ms)}${o.totalMs !== o.ms ? `/${f(o.totalMs)}` : ""} ms${o.answered !== count ? ` (${o.answered}/${count})` : ""}`);
        if (r < 0) continue;
        const x = raw[key];
        x.ms.push(o.ms);
        x.totalMs.push(o.totalMs);
        x.answered.push(o.answered);
        x.nodesCpuMs.push(n1 - n0);
        x.clientCpuMs.push((c.user + c.system) / 1000);
        if (o.maxGapMs !== undefined) x.maxGapMs.push(o.maxGapMs);
      }
      process.stderr.write(`  N=${count} ${r < 0 ? "warm-up" : `round ${r + 1}/${rounds}`}: ${parts.join(", ")}\n`);
    }
    const measures = Object.fromEntries(
      Object.entries(raw).map(([k, x]) => [k, { ms: series(x.ms), totalMs: series(x.totalMs), answered: x.answered, nodesCpuMs: series(x.nodesCpuMs), clientCpuMs: series(x.clientCpuMs), ...(x.maxGapMs.length ? { maxGapMs: series(x.maxGapMs) } : {}) }]),
    ) as Record<MeasureKey, Measure>;
    const m = measures;
    return {
      nodes: count,
      measures,
      ratios: {
        discovery: ratio(m.discovery.ms.median, m.floorBroadcast.ms.median),
        discoveryTotal: ratio(m.discovery.totalMs.median, m.floorBroadcast.ms.median),
        pingBroadcast: ratio(m.pingBroadcast.ms.median, m.floorBroadcast.ms.median),
        pingDirect: ratio(m.pingDirect.ms.median, m.floorDirect.ms.median),
        verifiedPingDirect: ratio(m.pingDirect.ms.median, m.floorBroadcastVerified.ms.median),
        pingDirectUnverified: ratio(m.pingDirectUnverified.ms.median, m.floorDirect.ms.median),
        bareDiscovery: ratio(m.discovery.ms.median, m.floorBroadcastBare.ms.median),
        signedDiscovery: ratio(m.discovery.ms.median, m.floorBroadcastSigned.ms.median),
        discoveryUnsigned: ratio(m.discoveryUnsigned.ms.median, m.floorBroadcast.ms.median),
        pingDirectUnsigned: ratio(m.pingDirectUnsigned.ms.median, m.floorDirect.ms.median),
        barePingBroadcast: ratio(m.pingBroadcast.ms.median, m.floorBroadcastBare.ms.median),
        barePingDirect: ratio(m.pingDirect.ms.median, m.floorDirectBare.ms.median),
        nodesCpuDiscovery: ratio(m.discovery.nodesCpuMs.median, m.floorBroadcast.nodesCpuMs.median),
        nodesCpuPingDirect: ratio(m.pingDirect.nodesCpuMs.median, m.floorDirect.nodesCpuMs.median),
      },
      rssMB: { floorNodes: rssMB(floorNodes.pid), musterNodes: rssMB(musterNodes.pid) },
      bytes: { request: requestBytes, reply: replyBytes },
    };
  } finally {
    await client?.close();
    await unverifiedClient?.close();
    await unsignedClient?.close();
    await floorNc.close().catch(() => undefined);
    await musterNodes?.stop();
    await unsignedNodes?.stop();
    await floorNodes.stop();
  }
}

// ---- idle resident memory (bench/idle-rss.ts) --------------------------------------------------

async function benchRss(url: string, env: NodeJS.ProcessEnv, dir: string) {
  // The same node over TLS with a client certificate, as the lab and production run it.
  const ca = ensureCA(join(dir, "pki"));
  const tlsNats = await startNats({ jetstream: false, tls: { ...issueCert(ca, { name: "nats", subject: "/CN=nats", ips: ["127.0.0.1"], dns: ["localhost"], usage: "server" }), ca: ca.cert, clients: "verify" } });
  const client = issueCert(ca, { name: "node", subject: "/CN=bench-rss-tls.example.net", usage: "client" });
  const serverRss = async (facter: boolean, tls = false) => {
    const name = `${facter ? "facter" : "nofacter"}${tls ? "-tls" : ""}`;
    const cfg = join(dir, `server-${name}.yaml`);
    const tlsLines = tls ? [`tls:`, `  ca: ${ca.cert}`, `  cert: ${client.cert}`, `  key: ${client.key}`] : [];
    writeFileSync(cfg, [`identity: bench-rss-${name}.example.net`, `collectives: [${MUSTER}]`, `brokers: ["${tls ? tlsNats.url : url}"]`, `facts:`, `  facter: ${facter}`, `log:`, `  level: warn`, ...tlsLines, ""].join("\n"));
    return idleRss(process.execPath, [cliPath, "server", "--config", cfg], env, { readyText: "ready", children });
  };
  try {
    // Side by side: the four wait out the same idle time together.
    const [floor, facterFalse, facterTrue, facterFalseTls] = await Promise.all([idleRss(process.execPath, ["-e", "setInterval(()=>{},1000)"], env, { children }), serverRss(false), serverRss(true), serverRss(false, true)]);
    return {
      floor,
      server: { facterFalse, facterTrue, facterFalseTls },
      ratios: { facterFalse: ratio(facterFalse.rssMB, floor.rssMB), facterTrue: ratio(facterTrue.rssMB, floor.rssMB), facterFalseTls: ratio(facterFalseTls.rssMB, floor.rssMB) },
    };
  } finally {
    await tlsNats.stop();
  }
}

// ---- report ---------------------------------------------------------------------------------

function machine() {
  const nats = spawnSync("nats-server", ["--version"], { encoding: "utf8" }).stdout.trim();
  return { cpu: cpus()[0]?.model ?? "unknown", cores: cpus().length, memGB: Math.round(totalmem() / 2 ** 30), kernel: release(), node: process.version, natsServer: nats, muster: VERSION, loadavgAtStart, loadavgAtEnd: loadavg() };
}

function f(n: number): string {
  return Number.isFinite(n) ? n.toFixed(1) : "n/a";
}

function report(results: SizeResult[], rss: Awaited<ReturnType<typeof benchRss>> | undefined, m: ReturnType<typeof machine>): string {
  const lines: string[] = [];
  const la = (xs: number[]) => xs.map((x) => x.toFixed(2)).join(" ");
  lines.push(`machine: ${m.cores} x ${m.cpu}, ${m.memGB} GB, Linux ${m.kernel}, node ${m.node}, ${m.natsServer}; load average at start ${la(m.loadavgAtStart)}, at end ${la(m.loadavgAtEnd)}`);
  lines.push(`rounds: ${rounds} (after ${warmup} warm-up); discovery idle window ${idleMs} ms; ms, median / p90 over the rounds`);
  lines.push("");
  lines.push("| nodes | measure | every node answered | call returned | vs floor (vs bare floor) | answered | nodes' CPU ms | client CPU ms |");
  lines.push("|---:|---|---:|---:|---:|---|---:|---:|");
  for (const r of results) {
    const q = r.ratios;
    const vs: Partial<Record<MeasureKey, string>> = { discoveryUnsigned: `${q.discoveryUnsigned}x`, pingDirectUnsigned: `${q.pingDirectUnsigned}x`, discovery: `${q.discovery}x (${q.bareDiscovery}x); ${q.signedDiscovery}x signed`, pingBroadcast: `${q.pingBroadcast}x (${q.barePingBroadcast}x)`, pingDirect: `${q.pingDirect}x (${q.barePingDirect}x); ${q.verifiedPingDirect}x verified`, pingDirectUnverified: `${q.pingDirectUnverified}x` };
    for (const key of Object.keys(MEASURES) as MeasureKey[]) {
      const m = r.measures[key];
      const all = m.answered.every((x) => x === r.nodes) ? "all" : `min ${Math.min(...m.answered)}/${r.nodes}`;
      const total = m.totalMs.median === m.ms.median ? "" : `${f(m.totalMs.median)} / ${f(m.totalMs.p90)}`;
      lines.push(`| ${r.nodes} | ${MEASURES[key]} | ${f(m.ms.median)} / ${f(m.ms.p90)} | ${total} | ${vs[key] ?? ""} | ${all} | ${f(m.nodesCpuMs.median)} | ${f(m.clientCpuMs.median)} |`);
    }
  }
  if (results.length) {
    lines.push("");
    lines.push("ratios: muster's median over its floor's median; discovery and broadcast ping over the one-request floor, direct ping over the N-request floor.");
    lines.push("the signed floor is the one-request floor with one ed25519 signature per reply, by its node's key: the cost issue 13 adds that no implementation avoids; discovery's ratio to it is marked \"signed\".");
    lines.push("the floor carries muster-sized payloads (" + results.map((r) => `N=${r.nodes}: request ${r.bytes.request} B, reply ${r.bytes.reply} B`).join("; ") + "); the bare floor an empty request and bare identities.");
    lines.push("longest silence between two discovery replies (ms, median / p90; the idle window must outlast it): " + results.map((r) => `N=${r.nodes}: ${f(r.measures.discovery.maxGapMs?.median ?? NaN)} / ${f(r.measures.discovery.maxGapMs?.p90 ?? NaN)}`).join("; "));
    lines.push("resident memory of the node processes after the rounds (MB): " + results.map((r) => `N=${r.nodes}: floor ${r.rssMB.floorNodes}, emulator ${r.rssMB.musterNodes}`).join("; "));
  }
  if (rss) {
    lines.push("");
    lines.push(`| idle process (VmRSS, MB) | at ready | idle (>= ${IDLE_MIN_MS / 1000} s, settled) | idle vs bare node |`);
    lines.push("|---|---:|---:|---:|");
    lines.push(`| node -e "setInterval(()=>{},1000)" (floor) | ${rss.floor.readyRssMB} | ${rss.floor.rssMB} | 1x |`);
    lines.push(`| muster server, facts.facter: false | ${rss.server.facterFalse.readyRssMB} | ${rss.server.facterFalse.rssMB} | ${rss.ratios.facterFalse}x |`);
    lines.push(`| muster server, facts.facter: true | ${rss.server.facterTrue.readyRssMB} | ${rss.server.facterTrue.rssMB} | ${rss.ratios.facterTrue}x |`);
    lines.push(`| muster server, facts.facter: false, TLS with a client certificate | ${rss.server.facterFalseTls.readyRssMB} | ${rss.server.facterFalseTls.rssMB} | ${rss.ratios.facterFalseTls}x |`);
  }
  const big = results.find((r) => r.nodes === 10_000);
  lines.push("");
  lines.push("targets:");
  if (big) {
    const d = big.measures.discovery;
    const p = big.measures.pingDirect;
    const allFound = d.answered.every((x) => x === big.nodes);
    const allPinged = p.answered.every((x) => x === big.nodes);
    lines.push(`  10,000-node discovery finds every node within 3x the floor: ${big.ratios.discovery}x, ${allFound ? "every node found in every round" : "NOT every node found"} -> ${big.ratios.discovery <= 3 && allFound ? "met" : "NOT MET"}`);
    lines.push(`  (since issue 13 every reply is signed; over the signed floor discovery is ${big.ratios.signedDiscovery}x -> ${big.ratios.signedDiscovery <= 3 && allFound ? "within 3x" : "NOT within 3x"})`);
    const u = big.measures.pingDirectUnverified;
    lines.push(`  rpcutil ping to 10,000 nodes, every reply verified, under 1 s: median ${f(p.ms.median)} ms, p90 ${f(p.ms.p90)} ms (not verified: median ${f(u.ms.median)} ms; before issue 13, unsigned: ${f(big.measures.pingDirectUnsigned.ms.median)} ms) -> ${p.ms.p90 < 1000 && allPinged ? "met" : "NOT MET"}`);
  } else lines.push("  (include 10000 in --nodes for the node-count targets)");
  const huge = results.find((r) => r.nodes === 50_000);
  if (huge) {
    const p = huge.measures.pingDirect;
    const v = huge.measures.floorBroadcastVerified;
    const all = p.answered.every((x) => x === huge.nodes) && v.answered.every((x) => x === huge.nodes);
    lines.push(`  rpcutil ping of 50,000 nodes, every reply verified, within 2x one request's 50,000 signed replies verified by a bare client (issue 39): ${f(p.ms.median)} ms over ${f(v.ms.median)} ms, ${huge.ratios.verifiedPingDirect}x -> ${huge.ratios.verifiedPingDirect <= 2 && all ? "met" : "NOT MET"}`);
  }
  if (rss) {
    const worst = Math.max(rss.server.facterFalse.rssMB, rss.server.facterTrue.rssMB, rss.server.facterFalseTls.rssMB);
    lines.push(`  idle muster server under 60 MB resident: ${worst} MB at most -> ${worst < 60 ? "met" : "NOT MET"}`);
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
    nats = await startNats({ jetstream: true }); // the node-key directory the verifying client reads
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
    const mach = machine();
    const text = report(results, rss, mach);
    process.stdout.write(text);
    mkdirSync(dirname(resolve(args.out!)), { recursive: true });
    writeFileSync(resolve(args.out!), JSON.stringify({ time: new Date().toISOString(), machine: mach, options: { nodes: sizes, rounds, warmup, idleMs }, results, rss, report: text.split("\n") }, null, 2) + "\n");
    process.stderr.write(`bench: wrote ${resolve(args.out!)}\n`);
  } finally {
    await cleanup();
  }
}

main().catch((e) => {
  process.stderr.write(`bench failed: ${(e as Error).stack ?? String(e)}\n`);
  process.exitCode = 1;
});
