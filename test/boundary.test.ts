import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, normalize, relative } from "node:path";
import { fileURLToPath } from "node:url";

// The rooms of src/ and the arrows between them (DESIGN.md's layout, docs/decisions/0005-one-owner.md).
// This test reads src/ and fails on:
// - the NATS client (any @nats-io package, imported statically, dynamically or re-exported) or a
//   bare connection (a variable or field named `nc`, `.nc`, the NatsConnection/BrokerConnection
//   types) outside the transport layers named below: everyone else holds a MusterClient or a
//   Bucket;
// - JetStream or KV (@nats-io/jetstream, @nats-io/kv) outside broker/, the only maker of buckets
//   and streams;
// - an arrow between the agent rooms that is not in the architecture: the server is handed its
//   agents (src/agent/catalogue.ts) and imports none of src/agents/; the agents know the contract
//   in src/agent/ and nothing of the server; the contract imports neither.

const root = fileURLToPath(new URL("../../src/", import.meta.url));

/** The transport layers: where a bare connection and the NATS client may appear, and why. */
const TRANSPORT: [RegExp, string][] = [
  [/^broker\//, "connections, buckets and streams are made here"],
  [/^client\/(client|collector|request)\.ts$/, "the client: publishes requests and collects replies"],
  [/^client\/discovery\/registry\.ts$/, "asks the registry daemon's query subject"],
  [/^client\/discovery\/puppetdb\.ts$/, "asks the registry daemon's PuppetDB subject"],
  [/^server\/(host|server)\.ts$/, "the node daemon's transport: one connection per phase"],
  [/^emulator\/emulator\.ts$/, "the emulator's transport (one NodeHost for many nodes)"],
  [/^registry\/(receiver|service|daemon|puppetdb)\.ts$/, "the registry daemon: registrations in, queries answered"],
  [/^cli\/commands\/emulate\.ts$/, "hands the emulator its bare connection (from broker/connect.ts)"],
  [/^cli\/commands\/doctor\.ts$/, "diagnoses the connection itself (server, TLS handshake) before any client exists"],
];

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? files(p) : p.endsWith(".ts") && !p.endsWith(".d.ts") ? [p] : [];
  });
}

