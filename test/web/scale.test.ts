import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { stringify as toYaml } from "yaml";
import type { Browser, Page } from "playwright-core";
import { newRecord, type NodeRecord } from "../../src/protocol/provision-record.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { bucketsOn } from "../../src/broker/bucket.js";
import { Stages } from "../../src/protocol/provision-record.js";
import { a11yFindings } from "../support/a11y.js";
import { launchChromium, watchPageProblems } from "../support/browser.js";
import { spawnMuster, tempDir, type MusterProcess } from "../support/collective.js";
import { freePort } from "../support/index.js";
import { startLabBroker, type LabBroker } from "./lab-broker.js";

// The board at fleet size, in Chromium, under the lab's broker permissions: 10,000 provisioning
// records in the state bucket, 300 of them failed for three causes (each cause worded differently
// node to node: names, seconds, exit codes, paths, fingerprints), five marked gone by the
// provisioner. The board shows three groups with the right counts and the gone nodes, and one
// group's retry moves exactly that group's nodes back to pending.

const tmp = tempDir("web-scale");
const N = 10_000;
const OPERATOR = "op-7c1e9a3f5b2d4e60";
let lab: LabBroker;
let nc: NatsConnection;
let store: ProvisionState;
let web: MusterProcess;
let browser: Browser;
let url = "";
const problems: string[] = [];

const id = (i: number) => `node${String(i).padStart(5, "0")}.scale.test`;
const masters = ["puppet-de.scale.test", "puppet-us.scale.test", "puppet-jp.scale.test"];
const causes = {
  csr: { stage: "request_csr" as const, count: 150, error: (i: number) => `request_csr: no CSR from ${id(i)} within ${30 + (i % 7)} s` },
  boot: { stage: "bootstrap" as const, count: 90, error: (i: number) => `bootstrap: puppet run failed (exit ${1 + (i % 4)}): ${1 + (i % 3)} resource(s) failed: File[/etc/app/${i}.conf]` },
  sign: { stage: "sign_csr" as const, count: 60, error: (i: number) => `sign_csr: the CSR's fingerprint ${Array.from({ length: 16 }, (_, k) => ((i * 7 + k) % 256).toString(16).padStart(2, "0").toUpperCase()).join(":")} is not the one ${id(i)} reported` },
};
const byCause: Record<keyof typeof causes, string[]> = { csr: [], boot: [], sign: [] };
const gone: string[] = [];

function records(now: number): NodeRecord[] {
  const out: NodeRecord[] = [];
  let i = 0;
  for (const [k, c] of Object.entries(causes) as [keyof typeof causes, (typeof causes)[keyof typeof causes]][]) {
    for (let j = 0; j < c.count; j++, i++) {
      const stageIdx = Stages.indexOf(c.stage);
      const times: NonNullable<NodeRecord["stageTimes"]> = {};
      let t = now - 3600_000 + i * 1000;
      for (const s of Stages.slice(0, stageIdx)) times[s] = { start: t, end: (t += 500) };
      times[c.stage] = { start: t };
      out.push({ ...newRecord(id(i), now), status: "failed", rounds: 1, attempts: 3, current: c.stage, stage: Stages[stageIdx - 1], master: masters[i % 3], startedAt: now - 3600_000 + i * 1000, finishedAt: t + 5000, stageTimes: times, lastError: c.error(i), log: [`${new Date(t).toISOString()} ${c.stage} failed: ${c.error(i)}`] });
      byCause[k].push(id(i));
    }
  }
  for (; i < N; i++) {
    const kind = i % 20 === 0 ? "pending" : i % 20 === 1 ? "in_progress" : "done";
    const r: NodeRecord = { ...newRecord(id(i), now), status: kind, rounds: kind === "pending" ? 0 : 1, master: kind === "pending" ? undefined : masters[i % 3] };
    if (kind !== "pending") {
      const times: NonNullable<NodeRecord["stageTimes"]> = {};
      let t = now - 2 * 3600_000 + ((i * 613) % 7_000_000);
      r.startedAt = t;
      const last: number = kind === "done" ? Stages.length : 5;
      for (const s of Stages.slice(0, last)) times[s] = { start: t, end: (t += s === "bootstrap" || s === "production" ? 20_000 : 400) };
      r.stage = Stages[last - 1];
      if (kind === "in_progress") {
        r.current = Stages[last];
        times[Stages[last]!] = { start: t };
      } else r.finishedAt = Math.min(t, now);
      r.stageTimes = times;
    }
    if (kind === "in_progress" && gone.length < 5) {
      r.gone = { since: now - 20_000, reason: "no answer to 3 inventory requests; the VM is not running" };
      gone.push(r.identity);
    }
    out.push(r);
  }
  return out;
}

