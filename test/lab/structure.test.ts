import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, normalize, relative } from "node:path";
import { fileURLToPath } from "node:url";

// src/lab stays a place you can find your way around (issue 26 §5): small files, one concern each;
// no two files that need each other (an import cycle, type-only imports and re-exports counted);
// the machines reached through their one front door (lab/machines/index.ts), which stays light
// (each machine's supervisor comes through it); and the plan and its scheduler pure. Scoped to
// src/lab: the repository-wide rules live in test/boundary.test.ts.

const src = fileURLToPath(new URL("../../../src/", import.meta.url)); // dist/test/lab -> src
const lab = join(src, "lab");
const MAX_LINES = 300;

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? files(p) : p.endsWith(".ts") && !p.endsWith(".d.ts") ? [p] : [];
  });
}

/** Every module a file imports, re-exports or loads lazily (type-only ones too), comments left out. */
function importsOf(text: string): string[] {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
  const out: string[] = [];
  for (const m of code.matchAll(/\b(?:import|export)\b[^;"'`]*?\bfrom\s*["']([^"']+)["']|\bimport\s*\(\s*["'`]([^"'`]+)["'`]\s*\)|^\s*import\s*["']([^"']+)["']/gm)) out.push((m[1] ?? m[2] ?? m[3])!);
  return out;
}

/** The files of src a file imports (relative imports resolved; .js names the .ts source). */
function edges(file: string): string[] {
  return importsOf(readFileSync(file, "utf8"))
    .filter((m) => m.startsWith("."))
    .map((m) => normalize(join(dirname(file), m)).replace(/\.js$/, ".ts"));
}

const rel = (f: string) => relative(src, f).split("\\").join("/");

test("the import scanner sees every kind of import", () => {
  assert.deepEqual(importsOf(`import type { A } from "./a.js";\nimport {\n  b,\n  c,\n} from "./b.js";\nexport { d } from "./d.js";\nexport type { E } from "./e.js";`), ["./a.js", "./b.js", "./d.js", "./e.js"]);
  assert.deepEqual(importsOf(`const m = await import("./m.js");\nimport "./side.js";\n// import { x } from "./commented.js";\n/* from "./block.js" */`), ["./m.js", "./side.js"]);
  assert.deepEqual(importsOf(`const url = "http://x"; import { y } from "./y.js";`), ["./y.js"]);
});

test(`no file in src/lab is longer than ${MAX_LINES} lines (a longer one holds two concerns)`, () => {
  const long = files(lab)
    .map((f) => ({ f, n: readFileSync(f, "utf8").split("\n").length }))
    .filter((x) => x.n > MAX_LINES)
    .map((x) => `src/${rel(x.f)}: ${x.n} lines`);
  assert.deepEqual(long, [], long.join("\n"));
});

test("no import cycle among src/lab's files (type-only imports count)", () => {
  const all = files(lab);
  const graph = new Map(all.map((f) => [f, edges(f).filter((t) => t.startsWith(lab + "/"))]));
  // Tarjan's strongly connected components: any with two files or more, or a file importing itself, is a cycle
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const cycles: string[][] = [];
  const visit = (v: string) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) (visit(w), low.set(v, Math.min(low.get(v)!, low.get(w)!)));
      else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const scc: string[] = [];
      for (let w = ""; w !== v; ) (w = stack.pop()!, on.delete(w), scc.push(w));
      if (scc.length > 1 || graph.get(v)!.includes(v)) cycles.push(scc.map(rel).sort());
    }
  };
  for (const f of all) if (!idx.has(f)) visit(f);
  assert.ok(graph.size > 20, `only ${graph.size} files under ${lab}`);
  assert.deepEqual(cycles, [], `files that import each other:\n${cycles.map((c) => c.join(" <-> ")).join("\n")}`);
});

test("outside lab/machines, the machines are reached through lab/machines/index.ts only", () => {
  const machines = join(lab, "machines");
  const found = files(src)
    .filter((f) => !f.startsWith(machines + "/"))
    .flatMap((f) => edges(f).filter((t) => t.startsWith(machines + "/") && t !== join(machines, "index.ts")).map((t) => `src/${rel(f)} imports src/${rel(t)}`));
  assert.deepEqual(found, [], `import from lab/machines/index.js instead:\n${found.join("\n")}`);
});

test("the plan and its scheduler are pure: no I/O module, no process", () => {
  for (const f of ["plan.ts", "schedule.ts", "runner.ts"]) {
    const text = readFileSync(join(lab, f), "utf8");
    const io = importsOf(text).filter((m) => m.startsWith("node:"));
    assert.deepEqual(io, [], `src/lab/${f} imports ${io.join(", ")}`);
    assert.doesNotMatch(text, /\bprocess\.|\bspawn\w*\(|\bwriteFile|\breadFile/, `src/lab/${f} does I/O`);
  }
});

test("the machines' door loads no npm package: each machine's power supervisor (and the package server) stays small", () => {
  const preload = fileURLToPath(new URL("../support/loaded-packages.js", import.meta.url));
  const index = new URL("../../src/lab/machines/index.js", import.meta.url).href;
  const r = spawnSync(process.execPath, ["--import", preload, "--input-type=module", "-e", `await import(${JSON.stringify(index)});`], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(/^loaded-packages: ?(.*)$/m.exec(r.stderr)?.[1], "", "booting a machine (bootstrap credentials, the NATS client, YAML) loads on first use, not with the door");
});
