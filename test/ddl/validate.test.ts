import { test } from "node:test";
import assert from "node:assert/strict";
import { validateInput, type AgentDDL } from "../../src/ddl/index.js";
import { RpcError } from "../../src/errors.js";
import { Status } from "../../src/protocol/status.js";
import { sampleDDL } from "./sample.js";

function rejects(data: unknown, status: number, message: RegExp | string, action = "configure"): void {
  assert.throws(
    () => validateInput(sampleDDL, action, data),
    (e: unknown) => {
      assert.ok(e instanceof RpcError, `expected RpcError, got ${String(e)}`);
      assert.equal(e.status, status, e.message);
      if (typeof message === "string") assert.equal(e.message, message);
      else assert.match(e.message, message);
      return true;
    },
  );
}

const ok = (extra: Record<string, unknown>) => validateInput(sampleDDL, "configure", { name: "web", ...extra });

test("applies defaults and returns a new object", () => {
  const data = { name: "web" };
  const out = validateInput(sampleDDL, "configure", data);
  assert.deepEqual(out, { name: "web", count: 1, force: false, mode: "safe", settings: {} });
  assert.deepEqual(data, { name: "web" }, "input is not mutated");
  assert.notEqual(out, data);
});

test("defaults are copies, not the DDL's own objects", () => {
  const first = ok({});
  (first["settings"] as Record<string, unknown>)["polluted"] = true;
  assert.deepEqual(ok({})["settings"], {});
  assert.deepEqual(sampleDDL.actions.configure.input.settings.default, {});
});

test("given values win over defaults; null counts as absent", () => {
  assert.equal(ok({ count: 5 })["count"], 5);
  assert.equal(ok({ count: null })["count"], 1);
  assert.equal(ok({ force: undefined })["force"], false);
  assert.ok(!("ratio" in ok({ ratio: null })));
});

test("unknown action is status 2, also for prototype names", () => {
  rejects({}, Status.UnknownAction, "unknown action 'nope' for agent 'sample'; actions: configure, status", "nope");
  rejects({}, Status.UnknownAction, /unknown action 'constructor'/, "constructor");
  rejects({}, Status.UnknownAction, /unknown action '__proto__'/, "__proto__");
});

test("missing required input is status 3", () => {
  rejects({}, Status.MissingData, "missing required input 'name' for sample#configure (Service name)");
  rejects({ name: null }, Status.MissingData, /'name'/);
  rejects({ count: 2 }, Status.MissingData, /'name'/);
});

test("a required input with a default is satisfied by it", () => {
  const ddl = {
    metadata: { name: "x", description: "x", version: "1", timeout: 1 },
    actions: { a: { description: "a", input: { n: { description: "n", type: "integer", optional: false, default: 7 } }, output: {} } },
  } as const satisfies AgentDDL;
  assert.deepEqual(validateInput(ddl, "a", {}), { n: 7 });
});

test("non-object data is status 4", () => {
  for (const data of [null, undefined, "name=web", 42, true, ["web"], new Date()]) {
    rejects(data, Status.InvalidData, /must be an object of named inputs/);
  }
  assert.deepEqual(validateInput(sampleDDL, "status", {}), {});
});

