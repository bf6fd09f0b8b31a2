// `npm run bench:puppetdb` (under the heavy lock): discovery from PuppetDB against discovery from
// the registry and broadcast discovery, same run, same 10,000 nodes, same filters.
//
//   node dist/bench/puppetdb.js [--nodes 10000] [--rounds 5] [--warmup 1] [--idle-ms 250]
//                               [--heap 1g] [--out bench/results/puppetdb-latest.json]
//
// One nats-server (JetStream); a real PuppetDB (Debian's package, its own PostgreSQL: test/support/
// puppetdb.ts) with C2 on, as in production; the registry daemon (`muster registry serve`, the real
// CLI) with `puppetdb:` pointing at it; N emulated nodes in a child process (bench/registry-nodes.ts),
// which register once and answer broadcasts. The same N nodes' facts and catalogs (their classes)
// go into PuppetDB through its command API, as a master's puppet-terminus-puppetdb sends them. For
// each filter, rounds interleave:
//   broadcast        discovery#ping to every node; completes idle-ms after the last reply
//   registry         --dm registry (the daemon's memory)
//   puppetdb         --dm puppetdb (the daemon asks PuppetDB)
//   puppetdb-direct  the same PQL from this process straight to PuppetDB (the registry hop left out)
// Every round checks all four found the same nodes. Reported: medians, the ratios broadcast /
// puppetdb and registry / puppetdb, PuppetDB's start-up time and memory, how long the load took.

