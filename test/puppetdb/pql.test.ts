import { test } from "node:test";
import assert from "node:assert/strict";
import { buildFilter, FilterError, type FilterOptions } from "../../src/filter/index.js";
import { activeNodes, NO_MUSTER_FACT } from "../../src/puppetdb/discover.js";
import { classTitle, factPaths, factShapesFrom, factTypesQuery, nodesQuery, pqlPlan, render, str, type FactType, type TranslateOptions } from "../../src/puppetdb/pql.js";
import { pgRegex } from "../../src/puppetdb/regex.js";

// The translation of muster's filters to PQL (src/puppetdb/pql.ts), pure. That the queries select
// what broadcast discovery selects is proven against a real PuppetDB in puppetdb.test.ts; here:
// the text of each kind of statement, which statements are exact, and what is refused.

const plan = (o: FilterOptions, t: TranslateOptions = {}) => pqlPlan(buildFilter(o), t);
const query = (o: FilterOptions, t: TranslateOptions = {}) => nodesQuery(plan(o, t).maybe);
const types = (m: Record<string, FactType[]>, arrays = false) => new Map(Object.entries(m).map(([k, v]) => [k, { types: new Set(v), arrays }]));

test("no filter selects every active node; the collective is the muster fact's (a map of names: a lookup in inventory)", () => {
  assert.equal(query({}), "nodes[certname, deactivated, expired] {}");
  assert.equal(
    query({}, { collective: "muster" }),
    "nodes[certname, deactivated, expired] { certname in inventory[certname] { facts.muster.collectives.muster = true } }",
  );
});

test("identities are ORed certnames (regexes too), and a pql: identity becomes the certnames it returned", () => {
  assert.equal(render(plan({ identity: ["web1.example.net", "/^db\\d+/"] }).sure), 'certname = "web1.example.net" or certname ~ "^db\\\\d+"');
  const q = 'inventory[certname] { facts.os.family = "Debian" }';
  const p = plan({ identity: [`pql:${q}`] }, { pql: new Map([[q, ["a.lab", "b.lab"]]]) });
  assert.equal(render(p.sure), 'certname in ["a.lab", "b.lab"]');
  assert.equal(nodesQuery(plan({ identity: [`pql:${q}`] }, { pql: new Map([[q, []]]) }).maybe), undefined, "a query that returned nothing selects nothing, without asking");
  assert.throws(() => plan({ identity: [`pql:${q}`] }), /was not run first/);
});

test("classes are Class resources by their capitalised title; a name with capitals is no Puppet class", () => {
  assert.equal(classTitle("apache::mod::ssl"), "Apache::Mod::Ssl");
  assert.equal(render(plan({ class: ["mysql::master"] }).sure), 'certname in resources[certname] { type = "Class" and title = "Mysql::Master" }');
  assert.equal(plan({ class: ["Mysql"] }).sure.k, "false");
  const lower = plan({ class: ["/^mysql::m/"] });
  assert.ok(lower.exact, "a regex without capitals matches the title ignoring case exactly when it matches the name");
  assert.match(render(lower.sure), /title ~ "\(\?i\)\^mysql::m"/);
  const upper = plan({ class: ["/^Mysql/"] });
  assert.equal(upper.exact, false);
  assert.equal(upper.sure.k, "false");
  assert.deepEqual([upper.classes, lower.classes], [true, true]);
});

