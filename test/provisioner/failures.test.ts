import { test } from "node:test";
import assert from "node:assert/strict";
import { groupFailures, groupId, normaliseReason, selectFailed } from "../../src/provisioner/failures.js";
import { newRecord, type NodeRecord } from "../../src/protocol/provision-record.js";

// Failures grouped by cause: what differs between nodes leaves the reason, what they share stays.

const failed = (identity: string, current: NodeRecord["current"], lastError: string, master?: string, extra: Partial<NodeRecord> = {}): NodeRecord => ({
  ...newRecord(identity, 1000),
  status: "failed",
  current,
  lastError,
  ...(master ? { master } : {}),
  log: [`2026-01-01T00:00:00.000Z ${current} failed: ${lastError}`],
  finishedAt: 5000,
  ...extra,
});

test("normaliseReason takes out numbers, names, addresses, paths, ids and quoted values, and keeps the cause", () => {
  const cases: [string, string, string[]][] = [
    ["bootstrap: puppet run failed (exit 4): 1 resource(s) failed: File[/etc/motd]", "bootstrap: puppet run failed (exit <n>): <n> resource(s) failed: File[<path>]", []],
    ["request_csr: no reply from web01.eu.lab within 30 s", "request_csr: no reply from <name> within <n> s", ["web01.eu.lab"]],
    ["request_csr: no reply from web01 within 30 s", "request_csr: no reply from <name> within <n> s", ["web01"]],
    ["sign_csr: CSR fingerprint (SHA256) 9F:3A:00:11:22:33:44:55:66:77 differs", "sign_csr: CSR fingerprint (SHA256) <fingerprint> differs", []],
    ["sign_csr: puppetserver at https://127.0.0.11:8140/puppet-ca/v1 answered 500", "sign_csr: puppetserver at <url> answered <n>", []],
    ["set_puppet_host: cannot reach 10.1.2.3:8140", "set_puppet_host: cannot reach <address>", []],
    ["lock: held by prov-a since 2026-01-01T00:00:00Z (request 3f2a9c1e-1111-2222-3333-444455556666)", "lock: held by prov-a since <time> (request <id>)", []],
    ["bootstrap: Could not retrieve catalog from puppet-de.example.net: Error 500 on SERVER", "bootstrap: Could not retrieve catalog from <name>: Error <n> on SERVER", ["node9.test", "puppet-de.example.net"]],
    ['notify: unknown target "https://hooks.example/a" for node \'x1\'', "notify: unknown target <value> for node <value>", []],
    ["production: sha 0a1b2c3d4e5f6789 mismatch", "production: sha <hex> mismatch", []],
    ["  spaced\n  out   error ", "spaced out error", []],
    ["", "(no error recorded)", []],
  ];
  for (const [input, want, names] of cases) assert.equal(normaliseReason(input, names), want, input);
  assert.equal(normaliseReason(undefined), "(no error recorded)");
  // a name is taken out only as a whole word: web1 is not part of web10
  assert.equal(normaliseReason("web10 refused web1", ["web1"]), "web10 refused <name>");
  assert.ok(normaliseReason("x".repeat(1000)).length <= 240);
});

test("groupFailures: one group per stage and reason, with count, masters, an example and the nodes", () => {
  const recs: NodeRecord[] = [];
  for (let i = 0; i < 190; i++) recs.push(failed(`web${String(i).padStart(3, "0")}.eu.lab`, "request_csr", `request_csr: no CSR from web${String(i).padStart(3, "0")}.eu.lab after ${30 + (i % 5)} s`, i % 3 ? "puppet-de.lab" : "puppet-us.lab"));
  for (let i = 0; i < 4; i++) recs.push(failed(`db${i}.lab`, "bootstrap", `bootstrap: puppet run failed (exit ${i + 1}): 1 resource(s) failed: File[/etc/db${i}.conf]`, "puppet-de.lab"));
  recs.push(failed("odd.lab", "bootstrap", "bootstrap: master puppet-us.lab unreachable", "puppet-us.lab"));
  // the same words at another stage are another cause
  recs.push(failed("late.lab", "production", "production: puppet run failed (exit 4): 1 resource(s) failed: File[/etc/x]", "puppet-de.lab"));
  recs.push({ ...newRecord("fine.lab"), status: "done" }, { ...newRecord("busy.lab"), status: "in_progress", current: "bootstrap", lastError: "bootstrap: transient" });

  const groups = groupFailures(recs);
  assert.deepEqual(
    groups.map((g) => [g.stage, g.count]),
    [
      ["request_csr", 190],
      ["bootstrap", 4],
      ["bootstrap", 1],
      ["production", 1],
    ],
  );
  const big = groups[0]!;
  assert.equal(big.reason, "request_csr: no CSR from <name> after <n> s");
  assert.deepEqual(big.masters, [
    { master: "puppet-de.lab", count: 126 },
    { master: "puppet-us.lab", count: 64 },
  ]);
  assert.equal(big.nodes.length, 190);
  assert.equal(big.nodes[0], "web000.eu.lab");
  assert.equal(big.example.identity, "web000.eu.lab");
  assert.match(big.example.last_error, /web000\.eu\.lab after 30 s/);
  assert.equal(big.example.log_tail.length, 1);
  assert.equal(big.id, groupId("request_csr", big.reason));
  assert.equal(groups[2]!.reason, "bootstrap: master <name> unreachable", "the master's name is taken out too");
  assert.equal(new Set(groups.map((g) => g.id)).size, groups.length, "ids differ between groups");
});

test("selectFailed: a group's failed nodes, a master's, or a master's within a group", () => {
  const recs = [
    failed("a1", "bootstrap", "bootstrap: run failed (exit 1)", "m1"),
    failed("a2", "bootstrap", "bootstrap: run failed (exit 4)", "m2"),
    failed("b1", "sign_csr", "sign_csr: refused", "m1"),
    { ...failed("c1", "bootstrap", "bootstrap: run failed (exit 1)", "m1"), status: "pending" as const },
    failed("d1", "lock", "lock: busy"),
  ];
  const g = groupFailures(recs).find((x) => x.stage === "bootstrap")!;
  assert.deepEqual(selectFailed(recs, { group: g.id }).map((r) => r.identity), ["a1", "a2"]);
  assert.deepEqual(selectFailed(recs, { master: "m1" }).map((r) => r.identity), ["a1", "b1"]);
  assert.deepEqual(selectFailed(recs, { group: g.id, master: "m2" }).map((r) => r.identity), ["a2"]);
  assert.deepEqual(selectFailed(recs, { master: "" }).map((r) => r.identity), ["d1"], "nodes without a master");
  assert.deepEqual(selectFailed(recs, { group: "0000000000" }), []);
  assert.throws(() => selectFailed(recs, {}), /name a group or a master/);
});
