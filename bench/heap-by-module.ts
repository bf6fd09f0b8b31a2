// Where an idle `muster server` keeps its memory, by module: issue 10 asks for 50 MB idle over TLS
// and, short of that, a heap snapshot by module and what each megabyte buys.
//
//   node dist/bench/heap-by-module.js [--idle-s 30] [--keep DIR]
//
// Starts a TLS nats-server and one `muster server` over TLS with a client certificate (as the rss
// bench does), waits until it has been idle, reads /proc (VmRSS, RssFile, RssAnon) and V8's heap
// spaces, then has the server write a heap snapshot (--heapsnapshot-signal) and groups it:
//
//   - code by module: every function's SharedFunctionInfo, bytecode, closure and feedback, and each
//     script's source, attributed to the script it comes from, summed per npm package or per
//     muster folder (src/<folder>), with node's own internals as "node:internal";
//   - the rest by what it is: V8 object type and constructor name (data a module holds is not
//     attributable without a dominator tree; the constructors say what it is).
//
// Memory has no "idle" event: the wait is the measurement (as in bench/run.ts).

import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { startNats } from "../src/lab/nats.js";
import { ensureCA, issueCert } from "../src/security/pki.js";

const here = dirname(fileURLToPath(import.meta.url));
const cliPath = resolve(here, "../src/cli/main.js");
const { values: args } = parseArgs({ options: { "idle-s": { type: "string", default: "30" }, keep: { type: "string" } } });
const idleMs = Number(args["idle-s"]) * 1000;

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[]]; edge_fields: string[]; edge_types: [string[]] } };
  nodes: number[];
  edges: number[];
  strings: string[];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function procStatus(pid: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const line of readFileSync(`/proc/${pid}/status`, "utf8").split("\n")) {
    const m = /^(VmRSS|RssAnon|RssFile|RssShmem):\s+(\d+) kB/.exec(line);
    if (m) out[m[1]!] = Number(m[2]) / 1024;
  }
  return out;
}

/** npm package, muster folder, or node's own, from a script URL. */
export function moduleOf(url: string): string {
  if (!url) return "(no script: V8 builtins, native)";
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (nm) return nm[1]!;
  const own = /\/dist\/src\/([^/]+)(\/|\.js)/.exec(url);
  if (own) return `muster src/${own[1]}${own[2] === "/" ? "/" : ".js"}`;
  if (url.startsWith("node:")) return "node:internal";
  return url.length > 60 ? `${url.slice(0, 57)}...` : url;
}

/** Groups a heap snapshot: code (and its sources) per module, everything else per type and constructor. */
export function groupSnapshot(s: Snapshot): { total: number; code: Map<string, number>; data: Map<string, number> } {
  const nf = s.snapshot.meta.node_fields.length;
  const ef = s.snapshot.meta.edge_fields.length;
  const nodeTypes = s.snapshot.meta.node_types[0];
  const edgeTypes = s.snapshot.meta.edge_types[0];
  const [tType, tName, tSelf, tEdges] = ["type", "name", "self_size", "edge_count"].map((f) => s.snapshot.meta.node_fields.indexOf(f));
  const [eType, eName, eTo] = ["type", "name_or_index", "to_node"].map((f) => s.snapshot.meta.edge_fields.indexOf(f));
  const count = s.nodes.length / nf;
  const firstEdge = new Uint32Array(count + 1);
  for (let i = 0, e = 0; i < count; i++) {
    firstEdge[i] = e;
    e += s.nodes[i * nf + tEdges!]! * ef;
    firstEdge[i + 1] = e;
  }
  const type = (i: number) => nodeTypes[s.nodes[i * nf + tType!]!]!;
  const name = (i: number) => s.strings[s.nodes[i * nf + tName!]!]!;
  const self = (i: number) => s.nodes[i * nf + tSelf!]!;
  const edge = (i: number, want: string): number | undefined => {
    for (let e = firstEdge[i]!; e < firstEdge[i + 1]!; e += ef) {
      const et = edgeTypes[s.edges[e + eType!]!];
      if ((et === "internal" || et === "property" || et === "hidden") && s.strings[s.edges[e + eName!]!] === want) return s.edges[e + eTo!]! / nf;
    }
    return undefined;
  };
  // Script -> URL; SharedFunctionInfo -> script.
  const owner = new Int32Array(count).fill(-1); // node -> module id
  const modules: string[] = [];
  const moduleId = new Map<string, number>();
  const idOf = (m: string) => {
    let id = moduleId.get(m);
    if (id === undefined) moduleId.set(m, (id = modules.push(m) - 1));
    return id;
  };
  const claim = (i: number | undefined, id: number) => {
    if (i !== undefined && owner[i] === -1) owner[i] = id;
  };
  // A Script is a "code" node (named by its URL) with internal edges to its source and name.
  for (let i = 0; i < count; i++) {
    if (type(i) !== "code") continue;
    const source = edge(i, "source");
    const n = edge(i, "name");
    if (source === undefined || n === undefined) continue;
    const id = idOf(moduleOf(name(n)));
    claim(i, id);
    claim(source, id);
    claim(edge(i, "line_ends"), id);
  }
  // A SharedFunctionInfo points at its script; its bytecode (function_data) and scope or feedback
  // metadata are its own.
  for (let i = 0; i < count; i++) {
    if (type(i) !== "code") continue;
    const script = edge(i, "script_or_debug_info") ?? edge(i, "script");
    if (script === undefined || owner[script] === -1) continue;
    const id = owner[script]!;
    claim(i, id);
    const data = edge(i, "function_data");
    claim(data, id);
    if (data !== undefined) for (const part of ["constant_pool", "source_position_table", "handler_table"]) claim(edge(data, part), id);
    claim(edge(i, "raw_outer_scope_info_or_feedback_metadata"), id);
  }
  for (let i = 0; i < count; i++) {
    if (type(i) !== "closure") continue;
    const shared = edge(i, "shared");
    if (shared === undefined || owner[shared] === -1) continue;
    claim(i, owner[shared]!);
    claim(edge(i, "feedback_cell"), owner[shared]!);
  }
  const code = new Map<string, number>();
  const data = new Map<string, number>();
  let total = 0;
  for (let i = 0; i < count; i++) {
    const size = self(i);
    total += size;
    if (owner[i] !== -1) code.set(modules[owner[i]!]!, (code.get(modules[owner[i]!]!) ?? 0) + size);
    else {
      const t = type(i);
      const key = t === "object" || t === "native" ? `${t}: ${name(i).slice(0, 40)}` : t === "code" || t === "hidden" ? `${t}: ${name(i).replace(/ \/ .*$/, "").slice(0, 40)}` : t;
      data.set(key, (data.get(key) ?? 0) + size);
    }
  }
  return { total, code, data };
}

