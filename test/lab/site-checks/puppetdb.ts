import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Agent, request } from "node:https";
import { labWebToken } from "../../../src/lab/credentials.js";
import { siteCredentials } from "../../../src/lab/site/credentials.js";
import type { Site } from "../../../src/lab/site/index.js";
import { askUntil, eventually, runCli } from "../../support/collective.js";
import { siteOperatorEnv } from "../../support/site.js";

// Issue 38 on the site (`muster lab up --site`): PuppetDB of Debian's packaging on console.lab,
// both masters sending it facts, catalogs and reports (docs/deploy.md section 10), asked through
// the registry (docs/puppetdb.md). Each check takes the started Site and a scratch directory for
// the operator's client config; what each leaves behind is said at each.
//
// When each runs:
//   - puppetDbStartAndMemory, findsTheDatabaseMaster, compoundAgreesWithBroadcast,
//     consoleShowsRuns: once every node of the site is provisioned (done) and has run Puppet in
//     production at least once (a node's production run sends PuppetDB its catalog). They change
//     nothing.
// A node powered off while PuppetDB lists it, and decommission deactivating a node in PuppetDB, are
// tested on this host against a real PuppetDB and puppetserver (test/puppetdb/puppetdb.test.ts).

const QUERY = "environment=development customer=acme mysql::master";

const cli = (site: Site, dir: string, args: string[], timeoutMs = 180_000) => runCli(args, { env: siteOperatorEnv(site, dir), timeoutMs });

/** PuppetDB's start-up time and resident memory on console.lab (Debian's unit; its ExecStartPost waits until PuppetDB serves). */
export async function puppetDbStartAndMemory(site: Site): Promise<{ startS: number; rssMiB: number; postgresMiB: number }> {
  const show = await site.exec("console.lab", ["systemctl", "show", "puppetdb.service", "-p", "MainPID", "-p", "ExecMainStartTimestampMonotonic", "-p", "ActiveEnterTimestampMonotonic"]);
  const p = Object.fromEntries(show.stdout.trim().split("\n").map((l) => l.split("=") as [string, string]));
  const startS = (Number(p.ActiveEnterTimestampMonotonic) - Number(p.ExecMainStartTimestampMonotonic)) / 1e6;
  assert.ok(Number(p.MainPID) > 0 && startS > 0, `puppetdb.service on console.lab: ${show.stdout}`);
  const rss = await site.exec("console.lab", ["ps", "-o", "rss=", "-p", p.MainPID!]);
  const pg = await site.exec("console.lab", ["sh", "-c", "ps -u postgres -o rss= | awk '{s+=$1} END {print s}'"]);
  return { startS: Math.round(startS * 10) / 10, rssMiB: Math.round(Number(rss.stdout.trim()) / 1024), postgresMiB: Math.round(Number(pg.stdout.trim()) / 1024) };
}

/** `muster find --dm puppetdb -W "environment=development customer=acme mysql::master"` prints exactly node01.eu.lab. */
export async function findsTheDatabaseMaster(site: Site, dir: string): Promise<void> {
  // node01's catalog reached PuppetDB with a run after PuppetDB served (its provisioning's, or the
  // one settle.ts gives a node whose run came before); PuppetDB stores what it is sent in the
  // background: a deadline, no fixed pause
  const r = await eventually(
    async () => {
      const r = await cli(site, dir, ["find", "--dm", "puppetdb", "-W", QUERY]);
      return r.stdout === "node01.eu.lab\n" ? r : undefined;
    },
    120_000,
    "PuppetDB naming node01.eu.lab the database master of acme's development",
  ).catch(async (e: Error) => {
    const last = await cli(site, dir, ["find", "--dm", "puppetdb", "-W", QUERY]);
    // what the master sent PuppetDB for node01, or why it could not
    const sent = await site.exec("puppet-eu.lab", ["sh", "-c", "grep -E 'node01|PuppetDB|puppetdb' /var/log/puppetserver/puppetserver.log | tail -12"]).catch((x: unknown) => ({ stdout: String(x) }));
    throw new Error(`${e.message}; last answer: ${JSON.stringify(last.stdout)} ${last.stderr}\npuppet-eu.lab's log:\n${sent.stdout}`);
  });
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, "node01.eu.lab\n");
  assert.doesNotMatch(r.stderr, /no muster fact/, "every node PuppetDB lists reports its muster fact (the muster module's)");
}

