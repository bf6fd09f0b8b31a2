import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parse as parseYaml } from "yaml";
import { ALWAYS_LOADED, BUILTIN_AGENT_NAMES } from "../../src/agents/builtin.js";
import { loadProvisionerConfig, ProvisionerConfigSchema } from "../../src/provisioner/config.js";
import { RegistryConfigSchema } from "../../src/registry/config.js";
import { loadServerConfig, ServerConfigSchema } from "../../src/server/config.js";
import { repoRoot, tempDir } from "../support/collective.js";
import { hasPath, schemaKeyPaths, uncommentKeys } from "../support/schema-keys.js";

// examples/provisioner.yaml and examples/server.yaml are the reference configs the docs point to:
// each must load with the real loader as it stands, and again with its commented-out keys switched
// on (`# key: value` lines), and together they must show every key of the config schema, read from
// the zod schema itself, so a key added to src/*/config.ts fails here until the example shows it.

const examples = [
  { file: "examples/provisioner.yaml", schema: ProvisionerConfigSchema, load: loadProvisionerConfig },
  { file: "examples/server.yaml", schema: ServerConfigSchema, load: (p: string) => loadServerConfig(p) },
];

const tmp = tempDir("docs-examples");
test.after(() => tmp.remove());

for (const ex of examples) {
  const text = readFileSync(join(repoRoot, ex.file), "utf8");
  const all = uncommentKeys(text);

  test(`${ex.file} loads with the real config loader, as it stands and with its commented keys on`, () => {
    ex.load(join(repoRoot, ex.file));
    const file = join(tmp.path, ex.file.replace("/", "-"));
    writeFileSync(file, all);
    ex.load(file);
  });

  test(`${ex.file} shows every key of its schema`, () => {
    const doc = parseYaml(all) as unknown;
    const paths = schemaKeyPaths(ex.schema);
    assert.ok(paths.length > 20, `only ${paths.length} keys read from the schema: is schemaKeyPaths still walking it?`);
    const missing = paths.filter((p) => !hasPath(doc, p));
    assert.deepEqual(missing, [], `add these keys to ${ex.file} (commented out as "# key: value" when they should stay off)`);
  });
}