before(async () => {
  lab = await startLabBroker({ dir: tmp.path });
  nc = await lab.connect("admin");
  store = await ProvisionState.open(bucketsOn(nc), "muster_provision");
  const recs = records(Date.now());
  for (let i = 0; i < recs.length; i += 500) await Promise.all(recs.slice(i, i + 500).map((record) => store.compareAndSet({ record, revision: 0 })));
  writeFileSync(join(tmp.path, "tokens"), `${OPERATOR} operator alice\n`, { mode: 0o600 });
  const webCfg = join(tmp.path, "web.yaml");
  // No registry: the board needs none (the page says the registry is down, which is true)
  writeFileSync(webCfg, toYaml({ listen: "127.0.0.1:0", auth: { tokens_file: join(tmp.path, "tokens") }, registry: { url: `http://127.0.0.1:${await freePort()}` }, audit: { file: join(tmp.path, "audit.jsonl") } }));
  web = spawnMuster(["web", "--config", webCfg, "--broker", lab.url], { env: lab.env("admin", join(tmp.path, "config")) });
  url = /(https?:\/\/[0-9.]+:\d+)/.exec(await web.waitForLine(/ready/, 20_000))![1]!;
  browser = await launchChromium();
});

after(async () => {
  await browser?.close().catch(() => undefined);
  await web?.stop();
  await nc?.drain().catch(() => undefined);
  await lab?.stop();
  tmp.remove();
});

async function loggedIn(): Promise<Page> {
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await ctx.newPage();
  watchPageProblems(page, problems);
  await page.goto(`${url}/#/board`); // the board, not the landing page (health)
  await page.fill("input[name=token]", OPERATOR);
  await Promise.all([page.waitForURL(`${url}/**`), page.click("button[type=submit]")]);
  return page;
}

test("10,000 nodes, three causes of failure: three groups with the right counts, the gone nodes, and a group retry moves exactly that group back to pending", async () => {
  const page = await loggedIn();
  await page.waitForFunction((n) => (document.getElementById("board-summary")?.textContent ?? "").startsWith(`${n} nodes`), N, { timeout: 60_000 });
  await page.waitForFunction(() => document.querySelectorAll(".group-card").length === 3, undefined, { timeout: 30_000 });
  const groups = await page.locator(".group-card").evaluateAll((cards) => cards.map((c) => ({ id: c.getAttribute("data-group")!, stage: c.getAttribute("data-stage"), count: Number(c.getAttribute("data-count")) })));
  assert.deepEqual(
    groups.map((g) => [g.stage, g.count]),
    [
      ["request_csr", 150],
      ["bootstrap", 90],
      ["sign_csr", 60],
    ],
  );
  assert.match((await page.locator(".group-card").nth(1).locator(".reason").textContent()) ?? "", /bootstrap: puppet run failed \(exit <n>\): <n> resource\(s\) failed: File\[<path>\]/);
  // the masters of a group, with their counts
  assert.deepEqual(await page.locator(".group-card").nth(1).locator(".master").evaluateAll((ms) => ms.map((m) => m.getAttribute("data-master"))), masters.filter((m) => byCause.boot.some((_, j) => masters[(150 + j) % 3] === m)).sort());
  // The gone nodes, with why
  await page.waitForFunction((n) => document.querySelectorAll('.attention[data-kind="gone"]').length === n, gone.length, { timeout: 10_000 });
  assert.deepEqual((await page.locator('.attention[data-kind="gone"]').evaluateAll((ls) => ls.map((l) => l.getAttribute("data-identity")))).sort(), [...gone].sort());
  assert.match((await page.locator('.attention[data-kind="gone"]').first().textContent()) ?? "", /no answer to 3 inventory requests/);
  const a11y = await a11yFindings(page, "board with 10,000 nodes"); // any impact: axe finds nothing
  assert.deepEqual(a11y, []);

  // Retry the bootstrap group from the page, after confirming its count.
  const card = page.locator(`.group-card[data-stage="bootstrap"]`);
  await card.locator("button.retry-group").click();
  await page.waitForSelector("dialog#confirm-dialog[open]");
  assert.match((await page.locator("#confirm-title").textContent()) ?? "", /Retry 90 failed nodes\?/);
  await page.click("#confirm-ok");
  await page.waitForFunction(() => /90 queued for provisioning/.test(document.querySelector('.group-card[data-stage="bootstrap"] .retry-result, .retry-result')?.textContent ?? "") || document.querySelectorAll(".group-card").length === 2, undefined, { timeout: 30_000 });
  await page.waitForFunction(() => document.querySelectorAll(".group-card").length === 2, undefined, { timeout: 30_000 });

  const all = await store.list();
  const nowPending = all.filter((r) => r.status === "pending" && r.rounds === 1).map((r) => r.identity).sort();
  assert.deepEqual(nowPending, [...byCause.boot].sort(), "exactly the group's nodes went back to pending");
  assert.equal(all.filter((r) => r.status === "failed").length, 210, "the other two groups are untouched");
  assert.deepEqual(
    all.filter((r) => r.status === "failed").map((r) => r.identity).sort(),
    [...byCause.csr, ...byCause.sign].sort(),
  );
  await page.close();
});

test("no page broke the content security policy or threw", () => {
  assert.deepEqual(problems, []);
});

test("the broker refused nothing the console asked for (the lab's permissions)", () => {
  assert.deepEqual(lab.violations(), []);
});
