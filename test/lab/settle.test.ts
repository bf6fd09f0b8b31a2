import { test } from "node:test";
import assert from "node:assert/strict";
import { labRole, looksUp, roleClasses, staleLookups, type ProvisionedAt } from "../../src/lab/roles.js";
import { nodeIdentity } from "../../src/lab/names.js";
import { LAB_REGIONS } from "../../src/lab/regions.js";

// Issue 36 §6: after `lab up`, a web node's webapp.conf said `database_host = none`: the lab's nodes
// are provisioned together, and the web node compiled its production catalog before its database
// master was provisioned and registered. Which nodes run Puppet again before `lab up` returns, and
// why, without booting anything (roles.ts looksUp, staleLookups; the lab's settle.ts acts on it).

/** The lab's first `n` nodes, as planLab names them: regions in turn, roles by index. */
const lab = (n: number) => Array.from({ length: n }, (_, i) => ({ identity: nodeIdentity(i, LAB_REGIONS[i % LAB_REGIONS.length]!), role: labRole(i) }));
/** A node provisioned with its production run starting at `run` and its provisioning done at `done` (seconds). */
const rec = (run: number, done: number, status = "done"): ProvisionedAt => ({ status, finishedAt: done * 1000, stageTimes: { production: { start: run * 1000, end: (run + 5) * 1000 } } });

test("who looks up whom: web nodes and slaves their own customer's and environment's database master, the monitor every web and database node", () => {
  const [master, web, otherWeb, monitor, otherMaster, slave] = lab(6).map((n) => n.role);
  assert.deepEqual([master, web, otherWeb, monitor, otherMaster, slave].map((r) => r!.role + (r!.mysql ? `/${r!.mysql}` : "")), ["db/master", "web", "web", "monitor", "db/master", "db/slave"]);
  assert.ok(looksUp(web!, master!), "acme development's web node, its master");
  assert.ok(!looksUp(web!, otherMaster!), "not another customer's master");
  assert.ok(looksUp(otherWeb!, otherMaster!), "globex production's web node, globex's master");
  assert.ok(looksUp(slave!, master!));
  assert.ok(!looksUp(master!, slave!) && !looksUp(master!, web!), "a master looks up nobody");
  for (const other of [master, web, otherWeb, otherMaster, slave]) assert.ok(looksUp(monitor!, other!), `the monitor lists ${other!.role}`);
  assert.ok(!looksUp(web!, monitor!));
  // the classes the registry must show for a node before its lookers run again
  assert.deepEqual(roleClasses(master!), ["role::db", "mysql::master"]);
});

test("the default lab (4 nodes, provisioned together): the web node that ran before its database master was done runs again, and the monitor", () => {
  const nodes = lab(4);
  const [master, web, otherWeb, monitor] = nodes.map((n) => n.identity);
  assert.deepEqual([master, web, otherWeb, monitor], ["node01.eu.lab", "node02.us.lab", "node03.eu.lab", "node04.us.lab"]);
  // as the lab provisions them: every production run begins before any node is done
  const recs = new Map([
    [master!, rec(20, 40)],
    [web!, rec(21, 41)],
    [otherWeb!, rec(22, 42)],
    [monitor!, rec(23, 43)],
  ]);
  assert.deepEqual(staleLookups(nodes, recs), [
    { identity: "node02.us.lab", lookedUpEarly: ["node01.eu.lab"] },
    // node03 (globex production) has no database master in a lab of 4: `none` is right, nothing to ask again
    { identity: "node04.us.lab", lookedUpEarly: ["node01.eu.lab", "node02.us.lab", "node03.eu.lab"] },
  ]);
});

test("a node whose lookups came after what it looks up was done runs nothing again; nor one not provisioned, nor one looking for a node that failed", () => {
  const nodes = lab(6);
  const ids = nodes.map((n) => n.identity);
  // the master done long before everyone else's production run: nothing was looked up too early
  const later = new Map(ids.map((id, i) => [id, i === 0 ? rec(5, 10) : rec(20 + i, 60 + i)]));
  // node02 (acme's web) and node06 (acme's slave) ran after node01 was done: not again; node03
  // (globex's web) before node05, its master, and the monitor before the others were done: again
  assert.deepEqual(staleLookups(nodes, later), [
    { identity: "node03.eu.lab", lookedUpEarly: ["node05.eu.lab"] },
    { identity: "node04.us.lab", lookedUpEarly: ["node02.us.lab", "node03.eu.lab", "node05.eu.lab", "node06.us.lab"] },
  ]);
  // the web node failed: not run; the master failed: nobody looks it up again
  const failed = new Map(ids.map((id, i) => [id, i === 1 ? rec(21, 41, "failed") : i === 0 ? rec(20, 40, "failed") : rec(30, 50)]));
  const stale = staleLookups(nodes, failed);
  assert.ok(!stale.some((x) => x.identity === ids[1]), "a failed node runs nothing");
  assert.ok(!stale.some((x) => x.lookedUpEarly.includes(ids[0]!)), "a failed master is not waited for");
  // a record without the production run's start (a record from before stage times): left as it is
  assert.deepEqual(staleLookups(lab(2), new Map([[ids[0]!, rec(20, 40)], [ids[1]!, { status: "done", finishedAt: 41_000 }]])), []);
});

test("a site's nodes whose production run began before PuppetDB served run again; later ones, unfinished ones and ones with no production run do not", async () => {
  const { ranBefore } = await import("../../src/lab/settle.js");
  const { newRecord } = await import("../../src/protocol/provision-record.js");
  const at = (identity: string, start: number | undefined, status: "done" | "in_progress" = "done") => ({ ...newRecord(identity, 0), status, ...(start === undefined ? {} : { stageTimes: { production: { start, end: start + 5000 } } }) });
  const recs = [at("early", 1000), at("late", 9000), at("running", 1000, "in_progress"), at("none", undefined)];
  assert.deepEqual(ranBefore(recs, 5000), ["early"]);
  assert.deepEqual(ranBefore(recs, 500), []);
});
