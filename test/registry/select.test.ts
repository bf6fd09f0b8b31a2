import { test } from "node:test";
import assert from "node:assert/strict";
import { generateFleet } from "../../src/emulator/fleet.js";
import { buildFilter, compileFilter, FilterError, type FilterOptions } from "../../src/filter/index.js";
import type { RegistryRecord } from "../../src/registry/record.js";
import { checkRegistryFilter, selectNodes } from "../../src/registry/select.js";

// The registry answers a filter as the nodes themselves would: same compiled filter, same
// metadata. These tests compare selectNodes with compileFilter run "on each node".

const NOW = 1_700_000_000_000;
const fleet = generateFleet(60);
const records: RegistryRecord[] = fleet.map((n, i) => ({
  identity: n.identity,
  facts: n.facts,
  classes: [...new Set(n.classes)].sort(),
  agents: i % 3 === 0 ? ["discovery", "puppet", "rpcutil"] : ["discovery", "rpcutil"],
  collectives: i % 10 === 9 ? ["muster", "eu"] : ["muster"],
  last_seen: NOW - 1000,
}));

/** What broadcast discovery would find: each node evaluates the filter, fact()/agent() as the node's plugins. */
function onNodes(opts: FilterOptions): string[] {
  const f = compileFilter(buildFilter(opts));
  return records
    .filter((r) =>
      f.matches(r, (plugin, arg) => {
        if (plugin === "fact") {
          const v = arg!.split(".").reduce<unknown>((o, k) => (o && typeof o === "object" ? (o as Record<string, unknown>)[k] : undefined), r.facts);
          return v === undefined ? undefined : { value: v };
        }
        if (plugin === "agent") return { present: r.agents.includes(arg!), name: arg };
        return undefined;
      }),
    )
    .map((r) => r.identity)
    .sort();
}

const select = (opts: FilterOptions, extra: Partial<{ collective: string; now: number; expireAfterMs: number }> = {}) =>
  selectNodes(records, buildFilter(opts), { now: NOW, expireAfterMs: 60_000, ...extra }).map((r) => r.identity);

test("every filter kind, compound included, selects what the nodes themselves would", () => {
  const cases: FilterOptions[] = [
    {},
    { fact: ["country=de"] },
    { fact: ["memorysize_mb>=8192", "os.family=Debian"] },
    { class: ["web"] },
    { class: ["/::config$/"], fact: ["environment!=staging"] },
    { identity: ["/0001/", "node-00042.example.net"] },
    { agent: ["puppet"] },
    { with: ["db country=uk"] },
    { select: ["(country=de or country=uk) and not web and processorcount>3"] },
    { select: ["environment=staging or /cache/"] },
    { select: ["fact('os.family').value=Debian and agent('puppet').present=true"] },
    { select: ["not agent('puppet').present=true and fact('os.release.major').value>=12"] },
    { select: ["fact('nosuch').value=1"] },
    { select: ["role=web", "country=fr"], class: ["base"] },
  ];
  for (const c of cases) {
    const want = onNodes(c);
    assert.deepEqual(select(c), want, JSON.stringify(c));
  }
  assert.ok(select({ fact: ["country=de"] }).length > 0);
});

test("results are sorted by identity and limited to the collective asked for", () => {
  const all = select({});
  assert.deepEqual(all, [...all].sort());
  assert.equal(all.length, 60);
  const eu = select({}, { collective: "eu" });
  assert.equal(eu.length, 6);
  assert.ok(eu.every((id) => records.find((r) => r.identity === id)!.collectives.includes("eu")));
});

test("records not seen within the expiry are left out; expiry 0 keeps everything", () => {
  const stale: RegistryRecord = { ...records[0]!, identity: "stale.example.net", last_seen: NOW - 120_000 };
  const with1 = [...records, stale];
  const ids = (expireAfterMs: number) => selectNodes(with1, buildFilter({}), { now: NOW, expireAfterMs }).map((r) => r.identity);
  assert.ok(!ids(60_000).includes("stale.example.net"));
  assert.ok(ids(0).includes("stale.example.net"));
  assert.ok(ids(121_000).includes("stale.example.net"));
});

test("data plugins the registry cannot answer are refused, pointing at broadcast discovery", () => {
  for (const s of ["provision().locked=false", "web and not puppet().enabled=true", "agent('puppet').version=1.0", "fstat('/etc/hosts').size>0"]) {
    assert.throws(
      () => checkRegistryFilter(buildFilter({ select: [s] })),
      (e: unknown) => e instanceof FilterError && /--dm broadcast/.test(e.message) && e.code === "MUSTER_FILTER_INVALID",
      s,
    );
    assert.throws(() => select({ select: [s] }), FilterError);
  }
  assert.match(
    (() => {
      try {
        checkRegistryFilter(buildFilter({ select: ["agent('puppet').timeout>5"] }));
      } catch (e) {
        return (e as Error).message;
      }
      return "";
    })(),
    /agent\(\)\.present and agent\(\)\.name only, not agent\(\)\.timeout/,
  );
  checkRegistryFilter(buildFilter({ select: ["fact('a.b').value=1 or agent('x').name=x"] }));
});

test("registryWarning: empty, filling and stale registries are named; a fresh one is not", async () => {
  const { registryStatus, registryWarning, staleAfterMs } = await import("../../src/registry/select.js");
  const expire = 990_000;
  const status = (last: number[], startedAt?: number) => registryStatus(last.map((t, i) => ({ ...records[0]!, identity: `n${i}`, last_seen: t })), { now: NOW, expireAfterMs: expire, collective: "muster", startedAt });
  assert.match(registryWarning(status([]), NOW, "bucket b") ?? "", /registry \(bucket b\) holds no current nodes/);
  assert.match(registryWarning(status([NOW - 1000], NOW - 1500), NOW, "b") ?? "", /started 2 s ago and is still filling \(1 node so far\)/);
  assert.equal(registryWarning(status([NOW - 1000], NOW - 60_000), NOW, "b"), undefined);
  assert.equal(registryWarning(status([NOW - staleAfterMs(expire) + 1000, NOW - 900_000]), NOW, "b"), undefined);
  assert.match(registryWarning(status([NOW - staleAfterMs(expire) - 1000]), NOW, "b") ?? "", /is stale: its newest registration is 496 s old/);
  // records past the expiry do not count at all
  assert.equal(status([NOW - expire - 1]).nodes, 0);
  assert.equal(status([NOW - 5, NOW - 10]).newest_seen, NOW - 5);
});
