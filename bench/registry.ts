// `npm run bench:registry`: discovery from the registry against broadcast discovery, same run,
// same fleet, same filters.
//
//   node dist/bench/registry.js [--nodes 10000] [--rounds 5] [--warmup 1] [--idle-ms 250]
//                               [--out bench/results/registry-latest.json]
//
// One nats-server (JetStream). Children: the registry daemon (`muster registry serve`, the real
// CLI) and N emulated nodes (bench/registry-nodes.ts) that each publish one real registration
// message at start; the registry is filled from those messages only. This process is the client.
// For each filter, rounds interleave three ways to the same answer:
//   broadcast        discovery#ping to every node; completes idle-ms after the last reply
//   registry         --dm registry: the daemon's query subject (one request, identities back)
//   registry-bucket  --dm registry with no daemon answering: read every record from the bucket
// Reported: medians and p90 (ms), the ratio broadcast / registry (how many times faster), the
// nodes' CPU time per discovery, and how long the registry took to take in N registrations.
// Every round checks that all three found the same nodes.

import { fork, spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { MusterClient } from "../src/client/client.js";
import { RegistrySource } from "../src/client/discovery/registry.js";
import type { NodeSource } from "../src/client/discovery/source.js";
import { buildFilter, type FilterOptions } from "../src/filter/index.js";
import { startNats } from "../src/lab/nats.js";
import { RegistryStore } from "../src/registry/store.js";
import { discoveryBenchArgs, reportHead, round2, stats } from "./discovery-args.js";
import { benchDir as here, cliPath } from "./paths.js";


const { nodes: N, rounds, warmup, idleMs, out } = discoveryBenchArgs("registry");

const BUCKET = "bench-registry";
const COLLECTIVE = "muster";
const TIMEOUT_MS = 120_000;
const FILTERS: Record<string, FilterOptions> = {
  all: {},
  fact: { fact: ["country=de"] },
  compound: { select: ["(country=de or country=uk) and web and processorcount>4"] },
};

const children = new Set<ChildProcess>();
process.on("exit", () => {
  for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
});

const tmp = mkdtempSync(join(tmpdir(), "muster-bench-registry-"));
process.env.MUSTER_CONFIG_DIR = join(tmp, "keys");
const nats = await startNats({});
let registry: ChildProcess | undefined;
let nodes: ChildProcess | undefined;
try {
  // the registry daemon, as an operator runs it
  const cfgFile = join(tmp, "registry.yaml");
  writeFileSync(cfgFile, JSON.stringify({ broker: nats.url, collectives: [COLLECTIVE], bucket: BUCKET, max_age: 3600, log: { level: "warn" } }));
  const reg = spawn(process.execPath, [cliPath, "registry", "serve", "--config", cfgFile], { stdio: ["ignore", "pipe", "inherit"], env: process.env });
  registry = reg;
  children.add(reg);
  await new Promise<void>((ok, fail) => {
    const t = setTimeout(() => fail(new Error("registry daemon not ready")), 30_000);
    reg.stdout!.on("data", (d: Buffer) => {
      if (/ready/.test(d.toString())) {
        clearTimeout(t);
        ok();
      }
    });
    reg.once("exit", (c) => fail(new Error(`registry daemon exited with ${c}`)));
  });

  // watch the bucket, then start the nodes: the registry fills from their registration messages
  const client = await MusterClient.connect({ brokers: [nats.url], collective: COLLECTIVE, name: "bench-registry-client" });
  const watch = await RegistryStore.open(client, BUCKET);
  const filled = new Promise<number>((ok, fail) => {
    const t = setTimeout(() => fail(new Error(`registry holds ${watch.size}/${N} nodes after ${TIMEOUT_MS} ms`)), TIMEOUT_MS);
    watch.on("update", () => {
      if (watch.size >= N) {
        clearTimeout(t);
        ok(performance.now());
      }
    });
  });
  const t0 = performance.now();
  const child = fork(join(here, "registry-nodes.js"), [String(N), nats.url, COLLECTIVE], { stdio: ["ignore", "inherit", "inherit", "ipc"], env: process.env });
  nodes = child;
  children.add(child);
  const cpuWaiters: ((ms: number) => void)[] = [];
  await new Promise<void>((ok, fail) => {
    const t = setTimeout(() => fail(new Error("nodes not ready")), TIMEOUT_MS);
    child.on("message", (m: { type?: string; ms?: number }) => {
      if (m.type === "ready") {
        clearTimeout(t);
        ok();
      } else if (m.type === "cpu") cpuWaiters.shift()?.(m.ms ?? NaN);
    });
    child.once("exit", (c) => fail(new Error(`nodes exited with ${c}`)));
  });
  const nodesCpu = () =>
    new Promise<number>((ok) => {
      cpuWaiters.push(ok);
      child.send({ type: "cpu" });
    });
  const fillMs = (await filled) - t0;
  watch.stop();
  process.stdout.write(`registry took in ${N} registrations in ${Math.round(fillMs)} ms (from starting the nodes' process)\n`);

  const sources: Record<string, NodeSource | undefined> = {
    broadcast: undefined,
    registry: await client.registry({ bucket: BUCKET, via: "service" }),
    "registry-bucket": await client.registry({ bucket: BUCKET, via: "bucket" }),
  };
  const results: Record<string, Record<string, { ms: ReturnType<typeof stats>; nodesCpuMs: ReturnType<typeof stats>; found: number }>> = {};
  const ratios: Record<string, { registry: number; registryBucket: number }> = {};
  for (const [fname, fopts] of Object.entries(FILTERS)) {
    const filter = buildFilter(fopts);
    const ms: Record<string, number[]> = {};
    const cpu: Record<string, number[]> = {};
    const found: Record<string, number> = {};
    for (let r = 0; r < warmup + rounds; r++) {
      let reference: string[] | undefined;
      for (const [sname, source] of Object.entries(sources)) {
        const c0 = await nodesCpu();
        const s = performance.now();
        const ids = await client.discover({ filter, source, timeoutMs: 30_000, idleMs });
        const took = performance.now() - s;
        const c1 = await nodesCpu();
        if (reference === undefined) reference = ids;
        else if (ids.length !== reference.length || ids.some((id, i) => id !== reference![i])) throw new Error(`${fname}: ${sname} found ${ids.length} nodes, broadcast ${reference.length}`);
        found[sname] = ids.length;
        if (r < warmup) continue;
        (ms[sname] ??= []).push(took);
        (cpu[sname] ??= []).push(c1 - c0);
      }
    }
    results[fname] = Object.fromEntries(Object.keys(sources).map((s) => [s, { ms: stats(ms[s]!), nodesCpuMs: stats(cpu[s]!), found: found[s]! }]));
    const b = results[fname]!["broadcast"]!.ms.median;
    ratios[fname] = { registry: round2(b / results[fname]!["registry"]!.ms.median), registryBucket: round2(b / results[fname]!["registry-bucket"]!.ms.median) };
  }
  await client.close();

  const report = {
    ...reportHead("registry", { nodes: N, rounds, warmup, idleMs }),
    fillMs: Math.round(fillMs),
    filters: Object.fromEntries(Object.entries(FILTERS).map(([k, v]) => [k, v])),
    results,
    /** broadcast median / registry median: how many times faster registry discovery is */
    ratios,
  };
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, `${JSON.stringify(report, null, 2)}\n`);

  const pad = (s: string, n: number) => s.padEnd(n);
  process.stdout.write(`\n${N} nodes, ${rounds} rounds (+${warmup} warmup), broadcast idle window ${idleMs} ms, load ${report.loadavgAtStart.join(" ")} on ${report.cpus} cpus\n`);
  process.stdout.write(`${pad("filter", 10)}${pad("found", 7)}${pad("broadcast ms", 14)}${pad("registry ms", 13)}${pad("bucket ms", 11)}${pad("x faster", 10)}${pad("x (bucket)", 12)}nodes' cpu ms/discovery (broadcast, registry)\n`);
  for (const [f, r] of Object.entries(results)) {
    process.stdout.write(
      `${pad(f, 10)}${pad(String(r["registry"]!.found), 7)}${pad(String(r["broadcast"]!.ms.median), 14)}${pad(String(r["registry"]!.ms.median), 13)}${pad(String(r["registry-bucket"]!.ms.median), 11)}${pad(String(ratios[f]!.registry), 10)}${pad(String(ratios[f]!.registryBucket), 12)}${r["broadcast"]!.nodesCpuMs.median}, ${r["registry"]!.nodesCpuMs.median}\n`,
    );
  }
  process.stdout.write(`\nwritten to ${out}\n`);
} finally {
  nodes?.send?.({ type: "stop" });
  registry?.kill("SIGTERM");
  await Promise.all(
    [nodes, registry].map(
      (c) =>
        c &&
        c.exitCode === null &&
        new Promise<void>((r) => {
          const t = setTimeout(() => c.kill("SIGKILL"), 5000);
          c.once("exit", () => {
            clearTimeout(t);
            r();
          });
        }),
    ),
  );
  await nats.stop();
  rmSync(tmp, { recursive: true, force: true });
}
