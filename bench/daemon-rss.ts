// `npm run bench:daemon-rss`: the idle node daemon's resident memory on each runtime, beside a bare
// node of the same runtime, and the privileged helper's, measured on its own (issue 29: 50 MB or
// less for `muster server` over TLS with Facter on, on the shipped runtime).
//
//   node dist/bench/daemon-rss.js [--runtimes shipped,/usr/bin/node] [--variant NAME=FLAGS]... [--out bench/results/daemon-rss.json]
//
// Per runtime, side by side (they wait out the same idle time together): `node -e
// "setInterval(()=>{},1000)"`; `muster server` over TLS with a client certificate and
// `facts.facter: true` (the real facter), with the NODE_OPTIONS its systemd unit sets
// (packaging/systemd/muster-server.service), as the package runs it, and without them; the same
// with `facts.facter: false` and no TLS; `muster privileged serve` with its unit's NODE_OPTIONS
// after serving one operation (puppet.facts, as the daemon's fact refresh asks every 300 s). Each
// --variant adds the TLS + Facter server with node FLAGS (e.g. --variant lite=--lite-mode). Idle:
// bench/idle-rss.ts. Each idle figure is split into RssAnon (heap, malloc) and RssFile (pages of
// the node binary and libraries).

import type { ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { startNats } from "../src/lab/nats.js";
import { askHelper } from "../src/privileged/client.js";
import { loadOrCreateSigningKey } from "../src/security/keys.js";
import { ensureCA, issueCert } from "../src/security/pki.js";
import { idleRss, IDLE_MIN_MS, type IdleRss } from "./idle-rss.js";
import { cliPath, repoRoot } from "./paths.js";
import { benchRuntimes, scratchEnv } from "./runtimes.js";

const { values: args } = parseArgs({
  options: {
    runtimes: { type: "string", default: "shipped,/usr/bin/node" },
    variant: { type: "string", multiple: true, default: [] },
    out: { type: "string", default: join(repoRoot, "bench", "results", "daemon-rss.json") },
    help: { type: "boolean", short: "h", default: false },
  },
});
if (args.help) {
  process.stdout.write(readFileSync(fileURLToPath(import.meta.url), "utf8").split("\n").slice(0, 14).join("\n") + "\n");
  process.exit(0);
}
const TARGET_MB = 50;
const ABOVE_BARE_MB = 12;
const children = new Set<ChildProcess>();
process.on("exit", () => {
  for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
});

/** The NODE_OPTIONS a packaged unit sets (Environment=NODE_OPTIONS=...), or "". */
function unitNodeOptions(unit: string): string {
  const text = readFileSync(join(repoRoot, "packaging", "systemd", unit), "utf8");
  return /^Environment=NODE_OPTIONS=(.*)$/m.exec(text)?.[1]?.trim() ?? "";
}

async function main(): Promise<void> {
  const loadavgAtStart = loadavg();
  const dir = mkdtempSync(join(tmpdir(), "muster-bench-rss-"));
  const env = scratchEnv(dir);
  loadOrCreateSigningKey();
  const rts = await benchRuntimes(args.runtimes!);
  const variants = args.variant!.map((v) => ({ name: v.slice(0, v.indexOf("=")), flags: v.slice(v.indexOf("=") + 1).split(" ").filter(Boolean) }));
  const ca = ensureCA(join(dir, "pki"));
  const nats = await startNats({ jetstream: false });
  const tlsNats = await startNats({ jetstream: false, tls: { ...issueCert(ca, { name: "nats", subject: "/CN=nats", ips: ["127.0.0.1"], dns: ["localhost"], usage: "server" }), ca: ca.cert, clients: "verify" } });
  const cert = issueCert(ca, { name: "node", subject: "/CN=bench-rss.example.net", usage: "client" });
  const uid = String(process.getuid?.() ?? 0);
  const serverEnv = { ...env, NODE_OPTIONS: unitNodeOptions("muster-server.service") };
  const helperEnv = { ...env, NODE_OPTIONS: unitNodeOptions("muster-privileged.service") };
  let n = 0;
  const serverConfig = (tls: boolean, facter: boolean) => {
    const file = join(dir, `server-${++n}.yaml`);
    const tlsLines = tls ? [`tls:`, `  ca: ${ca.cert}`, `  cert: ${cert.cert}`, `  key: ${cert.key}`] : [];
    writeFileSync(file, [`identity: bench-rss-${n}.example.net`, `collectives: [benchrss]`, `brokers: ["${tls ? tlsNats.url : nats.url}"]`, `facts:`, `  facter: ${facter}`, `log:`, `  level: warn`, ...tlsLines, ""].join("\n"));
    return file;
  };
  try {
    const jobs: { runtime: string; what: string; run: Promise<IdleRss> }[] = [];
    for (const rt of rts) {
      const add = (what: string, run: Promise<IdleRss>) => jobs.push({ runtime: rt.name, what, run });
      add("bare node", idleRss(rt.path, ["-e", "setInterval(()=>{},1000)"], env, { children }));
      add(`muster server, TLS, facter, as its unit runs it (NODE_OPTIONS=${serverEnv.NODE_OPTIONS})`, idleRss(rt.path, [cliPath, "server", "--config", serverConfig(true, true)], serverEnv, { readyText: "ready", children }));
      add(`muster server, TLS, facter, as its unit runs it but MUSTER_SERVER_V8=speed (V8's optimising compilers on)`, idleRss(rt.path, [cliPath, "server", "--config", serverConfig(true, true)], { ...serverEnv, MUSTER_SERVER_V8: "speed" }, { readyText: "ready", children }));
      add("muster server, TLS, facter, no NODE_OPTIONS", idleRss(rt.path, [cliPath, "server", "--config", serverConfig(true, true)], env, { readyText: "ready", children }));
      add("muster server, plain, no facter", idleRss(rt.path, [cliPath, "server", "--config", serverConfig(false, false)], env, { readyText: "ready", children }));
      for (const v of variants) add(`muster server, TLS, facter, ${v.name} (${v.flags.join(" ")})`, idleRss(rt.path, [...v.flags, cliPath, "server", "--config", serverConfig(true, true)], env, { readyText: "ready", children }));
      const sock = join(dir, `helper-${jobs.length}.sock`);
      add(
        `privileged helper, after one puppet.facts (NODE_OPTIONS=${helperEnv.NODE_OPTIONS})`,
        idleRss(rt.path, [cliPath, "privileged", "serve", "--config", serverConfig(false, true), "--socket", sock, "--client-user", uid], helperEnv, {
          readyText: "helper ready",
          children,
          afterReady: () => askHelper(sock, "puppet.facts", {}).catch((e: Error) => process.stderr.write(`bench: the helper answered puppet.facts with an error (measured anyway): ${e.message}\n`)),
        }),
      );
    }
    process.stderr.write(`bench: ${jobs.length} processes side by side, idle at least ${IDLE_MIN_MS / 1000} s\n`);
    const results = await Promise.all(jobs.map(async (j) => ({ runtime: j.runtime, what: j.what, ...(await j.run) })));
    const lines = [`load average ${loadavgAtStart.map((x) => x.toFixed(1)).join(" ")} at start, ${loadavg().map((x) => x.toFixed(1)).join(" ")} at end`, "", "| runtime | idle process | VmRSS at ready | VmRSS idle | anon / file | vs bare node |", "|---|---|---:|---:|---:|---:|"];
    for (const rt of rts) {
      const bare = results.find((r) => r.runtime === rt.name && r.what === "bare node")!;
      for (const r of results.filter((x) => x.runtime === rt.name)) lines.push(`| ${r.runtime} | ${r.what} | ${r.readyRssMB} | ${r.rssMB} | ${r.anonMB} / ${r.fileMB} | ${Math.round((r.rssMB / bare.rssMB) * 100) / 100}x |`);
    }
    lines.push("", "targets (issue 29: 50 MB; issue 39: 12 MB above the bare node of the same runtime):");
    for (const rt of rts) {
      const bare = results.find((r) => r.runtime === rt.name && r.what === "bare node")!;
      const s = results.find((r) => r.runtime === rt.name && r.what.startsWith("muster server, TLS, facter, as its unit runs it ("))!;
      const h = results.find((r) => r.runtime === rt.name && r.what.startsWith("privileged helper"))!;
      const above = Math.round((s.rssMB - bare.rssMB) * 10) / 10;
      lines.push(`  ${rt.name}: idle muster server over TLS with facter: ${s.rssMB} MB -> 50 MB ${s.rssMB <= TARGET_MB ? "met" : "NOT MET"}; ${above} MB above the bare node's ${bare.rssMB} -> +${ABOVE_BARE_MB} MB ${above <= ABOVE_BARE_MB ? "met" : "NOT MET"}; the helper ${h.rssMB} MB (${Math.round((h.rssMB / s.rssMB) * 100)}% of the server)`);
    }
    const text = lines.join("\n") + "\n";
    process.stdout.write(text);
    const out = resolve(repoRoot, args.out!);
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, JSON.stringify({ time: new Date().toISOString(), runtimes: rts, variants, loadavgAtStart, loadavgAtEnd: loadavg(), results, report: text.split("\n") }, null, 2) + "\n");
    process.stderr.write(`bench: wrote ${out}\n`);
  } finally {
    for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
    await nats.stop().catch(() => undefined);
    await tlsNats.stop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  process.stderr.write(`bench failed: ${(e as Error).stack ?? String(e)}\n`);
  process.exitCode = 1;
});