import { fork, spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { MusterClient } from "../src/client/client.js";
import type { NodeSource } from "../src/client/discovery/source.js";
import { generateFleet } from "../src/emulator/fleet.js";
import { buildFilter, type FilterOptions } from "../src/filter/index.js";
import { startNats } from "../src/lab/nats.js";
import { discoverInPuppetDb } from "../src/puppetdb/discover.js";
import { startPuppetDb } from "../test/support/puppetdb.js";
import { discoveryBenchArgs, reportHead, round2, stats } from "./discovery-args.js";
import { benchDir as here, cliPath } from "./paths.js";

const { nodes: N, rounds, warmup, idleMs, out, extra } = discoveryBenchArgs("puppetdb", { heap: "1g" });
const heap = extra.heap ?? "1g";

const BUCKET = "bench-puppetdb";
const COLLECTIVE = "muster";
const TIMEOUT_MS = 300_000;
const FILTERS: Record<string, FilterOptions> = {
  all: {},
  fact: { fact: ["country=de"] },
  class: { class: ["web"] },
  compound: { select: ["(country=de or country=uk) and web and processorcount>4"] },
  // the emulated fleet's release is the string "12": compared as a number, decided by muster's matcher
  numeric: { fact: ["os.release.major>=12", "environment=staging"] },
};

function waitReady(c: ChildProcess, what: string, via: "stdout" | "ipc"): Promise<void> {
  return new Promise<void>((ok, fail) => {
    const t = setTimeout(() => fail(new Error(`${what} not ready`)), TIMEOUT_MS);
    const done = () => (clearTimeout(t), ok());
    if (via === "stdout") c.stdout!.on("data", (d: Buffer) => /ready/.test(d.toString()) && done());
    else c.on("message", (m: { type?: string }) => m.type === "ready" && done());
    c.once("exit", (code) => fail(new Error(`${what} exited with ${code}`)));
  });
}

const tmp = mkdtempSync(join(tmpdir(), "muster-bench-puppetdb-"));
process.env.MUSTER_CONFIG_DIR = join(tmp, "keys");
const children: ChildProcess[] = [];
process.on("exit", () => children.forEach((c) => c.exitCode === null && c.kill("SIGKILL")));
const nats = await startNats({});
const t0 = performance.now();
const pdb = await startPuppetDb({ heap: heap, quickJit: false, readyTimeoutMs: TIMEOUT_MS });
const pdbStartMs = Math.round(performance.now() - t0);
const rssAtStart = Math.round(pdb.rssKb() / 1024);
try {
  process.stdout.write(`PuppetDB running ${pdb.startMs} ms after its JVM started (${pdbStartMs} ms with its PostgreSQL), resident memory ${Math.round(pdb.rssKb() / 1024)} MiB\n`);
  // N nodes' facts and catalogs, submitted a few at a time, then PuppetDB's queue drained
  const fleet = generateFleet(N);
  const l0 = performance.now();
  const at = new Date().toISOString();
  let next = 0;
  const submit = async () => {
    while (next < fleet.length) {
      const n = fleet[next++]!;
      const facts = { ...n.facts, muster: { agents: { discovery: true, rpcutil: true }, collectives: { [COLLECTIVE]: true } } };
      await pdb.db.command("replace facts", 5, n.identity, { certname: n.identity, environment: "production", producer_timestamp: at, producer: "bench", values: facts });
      const resources = n.classes.map((c) => ({ type: "Class", title: c.split("::").map((s) => s.charAt(0).toUpperCase() + s.slice(1)).join("::"), exported: false, tags: ["class", c, ...c.split("::")], parameters: {} }));
      await pdb.db.command("replace catalog", 9, n.identity, { certname: n.identity, version: "1", environment: "production", transaction_uuid: crypto.randomUUID(), catalog_uuid: crypto.randomUUID(), producer_timestamp: at, producer: "bench", code_id: null, job_id: null, resources, edges: [] });
    }
  };
  await Promise.all(Array.from({ length: 16 }, submit));
  const submittedMs = Math.round(performance.now() - l0);
  await pdb.settled(TIMEOUT_MS * 4);
  for (const until = Date.now() + TIMEOUT_MS; ; ) {
    const [facts, catalogs] = await Promise.all(["factsets[count()] {}", "catalogs[count()] {}"].map(async (q) => ((await pdb.db.query(q))[0] as { count?: number } | undefined)?.count));
    if (facts === N && catalogs === N) break;
    if (Date.now() > until) throw new Error(`PuppetDB holds ${facts} factsets and ${catalogs} catalogs of ${N}`);
    await new Promise((r) => setTimeout(r, 500)); // what PuppetDB stored is counted by asking it
  }
  const loadMs = Math.round(performance.now() - l0);
  const rssAfterLoad = Math.round(pdb.rssKb() / 1024);
  process.stdout.write(`PuppetDB took in ${N} nodes' facts and catalogs in ${loadMs} ms (submitted in ${submittedMs} ms); resident memory ${rssAfterLoad} MiB\n`);

  const cfgFile = join(tmp, "registry.yaml");
  writeFileSync(cfgFile, JSON.stringify({ broker: nats.url, collectives: [COLLECTIVE], bucket: BUCKET, max_age: 3600, log: { level: "warn" }, puppetdb: { url: pdb.url, timeout: 120 } }));
  const reg = spawn(process.execPath, [cliPath, "registry", "serve", "--config", cfgFile], { stdio: ["ignore", "pipe", "inherit"], env: process.env });
  children.push(reg);
  await waitReady(reg, "registry daemon", "stdout");
  const nodes = fork(join(here, "registry-nodes.js"), [String(N), nats.url, COLLECTIVE], { stdio: ["ignore", "inherit", "inherit", "ipc"], env: process.env });
  children.push(nodes);
  await waitReady(nodes, "nodes", "ipc");
  const client = await MusterClient.connect({ brokers: [nats.url], collective: COLLECTIVE, name: "bench-puppetdb-client" });
  // the registry fills from the nodes' registrations
  const registry = await client.registry({ bucket: BUCKET, via: "service" });
  for (const until = Date.now() + TIMEOUT_MS; ; ) {
    if ((await registry.discover(buildFilter({}), { timeoutMs: 30_000, idleMs })).length >= N) break;
    if (Date.now() > until) throw new Error("the registry did not fill");
    await new Promise((r) => setTimeout(r, 500)); // the registry's fill is counted by asking it
  }

  const direct: NodeSource = { name: "puppetdb-direct", discover: async (f) => (await discoverInPuppetDb(pdb.db, f, { collective: COLLECTIVE })).identities };
  const sources: Record<string, NodeSource | undefined> = { broadcast: undefined, registry, puppetdb: await client.source({ method: "puppetdb", bucket: BUCKET }), "puppetdb-direct": direct };
  const results: Record<string, Record<string, { ms: ReturnType<typeof stats>; found: number }>> = {};
  const ratios: Record<string, { broadcastOverPuppetdb: number; puppetdbOverRegistry: number; hop: number }> = {};
  for (const [fname, fopts] of Object.entries(FILTERS)) {
    const filter = buildFilter(fopts);
    const ms: Record<string, number[]> = {};
    const found: Record<string, number> = {};
    for (let r = 0; r < warmup + rounds; r++) {
      let reference: string[] | undefined;
      for (const [sname, source] of Object.entries(sources)) {
        const s = performance.now();
        const ids = [...new Set(await client.discover({ filter, source, timeoutMs: 60_000, idleMs }))].sort();
        const took = performance.now() - s;
        if (reference === undefined) reference = ids;
        else if (ids.length !== reference.length || ids.some((id, i) => id !== reference![i])) throw new Error(`${fname}: ${sname} found ${ids.length} nodes, broadcast ${reference.length}`);
        found[sname] = ids.length;
        if (r >= warmup) (ms[sname] ??= []).push(took);
      }
    }
    results[fname] = Object.fromEntries(Object.keys(sources).map((s) => [s, { ms: stats(ms[s]!), found: found[s]! }]));
    const m = (s: string) => results[fname]![s]!.ms.median;
    ratios[fname] = { broadcastOverPuppetdb: round2(m("broadcast") / m("puppetdb")), puppetdbOverRegistry: round2(m("puppetdb") / m("registry")), hop: round2(m("puppetdb") / m("puppetdb-direct")) };
  }
  await client.close();

  const report = {
    ...reportHead("puppetdb", { nodes: N, rounds, warmup, idleMs }),
    puppetdb: { heap: heap, startMs: pdb.startMs, startWithPostgresMs: pdbStartMs, rssMiBAtStart: rssAtStart, rssMiBAfterLoad: rssAfterLoad, rssMiBAfterQueries: Math.round(pdb.rssKb() / 1024), loadMs, submittedMs },
    filters: FILTERS,
    results,
    /** broadcast / puppetdb (how many times faster PuppetDB is), puppetdb / registry (how many times slower than the registry), puppetdb / puppetdb-direct (the registry hop) */
    ratios,
  };
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, `${JSON.stringify(report, null, 2)}\n`);
  const pad = (s: string | number, n: number) => String(s).padEnd(n);
  process.stdout.write(`\n${N} nodes, ${rounds} rounds (+${warmup} warmup), broadcast idle window ${idleMs} ms, load ${report.loadavgAtStart.join(" ")} on ${report.cpus} cpus\n`);
  process.stdout.write(`${pad("filter", 10)}${pad("found", 7)}${pad("broadcast", 11)}${pad("registry", 10)}${pad("puppetdb", 10)}${pad("direct", 8)}${pad("bcast/pdb", 11)}${pad("pdb/reg", 9)}hop\n`);
  for (const [f, r] of Object.entries(results)) {
    process.stdout.write(`${pad(f, 10)}${pad(r["puppetdb"]!.found, 7)}${pad(r["broadcast"]!.ms.median, 11)}${pad(r["registry"]!.ms.median, 10)}${pad(r["puppetdb"]!.ms.median, 10)}${pad(r["puppetdb-direct"]!.ms.median, 8)}${pad(ratios[f]!.broadcastOverPuppetdb, 11)}${pad(ratios[f]!.puppetdbOverRegistry, 9)}${ratios[f]!.hop}\n`);
  }
  process.stdout.write(`PuppetDB: resident ${report.puppetdb.rssMiBAfterQueries} MiB after the queries (heap ${heap})\nwritten to ${out}\n`);
} finally {
  for (const c of children) {
    if (c.exitCode !== null) continue;
    if (c.connected) c.send({ type: "stop" });
    else c.kill("SIGTERM");
    await new Promise<void>((r) => {
      const t = setTimeout(() => (c.kill("SIGKILL"), r()), 10_000);
      c.once("exit", () => (clearTimeout(t), r()));
    });
  }
  await pdb.stop();
  await nats.stop();
  rmSync(tmp, { recursive: true, force: true });
}