/**
 * A compound -S filter: PuppetDB's answer is broadcast discovery's, on the same fleet: the nodes
 * Puppet manages (class motd, which every node of the site's manifests has). The masters answer
 * broadcast with the same facts but run no Puppet agent, so PuppetDB has never heard of them.
 */
export async function compoundAgreesWithBroadcast(site: Site, dir: string, select = "(country=de or country=us) and not mysql::master and os.release.major>=12 and motd"): Promise<string[]> {
  // a node an earlier test powered off and on may still be booting: broadcast finds it once it
  // answers again, so both are asked until they agree (a deadline; the last answers are what a
  // failure shows)
  const last = await askUntil(
    async () => {
      const [pdb, bcast] = await Promise.all([cli(site, dir, ["find", "--dm", "puppetdb", "-S", select, "--json"]), cli(site, dir, ["find", "-S", select, "--json", "--dt", "5"])]);
      return { pdb: JSON.parse(pdb.stdout || "[]") as string[], bcast: JSON.parse(bcast.stdout || "[]") as string[], codes: [pdb.code, bcast.code], stderr: `${pdb.stderr}\n${bcast.stderr}` };
    },
    (x) => x.codes[0] === x.codes[1] && JSON.stringify(x.pdb) === JSON.stringify(x.bcast),
    180_000,
  );
  assert.equal(last.codes[0], last.codes[1], last.stderr);
  assert.deepEqual(last.pdb, last.bcast, `-S ${select}`);
  assert.ok(last.pdb.length > 0, "the filter selects some of the site's nodes");
  return last.pdb;
}

/** The console's page of a node shows its last runs from PuppetDB: status, time, resources changed and failed. */
export async function consoleShowsRuns(site: Site, identity: string): Promise<{ status: string; time: number }[]> {
  const s = site.state;
  const token = labWebToken(s.web!.tokens_file, "viewer");
  const agent = new Agent({ ca: readFileSync(siteCredentials(s.site!.files.dir).ca.cert) });
  const page = await new Promise<Record<string, unknown>>((resolve, reject) => {
    const req = request(new URL(`api/nodes/${encodeURIComponent(identity)}`, s.web!.url), { agent, headers: { authorization: `Bearer ${token}` }, timeout: 30_000 }, (res) => {
      let body = "";
      res.on("data", (c: Buffer) => (body += c.toString()));
      res.on("end", () => (res.statusCode === 200 ? resolve(JSON.parse(body) as Record<string, unknown>) : reject(new Error(`HTTP ${res.statusCode}: ${body.slice(0, 300)}`))));
    });
    req.on("error", reject);
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.end();
  });
  assert.match(String(page.puppetdb), /^http:\/\/127\.0\.0\.1:8080$/, "the registry asks PuppetDB on console.lab's loopback");
  const runs = page.puppetdb_runs as { status: string; time: number; resources: { changed: number; failed: number; total: number }; events: unknown[] }[];
  assert.ok(Array.isArray(runs) && runs.length > 0, `${identity}'s runs from PuppetDB: ${JSON.stringify(page.puppetdb_runs)} ${String(page.puppetdb_error ?? "")}`);
  for (const r of runs) {
    assert.ok(["changed", "unchanged", "failed"].includes(r.status) && r.time > 0 && r.resources.total > 0, JSON.stringify(r));
    if (r.status !== "failed") assert.deepEqual(r.events, []);
  }
  return runs;
}