const mb = (b: number) => (b / 1024 / 1024).toFixed(2);

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "muster-heap-"));
  const ca = ensureCA(join(dir, "pki"));
  const nats = await startNats({ jetstream: false, tls: { ...issueCert(ca, { name: "nats", subject: "/CN=nats", ips: ["127.0.0.1"], dns: ["localhost"], usage: "server" }), ca: ca.cert, clients: "verify" } });
  const client = issueCert(ca, { name: "node", subject: "/CN=bench-heap.example.net", usage: "client" });
  const cfg = join(dir, "server.yaml");
  writeFileSync(cfg, [`identity: bench-heap.example.net`, `collectives: [mcollective]`, `brokers: ["${nats.url}"]`, `facts:`, `  facter: false`, `log:`, `  level: warn`, `tls:`, `  ca: ${ca.cert}`, `  cert: ${client.cert}`, `  key: ${client.key}`, ""].join("\n"));
  const snapDir = join(dir, "snap");
  mkdirSync(snapDir);
  const env: NodeJS.ProcessEnv = { ...process.env, MUSTER_CONFIG_DIR: join(dir, "config") };
  delete env.MUSTER_TLS_CA;
  delete env.MUSTER_TLS_CERT;
  delete env.MUSTER_TLS_KEY;
  const child = spawn(process.execPath, ["--heapsnapshot-signal=SIGUSR2", cliPath, "server", "--config", cfg], { env, cwd: snapDir, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
  try {
    for (const deadline = Date.now() + 60_000; !out.includes("ready"); await sleep(100)) {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`muster server not ready: ${err.slice(-2000)}`);
    }
    await sleep(idleMs);
    const status = procStatus(child.pid!);
    child.kill("SIGUSR2");
    let file = "";
    for (let last = -1, deadline = Date.now() + 120_000; ; await sleep(500)) {
      const f = readdirSync(snapDir).find((n) => n.endsWith(".heapsnapshot"));
      if (f) {
        const size = statSync(join(snapDir, f)).size;
        if (size > 0 && size === last) {
          file = join(snapDir, f);
          break;
        }
        last = size;
      }
      if (Date.now() > deadline) throw new Error("no heap snapshot written within 120 s");
    }
    const { total, code, data } = groupSnapshot(JSON.parse(readFileSync(file, "utf8")) as Snapshot);
    const codeTotal = [...code.values()].reduce((a, b) => a + b, 0);
    const lines: string[] = [];
    lines.push(`idle muster server over TLS, ${idleMs / 1000} s after ready: VmRSS ${status.VmRSS!.toFixed(1)} MB = file-backed ${status.RssFile!.toFixed(1)} (the node binary's pages) + anonymous ${status.RssAnon!.toFixed(1)} (+ shmem ${(status.RssShmem ?? 0).toFixed(1)})`);
    lines.push(`heap snapshot: ${mb(total)} MB of live objects; code and sources by module ${mb(codeTotal)} MB; the rest ${mb(total - codeTotal)} MB`);
    lines.push("", "| module (code, bytecode, closures, script source) | MB |", "|---|---:|");
    for (const [m, b] of [...code].sort((a, b) => b[1] - a[1]).slice(0, 25)) lines.push(`| ${m} | ${mb(b)} |`);
    lines.push("", "| the rest, by V8 type and constructor | MB |", "|---|---:|");
    for (const [k, b] of [...data].sort((a, b) => b[1] - a[1]).slice(0, 20)) lines.push(`| ${k} | ${mb(b)} |`);
    process.stdout.write(`${lines.join("\n")}\n`);
    if (args.keep) writeFileSync(resolve(args.keep), readFileSync(file));
  } finally {
    child.kill("SIGTERM");
    await new Promise((r) => (child.exitCode === null ? child.once("exit", r) : r(undefined)));
    await nats.stop();
    if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === resolve(process.argv[1])) await main();
