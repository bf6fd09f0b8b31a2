import assert from "node:assert/strict";
import type { Site } from "../../../src/lab/site/index.js";
import type { NodeRecord } from "../../../src/protocol/provision-record.js";
import type { ProvisionState } from "../../../src/provisioner/state.js";

// Issue 36 §5 on the site: each node on its own region's master. With a master powered off (the
// master's cut of site-faults' test 5), a node of that master's region is added, and it waits for its
// master (known: the provisioners have seen it answer, and the site's provisioner.yaml names it)
// rather than go to the other region's, which answers; the master is powered on and the node ends on
// it, one certificate signed.
//
// When: while the caller keeps the master off, long enough for the node to boot and be taken up (a
// minute or two), and well within known_master_wait (10 minutes): the node must not fall back.

/** With `master` already off (and known to the provisioners): adds a node of its region; resolves with its identity once it waits for that master. */
export async function regionNodeWaits(site: Site, store: ProvisionState, master: string, o: { country: string; timeoutMs?: number }): Promise<string> {
  assert.ok((await store.masters.list()).some((m) => m.identity === master), `${master} is among the masters the provisioners have seen`);
  const [node] = await site.addNodes({ count: 1, country: o.country });
  const id = node!.identity;
  const waiting = (await store.waitFor([id], (r) => r.status !== "in_progress" || r.masterWait !== undefined, o.timeoutMs ?? 900_000)).get(id)!;
  assert.equal(waiting.status, "in_progress", `${id} waits rather than ends: ${waiting.lastError ?? waiting.log.slice(-4).join(" | ")}`);
  assert.equal(waiting.masterWait?.master, master, `${id} waits for its region's master: ${JSON.stringify(waiting.masterWait)}`);
  assert.ok(waiting.masterWait?.criterion, "as the master its criteria pick, not one it already had");
  assert.equal(waiting.master, undefined, `${id} was not given another master meanwhile`);
  return id;
}

/** Once `master` is back: the node ends provisioned on it, with no fallback, signed by it once. */
export async function regionNodeEndsOnIt(site: Site, store: ProvisionState, master: string, id: string, timeoutMs = 900_000): Promise<NodeRecord> {
  const rec = (await store.waitFor([id], (r) => r.status === "done" || r.status === "failed", timeoutMs)).get(id)!;
  assert.equal(rec.status, "done", `${id}: ${rec.lastError ?? ""}`);
  assert.equal(rec.master, master, `${id} ends on its region's master`);
  assert.equal(rec.masterFallback, undefined, "it did not fall back");
  const inventory = await site.exec(master, ["cat", "/etc/puppet/puppetserver/ca/inventory.txt"]);
  assert.equal(inventory.stdout.split("\n").filter((l) => l.trim().endsWith(`/CN=${id}`)).length, 1, `${master} signed ${id} once`);
  return rec;
}
