import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { builtinDataDDLs, dataPluginCatalogue } from "../../src/agents/data-ddls.js";
import { createProvisionAgent } from "../../src/agents/provision/index.js";
import { createPuppetAgent } from "../../src/agents/puppet/agent.js";
import { rpcutilDDL } from "../../src/agents/rpcutil/ddl.js";
import { parseDataDDL } from "../../src/ddl/data.js";
import { MusterError } from "../../src/errors.js";
import { buildFilter, compileFilter, FilterError, parseCompound, validateWireFilter } from "../../src/filter/index.js";
import { agentDataPlugin, factDataPlugin } from "../../src/server/data-plugins.js";
import { tempDir } from "../support/collective.js";

// Client-side checking of -S data plugin calls against the plugins the client knows, and the
// built-in declarations held to what the plugins really return.

const builtins = dataPluginCatalogue([]);

function refused(text: string): FilterError {
  try {
    buildFilter({ select: [text] }, { dataPlugins: builtins });
  } catch (e) {
    assert.ok(e instanceof FilterError, String(e));
    return e;
  }
  assert.fail(`expected ${text} to be refused`);
}

test("an unknown data plugin is refused at its column, naming the known ones", () => {
  const e = refused("country=de and nosuchplugin('x').y=1");
  assert.equal(e.column, 16);
  assert.equal(e.context, "-S");
  assert.match(e.reason, /^unknown data plugin 'nosuchplugin' \(known data plugins: agent, fact, provision, puppet; declare another as data\/NAME\.json in a ddl_directories entry of the client config\)$/);
  assert.match(e.render(), /\n {2}country=de and nosuchplugin\('x'\)\.y=1\n {17}\^$/);
  assert.match(refused("provison().locked=false").reason, /did you mean 'provision'\?/);
  assert.match(refused("not (a or constructor().x=1)").reason, /unknown data plugin 'constructor'/, "no prototype lookups");
});

test("an unknown field of a known plugin is refused at the field, naming its fields", () => {
  const e = refused("provision().nosuch=1");
  assert.equal(e.column, 13);
  assert.equal(e.reason, "provision() has no field 'nosuch' (its fields: locked, disabled)");
  assert.match(refused("puppet().enabeld=true").reason, /did you mean 'enabled'\?/);
  assert.match(refused("agent('puppet').version.x=1 and agent('x').nope=1").reason, /agent\(\) has no field 'nope'/);
});

test("a plugin that needs an argument is refused without one", () => {
  const e = refused("fact().value=Debian");
  assert.equal(e.reason, "fact() needs an argument: fact('...')");
  assert.equal(e.column, 6);
});

test("known plugins and fields pass, dotted paths below a known field included", () => {
  const ok = ["provision().locked=false and provision().disabled=false", "fact('os.family').value=Debian", "fact('os').value.family=Debian", "agent('puppet').present=true", "puppet().since_lastrun>3600", "web and not /db/"];
  for (const text of ok) assert.deepEqual(buildFilter({ select: [text] }, { dataPlugins: builtins }).compound, [text]);
});

test("without a catalogue nothing is checked: nodes and wire filters accept any plugin", () => {
  assert.doesNotThrow(() => buildFilter({ select: ["nosuchplugin('x').y=1"] }));
  assert.doesNotThrow(() => parseCompound("rack().row=3"));
  const f = validateWireFilter({ compound: ["rack().row=3"] });
  // a node without the plugin: the statement is false, not an error
  assert.equal(compileFilter(f).matches({ identity: "n", facts: {}, classes: [], agents: [], collectives: ["muster"] }, () => undefined), false);
});

