import { test } from "node:test";
import assert from "node:assert/strict";
import { buildFilter, compileCompound, compileFilter, FilterError } from "../../src/filter/index.js";
import type { DataLookup, FilterOptions } from "../../src/filter/index.js";
import { emptyFilter } from "../../src/protocol/types.js";
import type { NodeMetadata } from "../../src/protocol/types.js";

function node(identity: string, facts: Record<string, unknown>, classes: string[] = [], agents: string[] = []): NodeMetadata {
  return { identity, facts, classes, agents, collectives: ["muster"] };
}

const web1 = node(
  "web1.example.com",
  {
    country: "de",
    memorysize_mb: 4096,
    processorcount: "8",
    version: "1.10",
    is_virtual: true,
    role: ["web", "cache"],
    os: { family: "Debian", release: { major: "12" } },
    "os.name": "flat-key",
    disks: [{ name: "sda" }],
    nothing: null,
    hostname: "web1",
  },
  ["apache", "apache::mod::ssl", "base"],
  ["rpcutil", "puppet"],
);
const db1 = node(
  "db1.example.com",
  { country: "uk", memorysize_mb: "1024", processorcount: 2, role: "db", os: { family: "RedHat" }, hostname: "db1" },
  ["postgres", "base"],
  ["rpcutil"],
);
const bare = node("bare", {});
const fleet = [web1, db1, bare];

/** Identities of the fleet nodes the filter built from these flags selects. */
function select(options: FilterOptions, data?: (md: NodeMetadata) => DataLookup): string[] {
  const compiled = compileFilter(buildFilter(options));
  return fleet.filter((md) => compiled.matches(md, data?.(md))).map((md) => md.identity);
}
const F = (...fact: string[]) => select({ fact });
const S = (...s: string[]) => select({ select: s });

test("an empty filter matches every node", () => {
  const compiled = compileFilter(emptyFilter());
  assert.deepEqual(compiled.dataCalls, []);
  assert.ok(fleet.every((md) => compiled.matches(md)));
});

test("identity entries are ORed, exact or regex", () => {
  assert.deepEqual(select({ identity: ["db1.example.com"] }), ["db1.example.com"]);
  assert.deepEqual(select({ identity: ["db1.example.com", "/^web/"] }), ["web1.example.com", "db1.example.com"]);
  assert.deepEqual(select({ identity: ["db1"] }), []); // exact means exact
});

test("class and agent entries are ANDed, exact or regex", () => {
  assert.deepEqual(select({ class: ["base"] }), ["web1.example.com", "db1.example.com"]);
  assert.deepEqual(select({ class: ["base", "apache"] }), ["web1.example.com"]);
  assert.deepEqual(select({ class: ["apache::mod::ssl"] }), ["web1.example.com"]);
  assert.deepEqual(select({ class: ["/^post/"] }), ["db1.example.com"]);
  assert.deepEqual(select({ class: ["apache", "postgres"] }), []);
  assert.deepEqual(select({ agent: ["rpcutil"] }), ["web1.example.com", "db1.example.com"]);
  assert.deepEqual(select({ agent: ["rpcutil", "puppet"] }), ["web1.example.com"]);
  assert.deepEqual(select({ agent: ["/^pup/"] }), ["web1.example.com"]);
});

test("kinds are ANDed with each other", () => {
  assert.deepEqual(select({ class: ["base"], fact: ["country=uk"] }), ["db1.example.com"]);
  assert.deepEqual(select({ identity: ["/example/"], agent: ["puppet"], with: ["country=de base"] }), ["web1.example.com"]);
  assert.deepEqual(select({ identity: ["db1.example.com"], class: ["apache"] }), []);
});

