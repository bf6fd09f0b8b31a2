import { test } from "node:test";
import assert from "node:assert/strict";
import { coerceCliInputs, validateInput } from "../../src/ddl/index.js";
import { MusterError } from "../../src/errors.js";
import { sampleDDL } from "./sample.js";

const coerce = (...pairs: string[]) => coerceCliInputs(sampleDDL, "configure", pairs);

function fails(pairs: string[], message: RegExp, code = "MUSTER_INPUT_INVALID", action = "configure"): void {
  assert.throws(
    () => coerceCliInputs(sampleDDL, action, pairs),
    (e: unknown) => {
      assert.ok(e instanceof MusterError, `expected MusterError, got ${String(e)}`);
      assert.equal(e.code, code);
      assert.match(e.message, message);
      return true;
    },
  );
}

test("strings are kept as given, split on the first '='", () => {
  assert.deepEqual(coerce("name=web", "command=FOO=bar baz", "note="), { name: "web", command: "FOO=bar baz", note: "" });
});

test("integers parse strictly", () => {
  assert.deepEqual(coerce("count=3"), { count: 3 });
  assert.deepEqual(coerce("count=-42"), { count: -42 });
  assert.deepEqual(coerce("count=+7"), { count: 7 });
  for (const v of ["3abc", "", "3.0", "1e3", "0x10", " 3", "99999999999999999999", "three"]) fails([`count=${v}`], /^input 'count' must be an integer/);
});

test("floats and numbers parse strictly", () => {
  assert.deepEqual(coerce("ratio=3.5", "load=-0.25"), { ratio: 3.5, load: -0.25 });
  assert.deepEqual(coerce("ratio=1e3", "load=.5"), { ratio: 1000, load: 0.5 });
  assert.deepEqual(coerce("ratio=2"), { ratio: 2 });
  for (const v of ["abc", "1.2.3", "", "Infinity", "NaN", "3abc", "1e400"]) {
    fails([`ratio=${v}`], /^input 'ratio' must be a number/);
    fails([`load=${v}`], /^input 'load' must be a number/);
  }
});

test("booleans accept true/false yes/no y/n 1/0 in any case", () => {
  for (const v of ["true", "yes", "y", "1", "TRUE", "Yes"]) assert.deepEqual(coerce(`force=${v}`), { force: true }, v);
  for (const v of ["false", "no", "n", "0", "False", "NO"]) assert.deepEqual(coerce(`force=${v}`), { force: false }, v);
  for (const v of ["maybe", "", "2", "on"]) fails([`force=${v}`], /^input 'force' must be a boolean/);
});

test("hashes and arrays parse JSON of the right shape", () => {
  assert.deepEqual(coerce('settings={"a":1,"b":[true]}'), { settings: { a: 1, b: [true] } });
  assert.deepEqual(coerce('tags=["a",2]'), { tags: ["a", 2] });
  for (const v of ["[1]", "nope", "null", '"s"', ""]) fails([`settings=${v}`], /^input 'settings' must be a JSON object/);
  for (const v of ["{}", "a,b", "1", ""]) fails([`tags=${v}`], /^input 'tags' must be a JSON array/);
});

test("lists keep strings and map numbers to the listed value", () => {
  assert.deepEqual(coerce("mode=fast"), { mode: "fast" });
  assert.deepEqual(coerce("port=443"), { port: 443 });
  fails(["port=8080"], /^input 'port' must be one of 80, 443, got "8080"/);
  fails(["mode=slow"], /^input 'mode' must be one of fast, safe/);
});

test("unknown keys and malformed pairs list the action's inputs", () => {
  fails(["colour=red"], /^unknown input 'colour' for sample#configure\nsample#configure inputs:\n {2}command \(string, optional\): Command to run\n/);
  fails(["colour=red"], /\n {2}name \(string, required\): Service name/);
  fails(["colour=red"], /\n {2}mode \(list \(fast, safe\), optional\)/);
  fails(["name"], /^argument "name" is not key=value\n/, "MUSTER_USAGE");
  fails(["=web"], /is not key=value/, "MUSTER_USAGE");
  fails(["toString=x"], /unknown input 'toString'/);
  fails(["name=a", "name=b"], /given more than once/);
  fails(["x=1"], /sample#status takes no inputs/, "MUSTER_INPUT_INVALID", "status");
  fails([], /no action 'nope'/, "MUSTER_UNKNOWN_ACTION", "nope");
});

test("coerced CLI input passes validation", () => {
  const input = coerceCliInputs(sampleDDL, "configure", ["name=web-1", "count=2", "force=yes", "port=80", "ipaddress=10.0.0.1"]);
  assert.deepEqual(validateInput(sampleDDL, "configure", input), {
    name: "web-1",
    count: 2,
    force: true,
    port: 80,
    ipaddress: "10.0.0.1",
    mode: "safe",
    settings: {},
  });
  assert.deepEqual(coerceCliInputs(sampleDDL, "status", []), {});
});
