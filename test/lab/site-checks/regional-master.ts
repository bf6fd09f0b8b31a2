import assert from "node:assert/strict";
import type { Site } from "../../../src/lab/site/index.js";
import { DEFAULT_STATE_BUCKET } from "../../../src/protocol/buckets.js";
import type { NodeRecord } from "../../../src/protocol/provision-record.js";
import { ProvisionState } from "../../../src/provisioner/state.js";

// Issue 36 §5 on the site: each node on its own region's master. puppet-us.lab is powered off, a
// us node is added while it is off, and the node waits for puppet-us.lab (known: the provisioners
// have seen it answer, and the site's provisioner.yaml names it) rather than go to puppet-eu.lab,
// which answers; puppet-us.lab is powered on and the node ends on it, one certificate signed.
//
// When: once the site is up and its first nodes are provisioned, with both masters answering and
// no other check cutting puppet-us.lab meanwhile (a provisioner's cut is fine: the other one takes
// the node once its claim expires, and it waits the same way). It takes about as long as puppet-us.lab's boot and puppetserver start (3-6 minutes), well
// within known_master_wait (10 minutes): the node must not fall back.

const MASTER = "puppet-us.lab";

/** Powers puppet-us.lab off, adds a us node, powers it on; resolves with the node's finished record. */
export async function nodeWaitsForItsRegionsMaster(site: Site, o: { timeoutMs?: number; onAdded?: (identity: string) => void } = {}): Promise<NodeRecord> {
  const timeoutMs = o.timeoutMs ?? 900_000;
  const client = await site.client("site-check-regional-master");
  try {
    const store = await ProvisionState.open(client, DEFAULT_STATE_BUCKET);
    assert.ok((await store.masters.list()).some((m) => m.identity === MASTER), `${MASTER} is among the masters the provisioners have seen`);
    await site.power("off", MASTER);
    let id: string | undefined;
    try {
      const [node] = await site.addNodes({ count: 1, country: "us" });
      id = node!.identity;
      o.onAdded?.(id);
      const waiting = (await store.waitFor([id], (r) => r.status !== "in_progress" || r.masterWait !== undefined, timeoutMs)).get(id)!;
      assert.equal(waiting.status, "in_progress", `${id} waits rather than ends: ${waiting.lastError ?? waiting.log.slice(-4).join(" | ")}`);
      assert.equal(waiting.masterWait?.master, MASTER, `${id} waits for its region's master: ${JSON.stringify(waiting.masterWait)}`);
      assert.ok(waiting.masterWait?.criterion, "as the master its criteria pick, not one it already had");
      assert.equal(waiting.master, undefined, `${id} was not given another master meanwhile`);
    } finally {
      await site.power("on", MASTER);
    }
    await site.waitUp(MASTER);
    const rec = (await store.waitFor([id], (r) => r.status === "done" || r.status === "failed", timeoutMs)).get(id)!;
    assert.equal(rec.status, "done", `${id}: ${rec.lastError ?? ""}`);
    assert.equal(rec.master, MASTER, `${id} ends on its region's master`);
    assert.equal(rec.masterFallback, undefined, "it did not fall back");
    const inventory = await site.exec(MASTER, ["cat", "/etc/puppet/puppetserver/ca/inventory.txt"]);
    assert.equal(inventory.stdout.split("\n").filter((l) => l.trim().endsWith(`/CN=${id}`)).length, 1, `${MASTER} signed ${id} once`);
    return rec;
  } finally {
    await client.close();
  }
}