test("numeric comparison when both sides are numbers, string comparison otherwise", () => {
  assert.deepEqual(F("memorysize_mb>=2048"), ["web1.example.com"]); // 4096 (number) and "1024" (string)
  assert.deepEqual(F("memorysize_mb<2048"), ["db1.example.com"]);
  assert.deepEqual(F("processorcount>4"), ["web1.example.com"]); // "8" and 2
  assert.deepEqual(F("processorcount>10"), []); // as strings, "8" > "10" would hold
  assert.deepEqual(F("memorysize_mb==4096.0"), ["web1.example.com"]);
  assert.deepEqual(F("memorysize_mb<=1024"), ["db1.example.com"]);
  assert.deepEqual(F("version<1.9"), ["web1.example.com"]); // numeric: 1.10 < 1.9
  assert.deepEqual(F("country>de"), ["db1.example.com"]); // "uk" > "de"
  assert.deepEqual(F("country<e"), ["web1.example.com"]);
  assert.deepEqual(F("hostname>=web"), ["web1.example.com"]);
  assert.deepEqual(F("memorysize_mb>0x10"), ["web1.example.com", "db1.example.com"]); // "0x10" is no number: strings "4096" > "0x10", "1024" > "0x10"
  assert.deepEqual(F("memorysize_mb<abc"), ["web1.example.com", "db1.example.com"]); // string order: digits sort before letters
});

test("booleans and numbers compare by their string form for ==", () => {
  assert.deepEqual(F("is_virtual=true"), ["web1.example.com"]);
  assert.deepEqual(F("is_virtual=false"), []);
  assert.deepEqual(F("memorysize_mb=4096"), ["web1.example.com"]);
  assert.deepEqual(F("processorcount==2"), ["db1.example.com"]);
});

test("regex matches: =~, == /re/, != /re/", () => {
  assert.deepEqual(F("hostname=~/^web\\d+/"), ["web1.example.com"]);
  assert.deepEqual(F("hostname=~^db"), ["db1.example.com"]);
  assert.deepEqual(F("hostname==/1$/"), ["web1.example.com", "db1.example.com"]);
  assert.deepEqual(F("hostname!=/^web/"), ["db1.example.com"]);
  assert.deepEqual(F("memorysize_mb=~/^40/"), ["web1.example.com"]); // numbers match by string form
  assert.deepEqual(F("country=~/DE/"), []); // case-sensitive
});

test("array facts match when any element matches; != when none equals", () => {
  assert.deepEqual(F("role=web"), ["web1.example.com"]);
  assert.deepEqual(F("role=cache"), ["web1.example.com"]);
  assert.deepEqual(F("role=db"), ["db1.example.com"]);
  assert.deepEqual(F("role=~/^ca/"), ["web1.example.com"]);
  assert.deepEqual(F("role!=web"), ["db1.example.com"]);
  assert.deepEqual(F("role!=db"), ["web1.example.com"]);
});

test("structured facts by dotted path; a flat dotted key wins; own properties only", () => {
  assert.deepEqual(F("os.family=Debian"), ["web1.example.com"]);
  assert.deepEqual(F("os.release.major>=12"), ["web1.example.com"]);
  assert.deepEqual(F("disks.0.name=sda"), ["web1.example.com"]);
  assert.deepEqual(F("os.name=flat-key"), ["web1.example.com"]);
  assert.deepEqual(F("os=/object/"), []); // an object is not a comparable value
  assert.deepEqual(F("constructor=/Function/"), []);
  assert.deepEqual(F("os.family.constructor!=x"), []);
  assert.deepEqual(F("__proto__!=x"), []);
});

test("a missing fact never matches, for every operator, != included", () => {
  for (const op of ["==", "!=", "<", ">", "<=", ">=", "=~"]) {
    assert.deepEqual(F(`missing${op}x`), [], op);
    assert.deepEqual(F(`os.missing${op}1`), [], op);
    assert.deepEqual(F(`nothing${op}1`), [], op); // null counts as missing
  }
  assert.deepEqual(F("country!=de"), ["db1.example.com"]); // bare has no country
});