test("examples/server.yaml names every built-in agent, with its plugins section", () => {
  const text = readFileSync(join(repoRoot, "examples/server.yaml"), "utf8");
  const doc = parseYaml(uncommentKeys(text)) as { plugins?: Record<string, unknown> };
  const optional = BUILTIN_AGENT_NAMES.filter((a) => !(ALWAYS_LOADED as readonly string[]).includes(a));
  assert.ok(optional.length >= 6, `${optional.join(", ")}`);
  // The builtin: line and the comment lines right under it list what may be loaded.
  const lines = text.split("\n");
  const at = lines.findIndex((l) => /^\s+builtin:/.test(l));
  assert.ok(at >= 0, "agents.builtin is missing");
  let listing = lines[at]!;
  for (let i = at + 1; i < lines.length && /^\s*#/.test(lines[i]!); i++) listing += ` ${lines[i]}`;
  for (const a of [...ALWAYS_LOADED, ...optional]) assert.match(listing, new RegExp(`\\b${a}\\b`), `the agents.builtin comment should name ${a}`);
  const missing = optional.filter((a) => !doc.plugins || !(a in doc.plugins));
  assert.deepEqual(missing, [], "give these agents a plugins.<agent> section in examples/server.yaml (commented out is fine)");
});

test("examples/provisioner.yaml's commented-out additions show the defaults the schema applies", () => {
  // The section says "defaults shown": each top-level key commented out there must carry the value
  // the loader fills in when the key is absent (id depends on the host, and keys without a default
  // show an example).
  const text = readFileSync(join(repoRoot, "examples/provisioner.yaml"), "utf8");
  const all = parseYaml(uncommentKeys(text)) as Record<string, unknown>;
  const defaults = ProvisionerConfigSchema.parse({}) as Record<string, unknown>;
  const commented = [...text.matchAll(/^# ([a-z_]+):/gm)].map((m) => m[1]!).filter((k) => k !== "id" && defaults[k] !== undefined);
  assert.ok(commented.length >= 10, commented.join(", "));
  for (const k of commented) assert.deepEqual(all[k], defaults[k], `examples/provisioner.yaml shows ${k}: ${JSON.stringify(all[k])}, the default is ${JSON.stringify(defaults[k])}`);
});

// The settings tables of the docs name every top-level key (mcprovision's own keys, listed in the
// prose of docs/provisioner.md, excepted).
const tables = [
  // defaultsElsewhere: keys whose default the table describes in words (the host name, the client's settings).
  { doc: "docs/provisioner.md", schema: ProvisionerConfigSchema, except: ["logfile", "loglevel", "daemonize", "sleeptime", "steps", "master", "target", "notify"], defaultsElsewhere: ["id", "collective"] },
  { doc: "docs/registry.md", schema: RegistryConfigSchema, except: [] as string[], defaultsElsewhere: [] as string[] },
];

for (const t of tables) {
  test(`${t.doc}'s settings table has a row for every key of the config`, () => {
    const rows = readFileSync(join(repoRoot, t.doc), "utf8")
      .split("\n")
      .filter((l) => l.startsWith("|"))
      .map((l) => l.split("|")[1] ?? "");
    const keys = schemaKeyPaths(t.schema).filter((p) => !p.includes(".") && !p.includes("[") && !t.except.includes(p));
    const missing = keys.filter((k) => !rows.some((cell) => cell.includes(`\`${k}\``)));
    assert.deepEqual(missing, [], `document these keys in ${t.doc}'s table`);
  });

  test(`${t.doc}'s settings table gives the schema's default of every plain key`, () => {
    const rows = readFileSync(join(repoRoot, t.doc), "utf8")
      .split("\n")
      .filter((l) => l.startsWith("|"))
      .map((l) => l.split("|").map((c) => c.trim()));
    const defaults = t.schema.parse({}) as Record<string, unknown>;
    const wrong: string[] = [];
    for (const [k, v] of Object.entries(defaults)) {
      if (t.except.includes(k) || t.defaultsElsewhere.includes(k) || (typeof v !== "number" && typeof v !== "string")) continue;
      const row = rows.find((r) => (r[1] ?? "").includes(`\`${k}\``));
      if (row && !new RegExp(`(^|[^\\w.])${String(v).replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}($|[^\\w.])`).test(row[2] ?? "")) wrong.push(`${k}: the table says ${row[2]}, the schema ${JSON.stringify(v)}`);
    }
    assert.deepEqual(wrong, []);
  });
}

test("uncommentKeys switches on key lines and leaves prose comments", () => {
  const out = uncommentKeys("a: 1\n# b: 2\n# Prose: here\nc:\n  # d:\n  #   e: x   # note\n  #   - f: 1\n#   # not a key\n");
  assert.equal(out, "a: 1\nb: 2\n# Prose: here\nc:\n  d:\n    e: x   # note\n    - f: 1\n#   # not a key\n");
});

test("schemaKeyPaths walks objects, arrays, records, defaults and pipes; hasPath finds them", async () => {
  const { z } = await import("zod");
  const s = z
    .object({
      a: z.object({ b: z.number().default(1) }).default({ b: 1 }),
      list: z.array(z.object({ x: z.string() })).optional(),
      rec: z.record(z.string(), z.object({ y: z.boolean() })).transform((r) => r),
      free: z.record(z.string(), z.unknown()),
    })
    .strict();
  assert.deepEqual(schemaKeyPaths(s), ["a", "a.b", "list", "list[].x", "rec", "rec.*.y", "free"]);
  const doc = { a: { b: 2 }, list: [{}, { x: "1" }], rec: { any: { y: true } }, free: {} };
  for (const p of schemaKeyPaths(s)) assert.ok(hasPath(doc, p), p);
  assert.equal(hasPath({ list: [{}] }, "list[].x"), false);
  assert.equal(hasPath({ rec: {} }, "rec.*.y"), false);
});

test("docs/puppetdb.md's configs load with the real loaders: the registry's puppetdb section, the client's discovery_method", async () => {
  const { clientConfigSchema } = await import("../../src/config/client.js");
  const blocks = [...readFileSync(join(repoRoot, "docs/puppetdb.md"), "utf8").matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => parseYaml(m[1]!) as Record<string, unknown>);
  const registry = blocks.find((b) => "puppetdb" in b);
  assert.ok(registry, "a registry.yaml block with puppetdb:");
  const parsed = RegistryConfigSchema.parse(registry);
  assert.equal(parsed.puppetdb?.url, "https://puppetdb.example.net:8081");
  assert.deepEqual(Object.keys(parsed.puppetdb!).sort(), ["ca", "cert", "key", "timeout", "url"], "every key of the section is shown");
  const client = blocks.find((b) => "discovery_method" in b);
  assert.equal(clientConfigSchema().parse(client).discovery_method, "puppetdb");
  // and what the docs say is refused is refused
  assert.throws(() => RegistryConfigSchema.parse({ puppetdb: { url: "http://puppetdb.example.net:8080" } }), /plain http port has no authentication/);
  assert.throws(() => RegistryConfigSchema.parse({ puppetdb: { url: "https://puppetdb.example.net:8081", cert: "/x.pem" } }), /cert and key go together/);
});
