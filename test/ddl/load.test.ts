import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadDDLFile, parseDDL, validateInput } from "../../src/ddl/index.js";
import { MusterError } from "../../src/errors.js";
import { sampleDDL, sampleJson } from "./sample.js";

function invalid(json: unknown, ...expected: (string | RegExp)[]): void {
  assert.throws(
    () => parseDDL(json, "agents/sample.json"),
    (e: unknown) => {
      assert.ok(e instanceof MusterError, `expected MusterError, got ${String(e)}`);
      assert.equal(e.code, "MUSTER_DDL_INVALID");
      assert.match(e.message, /^agents\/sample\.json: invalid agent DDL:\n/);
      for (const x of expected) {
        if (typeof x === "string") assert.ok(e.message.includes(x), `message lacks ${JSON.stringify(x)}:\n${e.message}`);
        else assert.match(e.message, x);
      }
      return true;
    },
  );
}

function mutated(change: (d: any) => void): unknown {
  const d = sampleJson();
  change(d);
  return d;
}

test("a valid DDL parses to the same shape, usable for validation", () => {
  const ddl = parseDDL(sampleJson(), "sample.json");
  assert.deepEqual(ddl, sampleJson());
  assert.equal(Object.getPrototypeOf(ddl.actions), Object.prototype);
  assert.deepEqual(validateInput(ddl, "configure", { name: "web" }), validateInput(sampleDDL, "configure", { name: "web" }));
});

test("input and output may be left out; $schema is allowed and dropped", () => {
  const ddl = parseDDL({ $schema: "https://example.invalid/ddl.json", metadata: sampleJson().metadata, actions: { ping: { description: "Ping" } } });
  assert.deepEqual(ddl.actions["ping"], { description: "Ping", input: {}, output: {} });
  assert.ok(!("$schema" in ddl));
});

test("shape errors name the file and the path of the bad field", () => {
  invalid("not json object", "(document): ");
  invalid([], "(document): ");
  invalid(mutated((d) => delete d.metadata.timeout), "  metadata.timeout: ");
  invalid(mutated((d) => (d.metadata.timeout = -1)), "  metadata.timeout: ");
  invalid(mutated((d) => (d.metadata.name = "bad.name")), "  metadata.name: must be lower case");
  invalid(mutated((d) => (d.actions.configure.input.count.type = "int")), "  actions.configure.input.count.type: ");
  invalid(mutated((d) => (d.actions.configure.input.count.optinal = true)), "  actions.configure.input.count: ", /optinal/);
  invalid(mutated((d) => delete d.actions.configure.input.name.optional), "  actions.configure.input.name.optional: ");
  invalid(mutated((d) => (d.actions.configure.input.name.maxlength = 1.5)), "  actions.configure.input.name.maxlength: ");
  invalid(mutated((d) => (d.actions.status.output.os.display_as = 3)), "  actions.status.output.os.display_as: ");
  invalid(mutated((d) => (d.actions.status.aggregate[1].function = "median")), "  actions.status.aggregate[1].function: ");
  invalid(mutated((d) => (d.actions.configure.display = "sometimes")), "  actions.configure.display: ");
  invalid(mutated((d) => (d.actions = {})), "  actions: an agent needs at least one action");
  invalid(mutated((d) => (d.actions["bad name"] = d.actions.status)), /actions(\["bad name"\])?: /);
});

test("several problems are all reported", () => {
  invalid(
    mutated((d) => {
      d.metadata.version = 1;
      d.actions.configure.input.count.type = "int";
    }),
    "metadata.version",
    "actions.configure.input.count.type",
  );
});

test("aggregates must name a declared output", () => {
  invalid(
    mutated((d) => (d.actions.status.aggregate[0].output = "kernel")),
    "  actions.status.aggregate[0].output: aggregate names output 'kernel', which the action does not declare",
  );
});

test("validation regexes must compile", () => {
  invalid(mutated((d) => (d.actions.configure.input.name.validation = "([a-z")), "  actions.configure.input.name.validation: validation /([a-z/ does not compile");
});

test("list inputs need their values; defaults must fit the input", () => {
  invalid(mutated((d) => delete d.actions.configure.input.mode.list), "  actions.configure.input.mode.list: ");
  invalid(mutated((d) => (d.actions.configure.input.mode.list = [])), "  actions.configure.input.mode.list: ");
  invalid(mutated((d) => (d.actions.configure.input.count.default = "one")), `  actions.configure.input.count.default: default does not fit: input 'count' must be an integer, got "one"`);
  invalid(mutated((d) => (d.actions.configure.input.mode.default = "slow")), "actions.configure.input.mode.default: ");
  invalid(mutated((d) => (d.actions.configure.input.name.default = "Web")), "actions.configure.input.name.default: default does not fit: input 'name' must match");
});

test("loadDDLFile reads, parses and names the file in errors", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "muster-ddl-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const good = join(dir, "sample.json");
  await writeFile(good, JSON.stringify(sampleDDL));
  assert.deepEqual(await loadDDLFile(good), sampleJson());

  const notJson = join(dir, "broken.json");
  await writeFile(notJson, "{ metadata: ");
  await assert.rejects(loadDDLFile(notJson), (e: unknown) => e instanceof MusterError && e.code === "MUSTER_DDL_INVALID" && e.message.startsWith(`${notJson}: agent DDL is not valid JSON`));

  const bad = join(dir, "bad.json");
  await writeFile(bad, JSON.stringify(mutated((d) => (d.metadata.timeout = "10"))));
  await assert.rejects(loadDDLFile(bad), (e: unknown) => e instanceof MusterError && e.message.startsWith(`${bad}: invalid agent DDL:\n  metadata.timeout: `));

  const missing = join(dir, "missing.json");
  await assert.rejects(loadDDLFile(missing), (e: unknown) => e instanceof MusterError && e.code === "MUSTER_DDL_INVALID" && e.message.startsWith(`${missing}: cannot read agent DDL`));
});