test("compound expressions evaluate with not > and > or", () => {
  assert.deepEqual(S("country=de or country=uk and postgres"), ["web1.example.com", "db1.example.com"]);
  assert.deepEqual(S("(country=de or country=uk) and postgres"), ["db1.example.com"]);
  assert.deepEqual(S("not apache and base"), ["db1.example.com"]);
  assert.deepEqual(S("not (apache and base)"), ["db1.example.com", "bare"]);
  assert.deepEqual(S("!apache"), ["db1.example.com", "bare"]);
  assert.deepEqual(S("country != de"), ["db1.example.com"]);
  assert.deepEqual(S("apache::mod::ssl"), ["web1.example.com"]);
  assert.deepEqual(S("/^post/ or memorysize_mb > 2048"), ["web1.example.com", "db1.example.com"]);
  assert.deepEqual(S("os.family=~/^red/"), []);
  assert.deepEqual(S("os.family=RedHat", "base"), ["db1.example.com"]); // several -S are ANDed
});

test("data plugins: calls are listed once, missing results or fields make the statement false", () => {
  const compiled = compileFilter(
    buildFilter({
      select: [
        "provision().locked=false and fact('os.family').value=Debian",
        "not provision().locked=true or puppet().enabled=true",
      ],
    }),
  );
  assert.deepEqual(compiled.dataCalls, [
    { plugin: "provision", argument: undefined },
    { plugin: "fact", argument: "os.family" },
    { plugin: "puppet", argument: undefined },
  ]);

  const seen: string[] = [];
  const results: Record<string, Record<string, unknown> | undefined> = {
    "provision:": { locked: false },
    "fact:os.family": { value: "Debian" },
    "puppet:": undefined,
  };
  const lookup: DataLookup = (plugin, argument) => {
    seen.push(`${plugin}:${argument ?? ""}`);
    return results[`${plugin}:${argument ?? ""}`];
  };
  assert.equal(compiled.matches(web1, lookup), true);
  assert.ok(seen.includes("fact:os.family"));

  results["fact:os.family"] = { value: "RedHat" };
  assert.equal(compiled.matches(web1, lookup), false);

  results["fact:os.family"] = { other: "Debian" }; // field missing
  assert.equal(compiled.matches(web1, lookup), false);

  results["fact:os.family"] = { value: "Debian" };
  results["provision:"] = undefined; // plugin answered nothing: statement false, `not` of it true
  assert.equal(compiled.matches(web1, lookup), false); // first -S fails on provision().locked=false
  const negated = compileFilter(buildFilter({ select: ["not provision().locked=true"] }));
  assert.equal(negated.matches(web1, lookup), true);
  assert.equal(negated.matches(web1), true); // no lookup at all: every plugin answers undefined

  const nested = compileFilter(buildFilter({ select: ["fstat('/etc/hosts').stat.size >= 100"] }));
  assert.equal(nested.matches(bare, () => ({ stat: { size: 120 } })), true);
  assert.equal(nested.matches(bare, () => ({ stat: { size: 99 } })), false);
  assert.equal(nested.matches(bare, () => ({ stat: "big" })), false);
});

test("compound compilation is cached by source text", () => {
  const a = compileCompound("country=de and apache");
  const b = compileCompound("country=de and apache");
  assert.equal(a, b);
  assert.notEqual(compileCompound("country=de and  apache"), a);
  assert.equal(a.evaluate(web1, () => undefined), true);
});

test("compileFilter rejects parts that do not parse, naming where", () => {
  const filter = emptyFilter();
  filter.compound.push("ok", "country=");
  assert.throws(() => compileFilter(filter), (err: unknown) => {
    assert.ok(err instanceof FilterError);
    assert.equal(err.message, "filter.compound[1]: expected a value after '=' at column 9");
    return true;
  });
  const bad = emptyFilter();
  bad.fact.push({ fact: "x", operator: "<", value: "/re/" });
  assert.throws(() => compileFilter(bad), /filter\.fact\[0\]: a regular expression can only follow/);
});