/** The code of a file with comments blanked out (a comment may mention client.nc). */
function code(path: string): string[] {
  return readFileSync(path, "utf8")
    .replace(/\/\*[\s\S]*?\*\//g, (c) => c.replace(/[^\n]/g, " "))
    .split("\n")
    .map((l) => l.replace(/(^|[^:"'`\\])\/\/.*$/, "$1"));
}

const sources = files(root).map((p) => ({ rel: relative(root, p).split("\\").join("/"), lines: code(p) }));

/** Module specifiers a line imports: `from "x"`, `import("x")`, `import "x"`, `require("x")`. */
export function specifiers(line: string): string[] {
  const out: string[] = [];
  for (const m of line.matchAll(/\bfrom\s*["']([^"']+)["']|\bimport\s*\(\s*["'`]([^"'`]+)["'`]\s*\)|^\s*import\s*["']([^"']+)["']|\brequire\s*\(\s*["']([^"']+)["']\s*\)/g)) out.push((m[1] ?? m[2] ?? m[3] ?? m[4])!);
  return out;
}

function offences(keep: (rel: string) => boolean, bad: (line: string) => boolean): string[] {
  const found: string[] = [];
  for (const s of sources) {
    if (!keep(s.rel)) continue;
    s.lines.forEach((l, i) => {
      if (bad(l)) found.push(`src/${s.rel}:${i + 1}: ${l.trim()}`);
    });
  }
  return found;
}

const transport = (rel: string) => TRANSPORT.some(([re]) => re.test(rel));

test("the tree is where this test expects it", () => {
  assert.ok(sources.some((s) => s.rel === "client/client.ts"), `no src/client/client.ts under ${root}`);
  assert.ok(sources.length > 100, `only ${sources.length} files under ${root}`);
});

test("the scanner sees every way of importing", () => {
  assert.deepEqual(specifiers(`import { x } from "@nats-io/kv";`), ["@nats-io/kv"]);
  assert.deepEqual(specifiers(`const { Kvm } = await import("@nats-io/kv");`), ["@nats-io/kv"]);
  assert.deepEqual(specifiers("const m = await import(`@nats-io/jetstream`);"), ["@nats-io/jetstream"]);
  assert.deepEqual(specifiers(`export { a } from "../agents/builtin.js";`), ["../agents/builtin.js"]);
  assert.deepEqual(specifiers(`import "@nats-io/transport-node";`), ["@nats-io/transport-node"]);
  assert.deepEqual(specifiers(`const [a, b] = await Promise.all([import("./a.js"), import('./b.js')]);`), ["./a.js", "./b.js"]);
});

test("JetStream and KV are opened in broker/ only", () => {
  const found = offences((rel) => !rel.startsWith("broker/"), (l) => specifiers(l).some((m) => /^@nats-io\/(kv|jetstream)\b/.test(m)));
  assert.deepEqual(found, [], `open buckets through a Bucket (client.bucket, broker/bucket.ts) and streams through broker/stream.ts:\n${found.join("\n")}`);
});

test("outside the transport layers nothing imports the NATS client", () => {
  const found = offences((rel) => !transport(rel), (l) => specifiers(l).some((m) => m.startsWith("@nats-io/")));
  assert.deepEqual(found, [], `use the client API (MusterClient) or a Bucket instead:\n${found.join("\n")}`);
});

test("outside the transport layers nothing holds a bare connection (nc, .nc, NatsConnection)", () => {
  const found = offences((rel) => !transport(rel), (l) => /(^|[^\w$])nc\b|\b(NatsConnection|BrokerConnection)\b/.test(l.replace(/(["'`])(?:\\.|(?!\1).)*\1/g, '""')));
  assert.deepEqual(found, [], `use the client API (onEvent, onLifecycle, bucket, registry, source) instead:\n${found.join("\n")}`);
});

test("every allow-list entry still matches a file (stale entries go)", () => {
  for (const [re, why] of TRANSPORT) assert.ok(sources.some((s) => re.test(s.rel)), `${re} (${why}) matches no file`);
});

/** The rooms (top-level folders of src/) a file imports from, with the line that does. */
function roomsImported(rel: string, lines: string[]): { room: string; line: string; n: number }[] {
  const out: { room: string; line: string; n: number }[] = [];
  lines.forEach((l, i) => {
    for (const m of specifiers(l)) {
      if (!m.startsWith(".")) continue;
      const target = normalize(join(dirname(rel), m)).split("\\").join("/");
      if (target.startsWith("..")) continue;
      out.push({ room: target.includes("/") ? target.slice(0, target.indexOf("/")) : "(top)", line: l.trim(), n: i + 1 });
    }
  });
  return out;
}

function arrows(from: string, to: string[]): string[] {
  const found: string[] = [];
  for (const s of sources) {
    if (!s.rel.startsWith(`${from}/`)) continue;
    for (const r of roomsImported(s.rel, s.lines)) if (to.includes(r.room)) found.push(`src/${s.rel}:${r.n}: ${r.line}`);
  }
  return found;
}

test("the server imports no concrete agent: it is handed an AgentCatalogue", () => {
  const found = arrows("server", ["agents"]);
  assert.deepEqual(found, [], `the command that starts the server passes its agents (startServer({agents})):\n${found.join("\n")}`);
});

test("the agents know the contract in src/agent/, not the server; the contract imports neither", () => {
  const agents = arrows("agents", ["server"]);
  assert.deepEqual(agents, [], `import the contract from src/agent/ instead:\n${agents.join("\n")}`);
  const contract = arrows("agent", ["server", "agents"]);
  assert.deepEqual(contract, [], contract.join("\n"));
});

test("the room scanner resolves relative imports to rooms", () => {
  assert.deepEqual(roomsImported("server/server.ts", [`import { x } from "../agents/builtin.js";`, `await import("./host.js");`]).map((r) => r.room), ["agents", "server"]);
  assert.deepEqual(roomsImported("agents/puppet/run.ts", [`import type { A } from "../../agent/agent.js";`]).map((r) => r.room), ["agent"]);
});

test("the provisioner's files stay small enough to read whole (350 lines: a longer one holds two concerns)", () => {
  const long = sources.filter((s) => s.rel.startsWith("provisioner/") && s.lines.length > 350).map((s) => `src/${s.rel}: ${s.lines.length} lines`);
  assert.deepEqual(long, [], long.join("\n"));
});

/**
 * Room -> rooms it imports (type-only imports count: a cycle of types is still a tangle to read).
 * Each top-level file (errors.ts, index.ts, ...) is a room of its own: the public entry imports
 * the agents, and every room the error catalogue, without the two making one room.
 */
function roomGraph(): Map<string, Set<string>> {
  const g = new Map<string, Set<string>>();
  const roomOf = (rel: string) => (rel.includes("/") ? rel.slice(0, rel.indexOf("/")) : rel.replace(/\.js$/, ".ts"));
  for (const s of sources) {
    const from = roomOf(s.rel);
    for (const l of s.lines) {
      for (const m of specifiers(l)) {
        if (!m.startsWith(".")) continue;
        const to = roomOf(normalize(join(dirname(s.rel), m)).split("\\").join("/"));
        if (to !== from && !to.startsWith("..")) (g.get(from) ?? g.set(from, new Set()).get(from)!).add(to);
      }
    }
  }
  return g;
}

/** The rooms `from` reaches through imports, itself excluded unless a cycle leads back. */
function reach(g: Map<string, Set<string>>, from: string): Set<string> {
  const seen = new Set<string>();
  const todo = [...(g.get(from) ?? [])];
  while (todo.length) {
    const r = todo.pop()!;
    if (seen.has(r)) continue;
    seen.add(r);
    todo.push(...(g.get(r) ?? []));
  }
  return seen;
}

test("one way through the privileged rooms: no folder cycle among agent, agents, privileged, server and puppet", () => {
  const g = roomGraph();
  const rooms = ["agent", "agents", "privileged", "server", "puppet"];
  const cycles = rooms.filter((r) => reach(g, r).has(r)).map((r) => `${r} reaches itself through ${[...reach(g, r)].filter((x) => reach(g, x).has(r)).join(", ")}`);
  assert.deepEqual(cycles, [], cycles.join("\n"));
  // the helper is handed its settings (src/agents/helper-settings.ts, by `muster privileged serve`)
  assert.deepEqual(arrows("privileged", ["agents", "server", "cli"]), [], "the helper imports neither the agents nor the server");
  // NodeOps is the agent contract's; its direct implementation is puppet/'s, which knows no agents
  assert.deepEqual(arrows("agent", ["privileged", "agents", "server"]), []);
  assert.deepEqual(arrows("puppet", ["agent", "agents", "privileged", "server"]), []);
});

// Import cycles and file sizes (issue 28 §5): no folder of src/ imports, through others, a folder
// that imports it, no file imports itself back through others, and no source file is over 600
// lines. Every import counts: static, dynamic, re-exports and type-only ones. Cycles still open on
// other branches are listed below by name; an entry that no longer matches a cycle fails the test,
// so it is deleted once the branch that breaks the cycle has landed.

/** Folder cycles still open, as their sorted folders joined by " <-> ", and who breaks them (none today). */
const KNOWN_FOLDER_CYCLES: Record<string, string> = {};
/** File cycles still open, as their sorted files joined by " <-> " (none today). */
const KNOWN_FILE_CYCLES: Record<string, string> = {};
/** Files still over the limit, and who splits them (none today). */
const KNOWN_LONG_FILES: Record<string, string> = {};
const MAX_LINES = 600;

/** Every src/ file a file imports (relative specifiers resolved; .js names the .ts source). */
function fileGraph(): Map<string, string[]> {
  const known = new Set(sources.map((s) => s.rel));
  const g = new Map<string, string[]>();
  for (const s of sources) {
    const out = new Set<string>();
    for (const l of s.lines) {
      for (const m of specifiers(l)) {
        if (!m.startsWith(".")) continue;
        const target = normalize(join(dirname(s.rel), m)).split("\\").join("/").replace(/\.js$/, ".ts");
        if (known.has(target)) out.add(target);
      }
    }
    g.set(s.rel, [...out]);
  }
  return g;
}

/** The strongly connected components with more than one member (or a member importing itself): the cycles. */
export function cycles(g: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of g.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const c: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      c.push(w);
    } while (w !== v);
    if (c.length > 1 || (g.get(v) ?? []).includes(v)) out.push(c.sort());
  };
  for (const v of g.keys()) if (!index.has(v)) visit(v);
  return out.sort((a, b) => (a[0]! < b[0]! ? -1 : 1));
}

/** The folder graph: a top-level folder of src/ -> the folders its files import (files at src/'s top are in no folder). */
function folderGraph(files: Map<string, string[]>): Map<string, string[]> {
  const folder = (rel: string) => (rel.includes("/") ? rel.slice(0, rel.indexOf("/")) : undefined);
  const g = new Map<string, Set<string>>();
  for (const [from, tos] of files) {
    const a = folder(from);
    if (!a) continue;
    if (!g.has(a)) g.set(a, new Set());
    for (const to of tos) {
      const b = folder(to);
      if (b && b !== a) g.get(a)!.add(b);
    }
  }
  return new Map([...g].map(([k, v]) => [k, [...v]]));
}

/** A cycle's edges, for the message: which file imports which. */
function cycleEdges(c: string[], files: Map<string, string[]>, level: "file" | "folder"): string[] {
  const key = (rel: string) => (level === "file" ? rel : rel.slice(0, rel.indexOf("/")));
  const members = new Set(c);
  const out: string[] = [];
  for (const [from, tos] of files) {
    if (!members.has(key(from)) || (level === "folder" && !from.includes("/"))) continue;
    for (const to of tos) if (to.includes("/") || level === "file") if (members.has(key(to)) && key(to) !== (level === "folder" ? key(from) : "")) out.push(`  src/${from} -> src/${to}`);
  }
  return out.slice(0, 20);
}

function checkCycles(found: string[][], known: Record<string, string>, files: Map<string, string[]>, level: "file" | "folder"): void {
  const names = found.map((c) => c.join(" <-> "));
  const fresh = found.filter((c) => !Object.hasOwn(known, c.join(" <-> ")));
  assert.deepEqual(
    fresh.map((c) => c.join(" <-> ")),
    [],
    `${level} import cycles in src/ (type-only imports count):\n${fresh.map((c) => `${c.join(" <-> ")}\n${cycleEdges(c, files, level).join("\n")}`).join("\n")}`,
  );
  const stale = Object.keys(known).filter((k) => !names.includes(k));
  assert.deepEqual(stale, [], `these known ${level} cycles are gone: delete their entries`);
}

test("the cycle finder finds cycles and only cycles", () => {
  const g = new Map([
    ["a", ["b"]],
    ["b", ["c"]],
    ["c", ["a", "d"]],
    ["d", []],
    ["e", ["e"]],
  ]);
  assert.deepEqual(cycles(g), [["a", "b", "c"], ["e"]]);
  assert.deepEqual(cycles(new Map([["x", ["y"]], ["y", []]])), []);
});

test("no folder of src/ imports itself back through other folders", () => {
  const files = fileGraph();
  checkCycles(cycles(folderGraph(files)), KNOWN_FOLDER_CYCLES, files, "folder");
});

test("no file of src/ imports itself back through other files", () => {
  const files = fileGraph();
  checkCycles(cycles(files), KNOWN_FILE_CYCLES, files, "file");
});

test(`no source file of src/ is over ${MAX_LINES} lines`, () => {
  const all = files(root).concat(readdirSync(join(root, "web", "assets")).filter((n) => n.endsWith(".js")).map((n) => join(root, "web", "assets", n)));
  const long = all.map((p) => ({ rel: relative(root, p).split("\\").join("/"), n: readFileSync(p, "utf8").split("\n").length - 1 })).filter((f) => f.n > MAX_LINES);
  assert.deepEqual(long.filter((f) => !Object.hasOwn(KNOWN_LONG_FILES, f.rel)).map((f) => `src/${f.rel}: ${f.n} lines`), [], "split these by concern");
  const stale = Object.keys(KNOWN_LONG_FILES).filter((k) => !long.some((f) => f.rel === k));
  assert.deepEqual(stale, [], "these known long files are short now: delete their entries");
});

test("the console opens no bucket or stream itself: it holds the handles fleet/sources.ts gives it", () => {
  const found = offences((rel) => rel.startsWith("web/"), (l) => /\.bucket\(|bucketIfExists\(|openExisting\(|\b(ProvisionState|AliveStore|PuppetRunStore)\.open\(|\.streams\(\)|streamsOn\(/.test(l));
  assert.deepEqual(found, [], `ask the store's owner through FleetSources (src/fleet/sources.ts):\n${found.join("\n")}`);
});

test("health decides and the front ends call it: src/health/ imports no front end (web/, cli/, lab/) and not fleet/", () => {
  const found = arrows("health", ["web", "cli", "lab", "fleet"]);
  assert.deepEqual(found, [], `declare what health needs as an interface in src/health/ and let the front end hand it in (docs/decisions/0012-health-room.md):\n${found.join("\n")}`);
});
