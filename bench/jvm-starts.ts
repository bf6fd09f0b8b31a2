// `npm run bench:jvm` (under the heavy lock): what a start of Debian's puppetserver and PuppetDB
// costs in CPU, each way the lab and the site run them, in the same run. Both jars carry their
// Clojure as source, compiled at every start; the suite starts about ten of these JVMs, and its
// length on two cores is mostly CPU.
//
//   node dist/bench/jvm-starts.js [--rounds 2]
//
// Each round, interleaved:
//   puppetserver source    the lab's master as Debian's unit runs the jar (-XX:TieredStopAtLevel=1, as the lab's)
//   puppetserver compiled  the same, its Clojure compiled ahead of time once (src/lab/clojure-aot.ts)
//   puppetdb debian        Debian's /etc/default/puppetdb (-Xmx192m), from source
//   puppetdb c1            the same with -XX:TieredStopAtLevel=1 (the site's --puppetdb-java-arg)
//   puppetdb compiled      C1 and compiled ahead of time (the tests' PuppetDB, test/support/puppetdb.ts)
// Reported: the JVM's CPU seconds (user + system, /proc) when it first answered as running, and its
// wall time to that point; medians, and each way's ratio to its jar's first row. The ahead-of-time
// compile itself is done before the rounds (its cost is printed once).

import { readFileSync } from "node:fs";
import { startPuppetserver } from "../src/lab/puppetserver.js";
import { startPuppetDb } from "../test/support/puppetdb.js";

const args = process.argv.slice(2);
const rounds = Number(args[args.indexOf("--rounds") + 1] ?? 2) || 2;
const TICK = 100; // USER_HZ: /proc's clock ticks per second on Linux

/** A process's CPU so far (user + system), in seconds. */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) / TICK;
}

type Way = { jar: "puppetserver" | "puppetdb"; name: string; start(): Promise<{ pid: number; stop(): Promise<void> }> };
const WAYS: Way[] = [
  { jar: "puppetserver", name: "source", start: () => startPuppetserver({ host: "127.0.0.1", aot: false }) },
  { jar: "puppetserver", name: "compiled", start: () => startPuppetserver({ host: "127.0.0.1" }) },
  { jar: "puppetdb", name: "debian", start: () => startPuppetDb({ aot: false, heap: "192m", quickJit: false }) },
  { jar: "puppetdb", name: "c1", start: () => startPuppetDb({ aot: false, heap: "192m", quickJit: true }) },
  { jar: "puppetdb", name: "compiled", start: () => startPuppetDb({ heap: "192m", quickJit: true }) },
];

// the compiles first, once, outside the rounds (a start of each compiled way makes them)
const w0 = Date.now();
for (const w of WAYS.filter((x) => x.name === "compiled")) await (await w.start()).stop();
process.stdout.write(`warm-up (the ahead-of-time compiles when not cached, and one compiled start of each): ${((Date.now() - w0) / 1000).toFixed(1)} s\n`);

const rows = new Map<string, { cpu: number[]; wall: number[] }>();
for (let r = 0; r < rounds; r++) {
  for (const w of WAYS) {
    const began = Date.now();
    const h = await w.start();
    const cpu = cpuSeconds(h.pid);
    const wall = (Date.now() - began) / 1000;
    await h.stop();
    const key = `${w.jar} ${w.name}`;
    const row = rows.get(key) ?? { cpu: [], wall: [] };
    row.cpu.push(cpu);
    row.wall.push(wall);
    rows.set(key, row);
    process.stdout.write(`round ${r + 1}: ${key}: ${cpu.toFixed(1)} CPU-s, answered after ${wall.toFixed(1)} s\n`);
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const first = new Map<string, number>();
process.stdout.write(`\n| JVM | CPU-s at ready (median of ${rounds}) | vs its jar's first row | wall to ready |\n|---|---|---|---|\n`);
for (const w of WAYS) {
  const row = rows.get(`${w.jar} ${w.name}`)!;
  const cpu = median(row.cpu);
  if (!first.has(w.jar)) first.set(w.jar, cpu);
  process.stdout.write(`| ${w.jar} ${w.name} | ${cpu.toFixed(1)} | ${(cpu / first.get(w.jar)!).toFixed(2)}x | ${median(row.wall).toFixed(1)} s |\n`);
}