test("plugins of your own: data/NAME.json in a ddl directory, read only when named", () => {
  const tmp = tempDir("dataddl");
  try {
    mkdirSync(join(tmp.path, "data"));
    writeFileSync(join(tmp.path, "data", "rack.json"), JSON.stringify({ metadata: { name: "rack", description: "Where the node is racked" }, query: { description: "unused", optional: true }, output: { row: { description: "Row", type: "integer" }, slot: { description: "Slot" } } }));
    writeFileSync(join(tmp.path, "data", "broken.json"), "{ not json");
    writeFileSync(join(tmp.path, "data", "misnamed.json"), JSON.stringify({ metadata: { name: "other", description: "x" }, output: { a: { description: "a" } } }));
    const cat = dataPluginCatalogue(["/nonexistent", tmp.path]);
    assert.deepEqual(cat.lookup("rack"), { fields: ["row", "slot"], argumentRequired: false });
    assert.deepEqual(cat.names(), ["agent", "broken", "fact", "misnamed", "provision", "puppet", "rack"]);
    assert.doesNotThrow(() => buildFilter({ select: ["rack().row=3 and rack('x').slot=1"] }, { dataPlugins: cat }), "a plugin that works alone never opens broken.json");
    assert.throws(() => buildFilter({ select: ["rack().aisle=3"] }, { dataPlugins: cat }), /rack\(\) has no field 'aisle' \(its fields: row, slot\)/);
    assert.throws(() => buildFilter({ select: ["nope().x=1"] }, { dataPlugins: cat }), (e: unknown) => e instanceof FilterError && e.reason.includes("declare another in /nonexistent/data/NAME.json"));
    assert.throws(() => cat.lookup("broken"), (e: unknown) => e instanceof MusterError && e.code === "MUSTER_DDL_INVALID" && /broken\.json: cannot read data plugin DDL/.test(e.message));
    assert.throws(() => cat.lookup("misnamed"), /names data plugin 'other' but the file is misnamed\.json/);
  } finally {
    tmp.remove();
  }
});

test("a malformed data plugin DDL is refused naming the field", () => {
  assert.throws(() => parseDataDDL({ metadata: { name: "x", description: "d" }, output: {} }, "x.json"), /x\.json: invalid data plugin DDL:\n {2}output: a data plugin needs at least one output field/);
  assert.throws(() => parseDataDDL({ metadata: { name: "x", description: "d" }, output: { a: { description: "a" } }, outputs: {} }), /Unrecognized key/);
});

test("the built-in declarations are what the plugins return", async () => {
  const tmp = tempDir("dataplugins");
  try {
    const md = { identity: "n1.test", facts: { os: { family: "Debian" } }, classes: [], agents: ["rpcutil"], collectives: ["muster"] };
    const fields = async (q: Promise<Record<string, unknown> | undefined> | Record<string, unknown> | undefined) => Object.keys((await q) ?? {}).sort();
    const declared = (name: string) => Object.keys(builtinDataDDLs.get(name)!.output).sort();
    assert.deepEqual(await fields(factDataPlugin.query("os", { metadata: md })), declared("fact"));
    assert.deepEqual(await fields(agentDataPlugin(() => [rpcutilDDL]).query("rpcutil", { metadata: md })), declared("agent"));
    const provision = createProvisionAgent({ config: { lock_file: join(tmp.path, "lock"), disable_file: join(tmp.path, "disabled"), confdir: tmp.path, vardir: tmp.path, ssldir: tmp.path }, identity: "n1.test" });
    assert.deepEqual(await fields(provision.dataPlugins!.find((p) => p.name === "provision")!.query(undefined, { metadata: md })), declared("provision"));
    for (const d of ["conf", "var", "ssl"]) mkdirSync(join(tmp.path, d));
    const puppet = createPuppetAgent({ config: { confdir: join(tmp.path, "conf"), vardir: join(tmp.path, "var"), ssldir: join(tmp.path, "ssl") }, identity: "n1.test" });
    assert.deepEqual(await fields(puppet.dataPlugins!.find((p) => p.name === "puppet")!.query(undefined, { metadata: md })), declared("puppet"));
    // every built-in plugin a node can have is declared
    assert.deepEqual([...builtinDataDDLs.keys()].sort(), ["agent", "fact", "provision", "puppet"]);
  } finally {
    tmp.remove();
  }
});