test("a string fact: its value in inventory, an array's elements in fact_contents only where PuppetDB holds arrays there", () => {
  const unknown = plan({ fact: ["country=de"] });
  assert.ok(unknown.exact);
  assert.equal(render(unknown.sure), 'certname in inventory[certname] { facts.country = "de" } or certname in fact_contents[certname] { (path ~> ["^country$", "^[0-9]+$"]) and value = "de" }');
  assert.equal(render(plan({ fact: ["country=de"] }, { factShapes: types({ country: ["string"] }) }).sure), 'certname in inventory[certname] { facts.country = "de" }', "no node holds an array there: inventory alone");
  assert.match(render(plan({ fact: ["os.family=Debian"] }, { factShapes: types({ "os.family": ["string"] }) }).sure), /^certname in inventory\[certname\] \{ facts\.os\.family = "Debian" \} or certname in inventory\[certname\] \{ facts\."os\.family" = "Debian" \}$/);
  assert.match(render(plan({ fact: ["disks.0.name=sda"] }).sure), /fact_contents\[certname\] \{ \(path ~> \["\^disks\$", "\^0\$", "\^name\$"\]/, "an index: fact_contents, which reads indexes and keys alike");
  assert.match(render(plan({ fact: ["is_virtual=true"] }).sure), /facts\.is_virtual = "true" or facts\.is_virtual = true/, "a boolean compares by its string form");
  assert.match(render(plan({ fact: ["role=/^web/"] }).sure), /^certname in fact_contents\[certname\] \{ \(path = \["role"\] or path ~> \["\^role\$", "\^\[0-9\]\+\$"\]\) and value ~ "\^web" \}$/, "a regex reads leaves only: inventory would read a structure's JSON text");
  assert.deepEqual(plan({ fact: ["os.family=Debian"] }).facts, ["os", "os.family"]);
});

test("numbers: exact where PuppetDB holds only numbers; strings that read as numbers are left to muster's matcher", () => {
  const onlyNumbers = plan({ fact: ["processorcount>4"] }, { factShapes: types({ processorcount: ["integer"] }) });
  assert.ok(onlyNumbers.exact);
  assert.match(render(onlyNumbers.sure), /value > 4 }$/);
  const strings = plan({ fact: ["os.release.major>=11"] }, { factShapes: types({ "os.release.major": ["string"] }) });
  assert.equal(strings.exact, false, '"12" >= 11 for muster: PQL cannot compare a string as a number');
  assert.doesNotMatch(render(strings.maybe), /value/, "every node holding the fact may match");
  const eq = plan({ fact: ["memorysize_mb=4096"] });
  assert.equal(eq.exact, false, "the types are unknown: \"4096.0\" may be there");
  assert.match(render(eq.sure), /facts\.memorysize_mb = 4096 or facts\.memorysize_mb = "4096"/);
  assert.match(render(eq.maybe), /value = 4096 or value ~ /);
  assert.ok(plan({ fact: ["memorysize_mb=4096"] }, { factShapes: types({ memorysize_mb: ["integer"] }) }).exact);
  const text = plan({ fact: ["hostname>m"] });
  assert.equal(text.sure.k, "false", "PQL cannot order strings: all decided by muster's matcher");
});

test("not swaps sure and maybe; != is 'present and not equal' (a missing fact never matches)", () => {
  const p = plan({ select: ["not os.release.major>=11"] }, { factShapes: types({ "os.release.major": ["string"] }) });
  const inner = plan({ fact: ["os.release.major>=11"] }, { factShapes: types({ "os.release.major": ["string"] }) });
  assert.deepEqual(p.sure, { k: "not", c: inner.maybe });
  assert.deepEqual(p.maybe, { k: "not", c: inner.sure });
  const ne = plan({ fact: ["country!=de"] }, { factShapes: types({ country: ["string"] }) });
  assert.ok(ne.exact === false, "present: a leaf for sure, a top-level fact at most");
  const leaves = '(path = ["country"] or path ~> ["^country$", "^[0-9]+$"])';
  assert.equal(render(ne.sure), `certname in fact_contents[certname] { ${leaves} } and !(certname in inventory[certname] { facts.country = "de" })`);
  assert.equal(render(ne.maybe), 'certname in facts[certname] { name in ["country"] } and !(certname in inventory[certname] { facts.country = "de" })');
});

test("compound expressions nest; fact() and agent() are answered from PuppetDB, other data plugins refused", () => {
  const p = plan({ select: ["(country=de or country=uk) and not /^db/"] });
  assert.ok(p.exact);
  assert.match(render(p.sure), /^\(.* or .*\) and !\(certname in resources\[certname\] \{ type = "Class" and title ~ "\(\?i\)\^db" \}\)$/);
  assert.equal(render(plan({ select: ["fact('country').value=de"] }).sure), render(plan({ fact: ["country=de"] }).sure));
  assert.equal(render(plan({ select: ["agent('puppet').present=true"] }).sure), render(plan({ agent: ["puppet"] }).sure));
  assert.equal(render(plan({ select: ["agent('puppet').present=false"] }).sure), "!(certname in inventory[certname] { facts.muster.agents.puppet = true })");
  assert.equal(plan({ select: ["agent('puppet').name=puppet"] }).sure.k, "true");
  for (const s of ["provision().locked=false", "agent('puppet').version=1", "puppet().enabled=true"]) {
    assert.throws(() => plan({ select: [`country=de and ${s}`] }), (e: unknown) => e instanceof FilterError && /-S\[0\]: .*use broadcast discovery \(--dm broadcast\)/.test(e.message), s);
  }
});

test("agents are the muster fact's map: a name is a lookup, a regex reads the names", () => {
  assert.equal(render(plan({ agent: ["puppet"] }).sure), "certname in inventory[certname] { facts.muster.agents.puppet = true }");
  assert.equal(render(plan({ agent: ["/^pup/"] }).sure), 'certname in fact_contents[certname] { path ~> ["^muster$", "^agents$", "^pup"] and value = true }');
  assert.match(render(plan({}, { collective: "muster-eu" }).sure), /facts\.muster\.collectives\."muster-eu" = true/);
  assert.deepEqual(plan({ agent: ["puppet"] }).facts, ["muster"]);
});

test("strings are quoted for PQL; control characters are refused", () => {
  assert.equal(str('a"b\\c'), '"a\\"b\\\\c"');
  assert.throws(() => str("a\nb"), FilterError);
  assert.match(render(plan({ fact: ['motd="say \\"hi\\""'] }).sure), /facts\.motd = "say \\"hi\\""/);
});

test("regexes: PostgreSQL's spelling of what JavaScript means, or a refusal", () => {
  assert.equal(pgRegex("\\bweb\\d+\\B"), "\\yweb\\d+\\Y");
  assert.equal(pgRegex("[\\b]"), "[\\b]", "in a class \\b is a backspace in both");
  assert.equal(pgRegex("\\x41B"), "\\u0041B", "PostgreSQL's \\x would swallow the B");
  assert.equal(pgRegex("(?:a|b)(?=c)(?<=x)y"), "(?:a|b)(?=c)(?<=x)y");
  for (const bad of ["(?<name>x)", "\\k<n>", "\\p{L}", "[^]", "a{,3}", "[\\D]", "\\m", "\\"]) assert.throws(() => pgRegex(bad), FilterError, bad);
  assert.throws(() => plan({ fact: ["name=~/(?<n>x)/"] }), /PostgreSQL \(PuppetDB\) reads differently/);
});

test("fact shapes: fact_paths says the types at the filter's paths, and whether a node holds an array there", () => {
  const f = buildFilter({ fact: ["os.release.major>=11", "country=de"], select: ["processors.count>2 or fact('role').value=web"] });
  assert.deepEqual(factPaths(f), ["country", "os.release.major", "processors.count", "role"]);
  assert.match(factTypesQuery(["role"])!, /^fact_paths\[path, type\] \{ path ~> \["role"\] or path ~> \["role", "\[0-9\]\+"\] \}$/);
  const got = factShapesFrom(["role", "os.release.major", "country"], [{ path: ["role", 0], type: "string" }, { path: ["role"], type: "string" }, { path: ["os", "release", "major"], type: "integer" }, { path: ["roles"], type: "float" }, "garbage", { path: "x" }]);
  assert.deepEqual(Object.fromEntries([...got].map(([k, v]) => [k, [[...v.types], v.arrays]])), { role: [["string"], true], "os.release.major": [["integer"], false], country: [[], false] });
});

test("PuppetDB's rows: deactivated or expired nodes are left out even when PuppetDB lists them", () => {
  assert.deepEqual(activeNodes([{ certname: "a", deactivated: null, expired: null }, { certname: "b", deactivated: "2024-01-01T00:00:00Z", expired: null }, { certname: "c", deactivated: null, expired: "2024-01-01T00:00:00Z" }, { certname: 7 }, null, "x"]), ["a"]);
  assert.equal(NO_MUSTER_FACT, "nodes[count()] { !(certname in inventory[certname] { facts.muster.collectives is not null }) }");
});