test("unknown input keys are status 4 and list the inputs", () => {
  rejects({ name: "web", colour: "red" }, Status.InvalidData, /^unknown input 'colour' for sample#configure; expected one of: command, count, /);
  rejects({ name: "web", toString: "x" }, Status.InvalidData, /unknown input 'toString'/);
  rejects({ extra: 1 }, Status.InvalidData, "unknown input 'extra' for sample#status; expected no inputs", "status");
  rejects(JSON.parse('{"name":"web","__proto__":{"x":1}}'), Status.InvalidData, /unknown input '__proto__'/);
});

const typeCases: { input: string; good: unknown[]; bad: unknown[]; expects: string }[] = [
  { input: "note", good: ["", "any text; even | this"], bad: [1, true, ["a"], {}], expects: "a string" },
  { input: "count", good: [0, -3, 42, 2 ** 40], bad: [3.5, "3", NaN, Infinity, true, [1]], expects: "an integer" },
  { input: "ratio", good: [0, 3.5, -0.25, 1e-9], bad: ["3.5", NaN, Infinity, -Infinity, false], expects: "a number" },
  { input: "load", good: [1, 1.5], bad: ["1", NaN, Infinity, {}], expects: "a number" },
  { input: "force", good: [true, false], bad: ["true", 1, 0, "yes"], expects: "a boolean (true or false)" },
  { input: "settings", good: [{}, { a: 1, b: { c: [1] } }], bad: [[], "{}", 1, new Map()], expects: "a hash (JSON object)" },
  { input: "tags", good: [[], ["a", 1, { b: 2 }]], bad: [{}, "a,b", 1], expects: "an array" },
  { input: "mode", good: ["fast", "safe"], bad: ["slow", "FAST", 1, ["fast"]], expects: "one of" },
  { input: "port", good: [80, 443], bad: ["80", 8080, true], expects: "one of" },
];

for (const c of typeCases) {
  test(`type of '${c.input}': accepted and rejected values`, () => {
    for (const v of c.good) assert.deepEqual(ok({ [c.input]: v })[c.input], v, `${c.input}=${String(v)} should pass`);
    for (const v of c.bad) rejects({ name: "web", [c.input]: v }, Status.InvalidData, new RegExp(`^input '${c.input}' must be ${c.expects.replace(/[()]/g, "\\$&")}`));
  });
}

test("list membership message names the allowed values", () => {
  rejects({ name: "web", mode: "slow" }, Status.InvalidData, `input 'mode' must be one of "fast", "safe", got "slow"`);
  rejects({ name: "web", port: 8080 }, Status.InvalidData, `input 'port' must be one of 80, 443, got 8080`);
});

test("regex validation", () => {
  assert.equal(ok({ name: "web-01" })["name"], "web-01");
  rejects({ name: "Web" }, Status.InvalidData, `input 'name' must match /^[a-z][a-z0-9-]*$/, got "Web"`);
  rejects({ name: "web 1" }, Status.InvalidData, /must match/);
});

test("maxlength, with 0 meaning unlimited", () => {
  assert.equal(ok({ name: "a".repeat(16) })["name"], "a".repeat(16));
  rejects({ name: "a".repeat(17) }, Status.InvalidData, "input 'name' must be at most 16 characters, got 17");
  assert.equal(ok({ note: "x".repeat(10_000) })["note"], "x".repeat(10_000));
});

test("shellsafe", () => {
  for (const v of ["ls -l /tmp", "echo 'hi there'", "a=b", "(x)", "path/with spaces"]) assert.equal(ok({ command: v })["command"], v);
  for (const v of ["a`id`", "$(id)", "a;b", "a|b", "a && b", "a & b", "a > f", "a < f", "a\nb", "a\rb", "a\0b"]) {
    rejects({ name: "web", command: v }, Status.InvalidData, /^input 'command' must be shell safe/);
  }
});

test("ipv4address", () => {
  for (const v of ["10.0.0.1", "127.0.0.11", "0.0.0.0", "255.255.255.255"]) assert.equal(ok({ ipaddress: v })["ipaddress"], v);
  rejects({ name: "web", ipaddress: "300.1.1.1" }, Status.InvalidData, `input 'ipaddress' must be an IPv4 address, got "300.1.1.1"`);
  for (const v of ["10.0.0", "::1", "host.example", "10.0.0.1 ", ""]) rejects({ name: "web", ipaddress: v }, Status.InvalidData, /an IPv4 address/);
});

test("ipv6address", () => {
  for (const v of ["::1", "fe80::1", "2001:db8::8a2e:370:7334", "::ffff:10.0.0.1"]) assert.equal(ok({ ip6: v })["ip6"], v);
  for (const v of ["10.0.0.1", "gggg::1", "1:2:3:4:5:6:7:8:9", ":::"]) rejects({ name: "web", ip6: v }, Status.InvalidData, /^input 'ip6' must be an IPv6 address/);
});

test("a long hostile value is shown cut short", () => {
  assert.throws(
    () => ok({ ipaddress: "9".repeat(5000) }),
    (e: unknown) => e instanceof RpcError && e.message.length < 200 && e.message.endsWith("..."),
  );
});

test("a DDL regex that does not compile is status 5, every time, never a SyntaxError", () => {
  const ddl = {
    metadata: { name: "broken", description: "x", version: "1", timeout: 1 },
    actions: { a: { description: "a", input: { s: { description: "s", type: "string", optional: true, validation: "([a-z" } }, output: {} } },
  } as const satisfies AgentDDL;
  for (let i = 0; i < 2; i++) {
    assert.throws(
      () => validateInput(ddl, "a", { s: "x" }),
      (e: unknown) => e instanceof RpcError && e.status === Status.UnknownError && /invalid validation regex/.test(e.message),
    );
  }
  assert.deepEqual(validateInput(ddl, "a", {}), {}, "absent input is not checked");
});

test("a validation named like an Object method is a regex, not a lookup", () => {
  const ddl = {
    metadata: { name: "odd", description: "x", version: "1", timeout: 1 },
    actions: { a: { description: "a", input: { s: { description: "s", type: "string", optional: true, validation: "toString" } }, output: {} } },
  } as const satisfies AgentDDL;
  assert.deepEqual(validateInput(ddl, "a", { s: "call toString()" }), { s: "call toString()" });
  assert.throws(() => validateInput(ddl, "a", { s: "nope" }), /must match \/toString\//);
});
