import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { MUSTER_FACT_FILE } from "../../src/server/server.js";
import { cleanEnv, repoRoot, startBroker, startMusterServer, tempDir, type Broker } from "../support/collective.js";

// The fact `muster` (puppet/modules/muster/lib/facter/muster.rb) that lets PuppetDB answer
// --dm puppetdb's agent and collective filters: a real `muster server` writes what it hosts in
// production at its start, and the real facter reports it, as a Puppet run would send it to PuppetDB.

const tmp = tempDir("muster-fact");
const keys = join(tmp.path, "keys");
const env = cleanEnv(keys);
const factDir = join(repoRoot, "puppet", "modules", "muster", "lib", "facter");
let broker: Broker;

before(async () => {
  broker = await startBroker();
});
after(async () => {
  await broker?.dispose();
  tmp.remove();
});

/** The real facter's `muster` fact with the module's custom facts, reading `file`. */
function facter(file: string): Promise<unknown> {
  return new Promise((resolve, reject) =>
    execFile("facter", ["--custom-dir", factDir, "muster", "--json"], { env: { ...process.env, MUSTER_FACT_FILE: file }, timeout: 60_000 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`${err.message}\n${stderr}`));
      resolve((JSON.parse(stdout) as { muster: unknown }).muster);
    }),
  );
}

test("a muster server writes its production agents and collectives; facter reports them as the fact muster", async () => {
  const s = await startMusterServer({ identity: "web1.fact.test", broker: broker.url, config: { collectives: ["muster", "eu"], agents: { builtin: ["nrpe"] }, registration: { interval: 0 } } }, { dir: tmp.path, env });
  try {
    const file = join(keys, MUSTER_FACT_FILE);
    const written = JSON.parse(readFileSync(file, "utf8")) as Record<string, unknown>;
    const maps = { agents: { discovery: true, nrpe: true, rpcutil: true }, collectives: { eu: true, muster: true } };
    assert.deepEqual(written, { identity: "web1.fact.test", ...maps });
    assert.deepEqual(await facter(file), maps);
  } finally {
    await s.stop();
  }
});

test("no file, or one that does not hold maps of names: no fact, never a failed Facter run", async () => {
  assert.equal(await facter(join(tmp.path, "absent.json")), null);
  const bad: [string, string][] = [["garbled", "{not json"], ["array", "[1]"], ["wrong", '{"agents":"rpcutil","collectives":{"muster":true}}'], ["lists", '{"agents":["rpcutil"],"collectives":["muster"]}'], ["values", '{"agents":{"rpcutil":1},"collectives":{"muster":true}}']];
  for (const [name, text] of bad) {
    const f = join(tmp.path, `${name}.json`);
    writeFileSync(f, text);
    assert.equal(await facter(f), null, name);
  }
});
