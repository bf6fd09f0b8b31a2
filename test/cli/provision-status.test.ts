import { test } from "node:test";
import assert from "node:assert/strict";
import { renderStatusTable } from "../../src/cli/commands/provision.js";
import { newRecord, type NodeRecord } from "../../src/protocol/provision-record.js";

// `muster provision status`'s table, from records (the command reads them through ProvisionState).

const T0 = Date.UTC(2026, 0, 1);
const rec = (o: Partial<NodeRecord>): NodeRecord => ({ ...newRecord("n1.test", T0), rounds: 1, startedAt: T0, ...o });

test("a node gone while being provisioned reads gone, with since when and why in place of the last error", () => {
  process.env.NO_COLOR = "1";
  const out = renderStatusTable(
    [
      rec({ identity: "gone.test", status: "in_progress", current: "bootstrap", master: "m1", lastError: "old", gone: { since: T0 + 10_000, reason: "no answer for 15s (3 liveness checks)" } }),
      rec({ identity: "busy.test", status: "in_progress", current: "production", master: "m1" }),
      rec({ identity: "bad.test", status: "failed", current: "sign_csr", lastError: "sign_csr: refused" }),
    ],
    T0 + 52_000,
  );
  const line = (id: string) => out.split("\n").find((l) => l.startsWith(id)) ?? "";
  assert.match(line("gone.test"), /^gone\.test\s+gone\s+bootstrap\s+m1\s+52\.0s\s+gone 42s ago: no answer for 15s \(3 liveness checks\)$/);
  assert.match(line("busy.test"), /^busy\.test\s+in_progress\s+production/);
  assert.match(line("bad.test"), /sign_csr: refused$/);
  assert.match(out, /3 nodes: 0 done, 2 in progress \(1 gone\), 0 pending, 1 failed$/);
});

test("a node waiting for a Puppet master reads waiting, with the reason and for how long", () => {
  process.env.NO_COLOR = "1";
  const out = renderStatusTable(
    [
      rec({ identity: "wait.test", status: "in_progress", current: "bootstrap", master: "puppet-eu.lab", masterWait: { since: T0 + 20_000, reason: "waiting for its master puppet-eu.lab, which does not answer", master: "puppet-eu.lab" } }),
      rec({ identity: "new.test", status: "in_progress", masterWait: { since: T0 + 50_000, reason: "waiting for a Puppet master: none answers (agent puppetca)" } }),
      rec({ identity: "old.test", status: "failed", current: "bootstrap", lastError: "its master puppet-eu.lab did not answer for 3600s (master_wait)", masterWait: { since: T0, reason: "stale" } }),
    ],
    T0 + 52_000,
  );
  const line = (id: string) => out.split("\n").find((l) => l.startsWith(id)) ?? "";
  assert.match(line("wait.test"), /^wait\.test\s+waiting\s+bootstrap\s+puppet-eu\.lab\s+52\.0s\s+waiting for its master puppet-eu\.lab, which does not answer \(32s\)$/);
  assert.match(line("new.test"), /^new\.test\s+waiting\s+52\.0s\s+waiting for a Puppet master: none answers \(agent puppetca\) \(2s\)$/);
  assert.match(line("old.test"), /^old\.test\s+failed\s+.*did not answer for 3600s \(master_wait\)$/, "a failed node is failed, whatever a stale mark says");
  assert.match(out, /3 nodes: 0 done, 2 in progress \(2 waiting for a master\), 0 pending, 1 failed$/);
});
