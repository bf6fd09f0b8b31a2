import { test } from "node:test";
import assert from "node:assert/strict";
import { checkDecommissionIds } from "../../src/fleet/decommission.js";
import type { LabNode, LabState } from "../../src/lab/lab.js";
import { planNewNodes } from "../../src/lab/scale.js";
import { MusterError } from "../../src/errors.js";

// Who `lab add` boots (pure: names, regions, addresses) and which names decommission accepts.
// The real thing, end to end against puppetservers, is in test/provisioner/e2e.test.ts.

function lab(ids: string[], serial?: number): LabState {
  const nodes = ids.map((identity) => ({ identity }) as LabNode);
  return { nodes, nodeSerial: serial, masters: [{ identity: "puppet-eu.lab" }], notifier: { identity: "notifier.lab" }, services: ["notifier.lab", "puppet-eu.lab", "puppet-us.lab"] } as unknown as LabState;
}

const usage = (fn: () => unknown, re: RegExp) => assert.throws(fn, (e: unknown) => e instanceof MusterError && e.code === "MUSTER_USAGE" && re.test(e.message));

test("new nodes continue the numbering, regions in turn, addresses from their number", () => {
  const plan = planNewNodes(lab(["node01.eu.lab", "node02.us.lab", "node03.eu.lab", "node04.us.lab"], 4), { count: 3 });
  assert.deepEqual(
    plan.map((p) => [p.identity, p.region.country, p.serial]),
    [
      ["node05.eu.lab", "de", 5],
      ["node06.us.lab", "us", 6],
      ["node07.eu.lab", "de", 7],
    ],
  );
});

test("a removed top node's number is not handed out again unasked", () => {
  // node06 was removed: the serial remembers it
  assert.equal(planNewNodes(lab(["node01.eu.lab", "node05.eu.lab"], 6), {})[0]!.identity, "node07.eu.lab");
  // an older lab.json without a serial: the highest name counts
  assert.equal(planNewNodes(lab(["node01.eu.lab", "node09.eu.lab"]), {})[0]!.identity, "node10.us.lab");
});

test("--country pins the region; an unknown one names the choices", () => {
  const plan = planNewNodes(lab([], 2), { count: 2, country: "us" });
  assert.deepEqual(plan.map((p) => p.identity), ["node03.us.lab", "node04.us.lab"]);
  usage(() => planNewNodes(lab([]), { country: "fr" }), /no region for country "fr".*de \(eu, eu-central-1\)/);
});

test("--identity brings a machine back under an old name, with its old address", () => {
  const [p] = planNewNodes(lab(["node01.eu.lab"], 8), { identities: ["node07.eu.lab"] });
  assert.deepEqual([p!.identity, p!.region.name, p!.serial], ["node07.eu.lab", "eu", 7]);
  usage(() => planNewNodes(lab(["node01.eu.lab"]), { identities: ["node01.eu.lab"] }), /already in the lab; `muster lab remove node01\.eu\.lab` first/);
  usage(() => planNewNodes(lab([]), { identities: ["notifier.lab"] }), /lab service/);
  usage(() => planNewNodes(lab([]), { identities: ["bad name"] }), /not a valid node identity/);
  usage(() => planNewNodes(lab([]), { count: 0 }), /--count/);
});

test("decommission takes certnames only, and at least one", () => {
  assert.doesNotThrow(() => checkDecommissionIds(["node07.eu.lab", "web-1.example.net"]));
  usage(() => checkDecommissionIds([]), /at least one/);
  usage(() => checkDecommissionIds(["ok.example", "a b", "../etc"]), /"a b", "\.\.\/etc"/);
});
