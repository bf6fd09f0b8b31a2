import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { coreAgentFactories } from "../../src/agents/builtin.js";
import { startEmulator, type RunningEmulator } from "../../src/emulator/emulator.js";
import type { FleetNode } from "../../src/emulator/fleet.js";
import { SimulatedCA, simulatedFactories } from "../../src/emulator/simulated.js";
import { SimulatedPuppetFleet } from "../../src/emulator/simulated-puppet.js";
import { silentLogger } from "../../src/log.js";
import { newRecord, type NodeRecord } from "../../src/protocol/provision-record.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { bucketsOn } from "../../src/broker/bucket.js";
import { a11yFindings } from "../support/a11y.js";
import { launchChromium, watchPageProblems } from "../support/browser.js";
import { eventually, runCli, spawnMuster, tempDir, type MusterProcess } from "../support/collective.js";
import { writeSimulatedProvisionerConfig } from "../support/provisioner.js";
import { cutOff, focusProblems } from "../support/visible.js";
import { waitRegistered } from "../support/registry.js";
import { startWebhookReceiver, type WebhookReceiver } from "../../src/lab/receivers.js";
import { encodePuppetRun } from "../../src/protocol/puppet-run.js";
import { bucketKey, DEFAULT_PUPPET_RUNS_BUCKET } from "../../src/protocol/buckets.js";
import { startLabBroker, type LabBroker } from "./lab-broker.js";

// The web console in a real browser (Debian's Chromium, headless) against a real broker with the
// lab's users and permissions (./lab-broker.ts: the console and the CLI as the lab's admin, the
// registry and the provisioner as theirs), the real registry daemon, `muster web` and a provisioner
// working through an emulated fleet whose agents simulate Puppet (so provisioning takes seconds, and
// one node can be made to fail).

const tmp = tempDir("web-browser");
const configDir = join(tmp.path, "config");
process.env.MUSTER_CONFIG_DIR = configDir; // the in-process emulator trusts the key the children sign with
let lab: LabBroker;
const env = (role: "admin" | "provisioner" | "registry") => lab.env(role, configDir);
const OPERATOR = "op-3f9a1c7e5b2d4f60";
const VIEWER = "view-8e2b4d6f1a3c5e70";

const waiting = Array.from({ length: 10 }, (_, i) => `web${String(i).padStart(2, "0")}.test`);
const broken = waiting[3]!;
const fleet: FleetNode[] = [
  ...waiting.map((identity, i) => ({ identity, facts: { ipaddress: `127.2.1.${i + 1}`, country: i % 2 ? "de" : "us", os: i % 3 ? "debian" : "rhel" }, classes: ["base"], agents: ["provision"] })),
  { identity: "master-de.test", facts: { ipaddress: "127.3.1.1", country: "de", os: "debian" }, classes: ["puppet_server"], agents: ["puppetca"] },
  { identity: "master-us.test", facts: { ipaddress: "127.3.1.2", country: "us", os: "debian" }, classes: ["puppet_server"], agents: ["puppetca"] },
  { identity: "notifier.test", facts: { country: "us", os: "debian" }, classes: [], agents: ["notify"] },
];
// Provisioned nodes with a Puppet agent (runs of 300 ms), for runall.
const managed = Array.from({ length: 5 }, (_, i) => `app${i}.test`);
const managedFleet: FleetNode[] = managed.map((identity) => ({ identity, facts: { country: "fr", os: "debian", role: "app" }, classes: ["app"], agents: ["puppet"] }));
const failing = new Set<string>([broken]);
/** A node whose power is cut (its connection dropped, no last heartbeat) and that comes back. */
const victim = "victim.test";
const victimFleet: FleetNode[] = [{ identity: victim, facts: { country: "fr", os: "debian", role: "spare" }, classes: [], agents: [] }];
/** The admins' notifier: the real notify agent (the waiting fleet's notifier.test is simulated and tells nobody), posting to `hook`. */
const alertsNotifier: FleetNode[] = [{ identity: "alerts.test", facts: { role: "alerts" }, classes: [], agents: ["notify"] }];
let alertsEmu: RunningEmulator | undefined;
/** Managed nodes whose Puppet runs fail. */
const puppetFailing = new Set<string>();
let victimEmu: RunningEmulator | undefined;
let lastRunall = "";
const ca = new SimulatedCA();

let nc: NatsConnection;
let emu: RunningEmulator;
let puppetEmu: RunningEmulator;
let sim: SimulatedPuppetFleet;
let store: ProvisionState;
let registry: MusterProcess;
let web: MusterProcess;
let provisioner: MusterProcess | undefined;
let browser: Browser;
/** Where the admins' alerts go (the emulated notifier posts there). */
let hook: WebhookReceiver;
let url = "";
let registryUrl = "";
const contexts: BrowserContext[] = [];
const problems: string[] = [];
/** Accessibility findings (axe-core, any impact) on any page the tests visit: there must be none. */
const a11y: string[] = [];

before(async () => {
  lab = await startLabBroker({ dir: tmp.path, nodes: [...fleet, ...managedFleet, ...victimFleet, ...alertsNotifier].map((n) => n.identity) });
  nc = await lab.connect("admin");
  const regCfg = join(tmp.path, "registry.yaml");
  writeFileSync(regCfg, toYaml({ broker: lab.url, collectives: ["muster"], http: { host: "127.0.0.1", port: 0 }, log: { level: "warn" } }));
  registry = spawnMuster(["registry", "serve", "--config", regCfg], { env: env("registry") });
  const regLine = await registry.waitForLine(/ready/, 20_000);
  registryUrl = /http (http:\/\/[0-9.]+:\d+)/.exec(regLine)![1]!;

  emu = await startEmulator({
    nc: await lab.connect("emulator", "emulator-waiting"),
    nodes: fleet,
    collective: "muster",
    log: silentLogger,
    registration: { interval: 1, splay: false },
    heartbeat: 1,
    // Puppet runs of about a second: each node is visibly in progress before it is done.
    factories: simulatedFactories(ca, { puppetRunMs: [500, 1500], csrMs: 5, fail: (id) => failing.has(id) }),
  });
  sim = new SimulatedPuppetFleet({ runMs: () => 300, result: (id) => ({ changed: true, failed: puppetFailing.has(id) }) });
  puppetEmu = await startEmulator({ nc: await lab.connect("emulator", "emulator-managed"), nodes: managedFleet, collective: "muster", log: silentLogger, registration: { interval: 1, splay: false }, heartbeat: 1, factories: { ...coreAgentFactories, puppet: sim.factory } });
  await waitRegistered(nc, [...fleet, ...managedFleet].map((n) => n.identity));
  store = await ProvisionState.open(bucketsOn(nc), "muster_provision");

  hook = await startWebhookReceiver();
  alertsEmu = await startEmulator({ nc: await lab.connect("emulator", "emulator-alerts"), nodes: alertsNotifier, collective: "muster", log: silentLogger, registration: { interval: 60, splay: false }, heartbeat: 1, plugins: { notify: { recipients: [hook.url], dedupe_bucket: false } } });
  const tokens = join(tmp.path, "tokens");
  writeFileSync(tokens, `# token role name\n${OPERATOR} operator alice\n${VIEWER} viewer bob\n`, { mode: 0o600 });
  const webCfg = join(tmp.path, "web.yaml");
  // heartbeats every second here: a node is unreachable after 3 s of silence
  writeFileSync(webCfg, toYaml({ listen: "127.0.0.1:0", auth: { tokens_file: tokens }, registry: { url: registryUrl }, audit: { file: join(tmp.path, "audit.jsonl") }, runall: { confirm_above: 3 }, health: { unreachable_after: 3 }, alerts: { notify: { filter: "role=alerts" } } }));
  await startConsole();
  browser = await launchChromium();
});

/** `muster web` as the lab's admin; again after a restart (a new port: `url` follows it). */
async function startConsole(): Promise<void> {
  web = spawnMuster(["web", "--config", join(tmp.path, "web.yaml"), "--broker", lab.url], { env: env("admin") });
  const readyLine = await web.waitForLine(/ready/, 20_000);
  url = /(https?:\/\/[0-9.]+:\d+)/.exec(readyLine)![1]!;
}

after(async () => {
  await victimEmu?.stop().catch(() => undefined);
  await alertsEmu?.stop().catch(() => undefined);
  await browser?.close().catch(() => undefined);
  await provisioner?.stop();
  await web?.stop();
  await registry?.stop();
  await emu?.stop();
  await puppetEmu?.stop();
  await nc?.drain().catch(() => undefined);
  await lab?.stop();
  await hook?.close();
  tmp.remove();
});

/** A page logged in with the token through the login form, as a person would, then at `hash` (the board by default; "" stays on the landing page). */
async function loggedIn(token: string, name: string, hash = "#/board", viewport = { width: 1400, height: 1000 }): Promise<Page> {
  const ctx = await browser.newContext({ viewport });
  contexts.push(ctx);
  const page = await ctx.newPage();
  watchPageProblems(page, problems);
  await page.goto(url);
  await page.fill("input[name=token]", token);
  await Promise.all([page.waitForURL(`${url}/**`), page.click("button[type=submit]")]);
  await page.waitForFunction((n) => document.getElementById("who")?.textContent?.includes(n), name, { timeout: 15_000 });
  if (hash) await page.evaluate((h) => (location.hash = h), hash);
  return page;
}

const rowSel = (id: string, status?: string) => `.board-table .row[data-identity="${id}"]${status ? `[data-status="${status}"]` : ""}`;

test("an unauthenticated request gets 401, and the page asks for a token", async () => {
  const res = await fetch(`${url}/api/board`);
  assert.equal(res.status, 401);
  const body = (await res.json()) as { error: { code: string; message: string } };
  assert.equal(body.error.code, "unauthenticated");
  assert.ok(body.error.message.length > 0);
  assert.match(res.headers.get("content-security-policy") ?? "", /script-src 'self'/);
  const wrong = await fetch(`${url}/api/session`, { headers: { authorization: "Bearer not-a-token" } });
  assert.equal(wrong.status, 401);
  const ok = await fetch(`${url}/api/session`, { headers: { authorization: `Bearer ${VIEWER}` } });
  assert.equal(ok.status, 200);
  assert.equal(((await ok.json()) as { role: string }).role, "viewer");

  const ctx = await browser.newContext();
  contexts.push(ctx);
  const page = await ctx.newPage();
  watchPageProblems(page, problems);
  await page.goto(url);
  await page.waitForSelector("input[name=token]", { timeout: 10_000 });
  assert.equal(await page.locator("#who").count(), 0, "the login page, not the console");
});

test("a deep link opened while logged out lands on its page after logging in", async () => {
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  contexts.push(ctx);
  const page = await ctx.newPage();
  watchPageProblems(page, problems);
  const target = managed[0]!;
  await page.goto(`${url}/#/node/${target}`);
  await page.fill("input[name=token]", VIEWER);
  await Promise.all([page.waitForURL(`${url}/**`), page.click("button[type=submit]")]);
  await page.waitForSelector(`section.node[data-identity="${target}"]`, { timeout: 15_000 });
  assert.equal(new URL(page.url()).hash, `#/node/${target}`);
  await page.close();
});

test("the board shows nodes moving to done without a reload, the failed node's cause first with its log tail", async () => {
  const page = await loggedIn(OPERATOR, "alice");
  await page.waitForSelector("#board-live.on", { timeout: 15_000 });
  // Marks this document: a reload would lose it.
  await page.evaluate(() => ((window as unknown as { marker: number }).marker = 42));

  provisioner = spawnMuster(["provisioner", "--config", writeSimulatedProvisionerConfig(tmp.path, "prov", { broker: lab.url, concurrency: 4, retries: { attempts: 1, backoff: 0.05, max_backoff: 0.1 } }), "--foreground"], { env: env("provisioner") });
  // Seen in progress first, then done: the board follows the state bucket live.
  await page.waitForSelector(`.board-table .row[data-status="in_progress"]`, { timeout: 30_000 });
  const done = waiting.filter((id) => id !== broken);
  await page.waitForFunction((sels) => sels.every((s) => document.querySelector(s)), done.map((id) => rowSel(id, "done")), { timeout: 60_000 });
  await page.waitForSelector(rowSel(broken, "failed"), { timeout: 30_000 });
  assert.equal(await page.evaluate(() => (window as unknown as { marker?: number }).marker), 42, "the page was not reloaded");

  // Failed first: in the table, and its cause as a group with the error and the log tail.
  assert.equal(await page.locator(".board-table .vport .row").first().getAttribute("data-identity"), broken);
  const card = page.locator(".group-card").first();
  await card.waitFor({ timeout: 15_000 });
  assert.equal(await page.locator(".group-card").count(), 1);
  assert.equal(await card.getAttribute("data-count"), "1");
  assert.equal(await card.getAttribute("data-stage"), "bootstrap");
  assert.match((await card.locator(".reason").textContent()) ?? "", /bootstrap.*puppet bootstrap run failed \(exit <n>\)/);
  await card.locator("details.example summary").click();
  assert.match((await card.locator("details.example .err").textContent()) ?? "", /bootstrap/);
  assert.ok(((await card.locator("details.example .logtail").textContent()) ?? "").trim().length > 0, "the log tail is shown");
  assert.match((await page.locator("#board-summary").textContent()) ?? "", /9 done, 0 in progress, 0 pending, 1 failed/);
  // Each done node has a timeline with its stages, on one scale, with a legend, and in words.
  assert.ok((await page.locator(`${rowSel(done[0]!)} .timeline .seg`).count()) >= 3, "stages in the timeline");
  assert.match((await page.locator(".legend").textContent()) ?? "", /bootstrap run.*production run/s);
  // The keyboard reaches a timeline, and its stages show in words.
  await page.locator(`${rowSel(done[0]!)} .timeline`).focus();
  await page.waitForFunction((id) => (document.getElementById("timeline-detail")?.textContent ?? "").startsWith(`${id}: lock`), done[0]!, { timeout: 5000 });
  assert.match((await page.locator("#timeline-detail").textContent()) ?? "", /bootstrap \d/);
  // Focus shows, whole: on a timeline bar (which clips its stages), a column header's button, the top bar's
  assert.deepEqual(await focusProblems(page, `${rowSel(done[0]!)} .timeline`), []);
  assert.deepEqual(await focusProblems(page, '.board-table button.sort[data-sort="identity"]'), []);
  assert.deepEqual(await focusProblems(page, "#logout"), []);
  // The find box narrows the table, by part of a name or by status, and is kept in the address.
  await page.fill("#board-find", "web0");
  await page.waitForFunction(() => document.querySelectorAll(".board-table .vport .row[data-identity]").length === 10);
  await page.fill("#board-find", "failed");
  await page.waitForFunction(() => document.querySelectorAll(".board-table .vport .row[data-identity]").length === 1);
  assert.equal(await page.locator(".board-table .vport .row[data-identity]").getAttribute("data-identity"), broken);
  await page.waitForFunction(() => location.hash === "#/board?find=failed");
  await page.fill("#board-find", "");
  // Sort by name, descending, from the column header (and in the address)
  await page.click('.board-table button.sort[data-sort="identity"]');
  await page.click('.board-table button.sort[data-sort="identity"]');
  await page.waitForFunction(() => location.hash === "#/board?sort=identity&dir=desc");
  assert.equal(await page.locator('[role=columnheader][aria-sort="descending"]').textContent().then((t) => t?.trim().startsWith("node")), true);
  const names = await page.locator(".board-table .vport .row[data-identity]").evaluateAll((els) => els.map((e) => e.getAttribute("data-identity")!));
  assert.deepEqual(names, [...names].sort().reverse());
  // A sent link opens the same view.
  const other = await loggedIn(VIEWER, "bob");
  await other.goto(`${url}/#/board?find=web0&sort=identity&dir=desc`);
  await other.waitForFunction(() => document.querySelectorAll(".board-table .vport .row[data-identity]").length === 10);
  assert.equal(await other.locator(".board-table .vport .row[data-identity]").first().getAttribute("data-identity"), waiting.at(-1));
  assert.equal(await other.inputValue("#board-find"), "web0");
  // Export what the table shows
  const [csv] = await Promise.all([other.waitForEvent("download"), other.click("#board-export-csv")]);
  const text = readFileSync((await csv.path())!, "utf8");
  assert.equal(text.split("\r\n")[0], "identity,status,stage,master,started,finished,updated,elapsed_s,tries,rounds,gone_since,gone_reason,stuck_for_s,last_error");
  assert.match(text.split("\r\n")[1]!, /,\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z,\d{4}-/, "with when it started and finished");
  assert.equal(text.trim().split("\r\n").length, 11, "the header and the ten rows shown");
  assert.match(text.split("\r\n")[1]!, new RegExp(`^${waiting.at(-1)!.replace(/\./g, "\\.")},done,`));
  const [json] = await Promise.all([other.waitForEvent("download"), other.click("#board-export-json")]);
  const rows = JSON.parse(readFileSync((await json.path())!, "utf8")) as { identity: string; status: string }[];
  assert.deepEqual(rows.map((r) => r.identity), [...waiting].sort().reverse());
  await other.close();
  // Each column's sort arrow shows whole, both ways, the narrowest column's too
  for (const key of ["status", "stage", "master", "elapsed", "tries", "identity"]) {
    for (const arrow of ["▲", "▼"]) {
      await page.click(`.board-table button.sort[data-sort="${key}"]`);
      const sel = `.board-table button.sort[data-sort="${key}"]`;
      await page.waitForFunction(([s, a]) => document.querySelector(s!)?.textContent?.endsWith(a!), [sel, arrow] as const);
      assert.deepEqual([...(await cutOff(page, sel)), ...(await cutOff(page, `${sel} span[aria-hidden="true"]`))], [], `${key} ${arrow}`);
    }
  }
  await page.close();
});

test("a failed node's cause: a viewer sees the retry unavailable and why; an operator retries the group after confirming the count", async () => {
  const viewer = await loggedIn(VIEWER, "bob");
  const vcard = viewer.locator(".group-card").first();
  await vcard.waitFor({ timeout: 15_000 });
  assert.equal(await vcard.locator("button.retry-group").isDisabled(), true, "unavailable before clicking");
  assert.match((await viewer.locator("#role-note").textContent()) ?? "", /needs the operator role; you are signed in as bob \(viewer\)/);
  a11y.push(...(await a11yFindings(viewer, "board with a failure group (viewer)")));

  failing.delete(broken);
  const op = await loggedIn(OPERATOR, "alice");
  const ocard = op.locator(".group-card").first();
  await ocard.waitFor({ timeout: 15_000 });
  // Cancel first: nothing happens
  await ocard.locator("button.retry-group").click();
  await op.waitForSelector("dialog#confirm-dialog[open]");
  assert.match((await op.locator("#confirm-title").textContent()) ?? "", /Retry 1 failed node\?/);
  a11y.push(...(await a11yFindings(op, "confirmation dialog")));
  await op.keyboard.press("Escape");
  await op.waitForSelector("dialog#confirm-dialog", { state: "detached" });
  assert.equal((await store.get(broken))!.record.status, "failed");
  // Then for real, from the keyboard: the dialog's focus starts on Cancel, Tab reaches the confirm button
  await ocard.locator("button.retry-group").focus();
  await op.keyboard.press("Enter");
  await op.waitForSelector("dialog#confirm-dialog[open]");
  await op.keyboard.press("Tab");
  assert.equal(await op.evaluate(() => document.activeElement?.id), "confirm-ok");
  await op.keyboard.press("Enter");
  // The operator's retry provisions the node again; both boards follow without a reload.
  await op.waitForSelector(rowSel(broken, "done"), { timeout: 60_000 });
  await viewer.waitForSelector(rowSel(broken, "done"), { timeout: 10_000 });
  await op.waitForFunction(() => document.querySelectorAll(".group-card").length === 0, undefined, { timeout: 10_000 });
  assert.equal((await store.get(broken))!.record.rounds, 2);
  assert.match((await store.get(broken))!.record.log.join("\n"), /retry requested by alice \(web console, group bootstrap/);
  await viewer.close();
  await op.close();
});

test("the explorer filters with muster's language, shows fact columns and counts, and a bad filter's error at its column", async () => {
  const page = await loggedIn(VIEWER, "bob");
  await page.goto(`${url}/#/explorer`);
  await page.fill("#filter", "country=de and os=debian");
  await page.fill("#columns", "country, os");
  await page.fill("#count-by", "os");
  await page.click("#explorer-form button[type=submit]");
  const want = fleet.filter((n) => n.facts.country === "de" && n.facts.os === "debian").map((n) => n.identity).sort();
  // The count is written at once, the rows on the next frame: wait for both.
  await page.waitForFunction(
    (n) => document.getElementById("explorer-total")?.textContent?.startsWith(`${n} node`) && document.querySelectorAll(".explorer-table .vport .row[data-identity]").length === n,
    want.length,
    { timeout: 15_000 },
  );
  const rows = page.locator(".explorer-table .vport .row[data-identity]");
  assert.deepEqual((await rows.evaluateAll((els) => els.map((e) => e.getAttribute("data-identity")))).sort(), want);
  assert.deepEqual(await rows.first().locator("span").allTextContents(), [want[0]!, "de", "debian"]);
  await page.waitForSelector(`.counts .bar-row[data-value="debian"]`, { timeout: 10_000 });
  assert.equal(await page.locator(`.counts .bar-row[data-value="debian"] .num`).textContent(), String(want.length));

  // Typing is enough: the page asks once the typing pauses.
  const bad = "country=de and";
  await page.fill("#filter", bad);
  await page.waitForSelector("#filter-error:not([hidden]) .mark", { timeout: 10_000 });
  const api = (await (await fetch(`${url}/api/nodes?filter=${encodeURIComponent(bad)}`, { headers: { authorization: `Bearer ${VIEWER}` } })).json()) as { error: { code: string; column: number; message: string } };
  assert.equal(api.error.code, "filter");
  const caret = (await page.locator("#filter-error .mark").textContent()) ?? "";
  assert.equal(caret.indexOf("^") + 1, api.error.column, "the caret is at the parser's column");
  assert.equal(await page.locator("#filter-error .src").textContent(), bad);
  assert.equal(await page.locator("#filter-error p.error").textContent(), api.error.message);
  // The previous filter's counts are gone: the chart answers this filter or shows nothing.
  await page.waitForFunction(() => document.querySelectorAll(".counts .bar-row").length === 0, undefined, { timeout: 10_000 });

  a11y.push(...(await a11yFindings(page, "explorer with a bad filter")));
  // Export: every matching node with the chosen columns
  await page.fill("#filter", "country=de");
  await page.fill("#columns", "country, os");
  await page.click("#explorer-form button[type=submit]");
  await page.waitForFunction(() => document.getElementById("explorer-total")?.textContent?.match(/^\d+ node/));
  const [csv] = await Promise.all([page.waitForEvent("download"), page.click("#explorer-export-csv")]);
  const lines = readFileSync((await csv.path())!, "utf8").trim().split("\r\n");
  assert.equal(lines[0], "identity,country,os");
  assert.deepEqual(lines.slice(1).map((l) => l.split(",")[0]).sort(), fleet.filter((n) => n.facts.country === "de").map((n) => n.identity).sort());
  a11y.push(...(await a11yFindings(page, "explorer")));

  // A node's page from the explorer: its facts and its provisioning.
  await page.fill("#filter", "");
  await page.click("#explorer-form button[type=submit]");
  await page.click(`.explorer-table .row[data-identity="${waiting[1]}"] a`);
  await page.waitForSelector(`section.node[data-identity="${waiting[1]}"]`, { timeout: 10_000 });
  assert.match((await page.locator("table.facts").textContent()) ?? "", /country\s*de/);
  // its health first, then its provisioning
  assert.equal(await page.locator("section.node .node-health").getAttribute("data-reachable"), "true");
  assert.match((await page.locator("section.node .cols .badge").first().textContent()) ?? "", /done/);
  assert.ok((await page.locator("section.node .rounds-table tr[data-event=done]").count()) >= 1, "its rounds, the last one done");
  // facts grouped and searched
  await page.fill("#fact-find", "country");
  await page.waitForFunction(() => /1 matching/.test(document.getElementById("fact-count")?.textContent ?? ""));
  await page.close();
});

test("runall: the filter's match count before starting, a confirmation above the threshold, per-node results linked to each node's Puppet run; a viewer sees Start unavailable", async () => {
  const viewer = await loggedIn(VIEWER, "bob");
  await viewer.goto(`${url}/#/runall`);
  await viewer.waitForSelector("#runall-form");
  assert.equal(await viewer.locator("#runall-form button[type=submit]").isDisabled(), true, "unavailable before clicking");
  assert.match((await viewer.locator("#runall-role").textContent()) ?? "", /needs the operator role; you are signed in as bob \(viewer\)/);

  const op = await loggedIn(OPERATOR, "alice");
  await op.goto(`${url}/#/runall`);
  // The count of matching nodes shows while typing, before anything starts.
  await op.fill("#runall-filter", "role=app");
  await op.waitForSelector('#runall-preview[data-matches="5"]', { timeout: 10_000 });
  assert.match((await op.locator("#runall-preview").textContent()) ?? "", /5 nodes with Puppet match role=app .*more than 3, so you confirm/);
  await op.fill("#runall-concurrency", "2");
  await op.click("#runall-form button[type=submit]");
  // 5 nodes is over the threshold (3 here): the operator confirms the count first.
  await op.waitForSelector("dialog#confirm-dialog[open]", { timeout: 10_000 });
  assert.match((await op.locator("#confirm-title").textContent()) ?? "", /Run Puppet on 5 nodes\?/);
  await op.click("#confirm-ok");
  await op.waitForSelector("#runall-message.ok", { timeout: 10_000 });
  const id = /started run (\S+)/.exec((await op.locator("#runall-message").textContent()) ?? "")![1]!;
  lastRunall = id;
  // Both pages follow the run live: slots while it goes, then finished with every node done.
  await op.waitForSelector(`.run-card[data-run="${id}"][data-state="finished"]`, { timeout: 30_000 });
  await viewer.waitForSelector(`.run-card[data-run="${id}"][data-state="finished"]`, { timeout: 10_000 });
  const card = op.locator(`.run-card[data-run="${id}"]`);
  assert.match((await card.textContent()) ?? "", /5 done, 0 failed, 0 to go of 5/);
  assert.match((await card.textContent()) ?? "", /started by alice/);
  // Each node's result
  await card.locator("details.results summary").click();
  await op.waitForFunction((rid) => document.querySelectorAll(`.run-card[data-run="${rid}"] .run-results tbody tr`).length === 5, id, { timeout: 10_000 });
  const outcomes = await card.locator(".run-results tbody tr").evaluateAll((rows) => rows.map((r) => [r.getAttribute("data-identity"), r.getAttribute("data-outcome")]));
  assert.deepEqual(outcomes.map((o) => o[0]).sort(), [...managed].sort());
  for (const [, o] of outcomes) assert.ok(o === "changed" || o === "ok", `outcome ${o}`);
  a11y.push(...(await a11yFindings(op, "runall page with results")));
  // ... linked to the node's Puppet run, readable
  await card.locator(`.run-results a[href="#/node/${managed[0]}?section=puppet"]`).click();
  await op.waitForSelector(`section.node[data-identity="${managed[0]}"] .puppet-run`, { timeout: 15_000 });
  const run = op.locator(".puppet-run");
  // its first run changed a file: the report names it with Puppet's message
  assert.equal(await run.getAttribute("data-status"), "changed");
  assert.match((await run.locator(".changed-resources").textContent()) ?? "", /File\[\/etc\/motd\]\s*content changed '\{md5\}0f0e' to '\{md5\}a1b2'/);
  assert.match((await run.textContent()) ?? "", /(just now|s ago|min ago)/, "when, relative");
  assert.match((await run.textContent()) ?? "", /took \d/, "how long");
  assert.match((await run.locator("time").getAttribute("datetime")) ?? "", /^\d{4}-\d\d-\d\dT/);
  a11y.push(...(await a11yFindings(op, "node page with its Puppet run")));
  await viewer.close();
  await op.close();
});

test("runall from the CLI (the lab's admin credential) shows on the Puppet runs page with per-node results", async () => {
  const page = await loggedIn(VIEWER, "bob");
  await page.goto(`${url}/#/runall`);
  const before = await page.locator(".run-card").count();
  const cli = await runCli(["puppet", "runall", "2", "-F", "role=app", "--broker", lab.url], { env: env("admin"), timeoutMs: 60_000 });
  assert.equal(cli.code, 0, cli.stderr + cli.stdout);
  await page.waitForFunction((n) => document.querySelectorAll(".run-card").length > n, before, { timeout: 30_000 });
  const card = page.locator(".run-card").filter({ hasNotText: "alice" }).first();
  await page.waitForFunction(() => [...document.querySelectorAll(".run-card[data-state=finished]")].some((c) => /5 done, 0 failed/.test(c.textContent ?? "") && !/alice/.test(c.textContent ?? "")), undefined, { timeout: 30_000 });
  await card.locator("details.results summary").click();
  await page.waitForFunction(() => [...document.querySelectorAll(".run-card")].some((c) => !/alice/.test(c.textContent ?? "") && c.querySelectorAll(".run-results tbody tr").length === 5), undefined, { timeout: 10_000 });
  await page.close();
});

test("the landing page is the fleet's health: a node whose power is cut shows unreachable with why, in the tab title and as a browser notification; back, it leaves the list", async (t) => {
  let victimNc: NatsConnection | undefined;
  const power = async () => {
    victimNc = await lab.connect("emulator", "emulator-victim");
    victimEmu = await startEmulator({ nc: victimNc, nodes: victimFleet, collective: "muster", log: silentLogger, heartbeat: 1 });
  };
  await power();
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  contexts.push(ctx);
  await ctx.grantPermissions(["notifications"], { origin: url });
  // every notification the page shows is noted, as well as shown
  await ctx.addInitScript(() => {
    const w = window as unknown as { Notification: typeof Notification; notes: { title: string; body?: string }[] };
    const Real = w.Notification;
    w.notes = [];
    class Noted extends Real {
      constructor(title: string, o?: NotificationOptions) {
        w.notes.push({ title, body: o?.body });
        super(title, o);
      }
    }
    Object.defineProperty(Noted, "permission", { get: () => Real.permission });
    (Noted as unknown as { requestPermission: () => Promise<string> }).requestPermission = () => Real.requestPermission();
    w.Notification = Noted;
  });
  const page = await ctx.newPage();
  watchPageProblems(page, problems);
  await page.goto(url);
  await page.fill("input[name=token]", OPERATOR);
  await Promise.all([page.waitForURL(`${url}/**`), page.click("button[type=submit]")]);
  // logged in, the landing page is the health overview
  await page.waitForSelector("section.health-page", { timeout: 15_000 });
  assert.equal(await page.locator('#nav a[data-view="health"]').getAttribute("aria-current"), "page");
  await page.click("#notify-toggle");
  await page.waitForFunction(() => /notifications are on/i.test(document.getElementById("notify-state")?.textContent ?? ""), undefined, { timeout: 5000 });
  const item = `.health-kind[data-kind="unreachable"] li[data-identity="${victim}"]`;
  assert.equal(await page.locator(item).count(), 0, "reachable while its heartbeats arrive");

  // the power cut: its connection drops, no last heartbeat is sent
  const cut = Date.now();
  await victimNc!.close();
  await page.waitForSelector(item, { timeout: 120_000 }); // a deadline that only catches a hang: 3 s of silence is the rule
  const noticedMs = Date.now() - cut;
  assert.match((await page.locator(item).textContent()) ?? "", /no heartbeat for \d+ s \(one is due every 1 s; unreachable after 3 s\)/);
  // the tab says how many nodes and services have problems, as the page's two sections do
  const unhealthyShown = () => page.evaluate(() => ["section.health-page", "section.site"].reduce((n, sel) => n + Number(document.querySelector(sel)?.getAttribute("data-unhealthy") ?? 0), 0));
  const shownCount = await unhealthyShown();
  assert.ok(Number(await page.locator("section.health-page").getAttribute("data-unhealthy")) >= 1);
  assert.equal(await page.title(), `(${shownCount}) Health · muster`);
  await page.waitForFunction((v) => (window as unknown as { notes: { title: string }[] }).notes.some((n) => n.title.includes(v)), victim, { timeout: 5000 });
  const count = page.locator('.health-counts li[data-kind="unreachable"]');
  assert.ok(Number(await count.getAttribute("data-count")) >= 1);
  // the same report as `muster health --json` (the API and the CLI share the model)
  const api = (await (await fetch(`${url}/api/health`, { headers: { authorization: `Bearer ${VIEWER}` } })).json()) as { nodes: { identity: string; reachable: boolean; problems: { kind: string }[] }[] };
  assert.equal(api.nodes.find((n) => n.identity === victim)?.reachable, false);
  const cli = await runCli(["health", "--json", "-I", victim, "--broker", lab.url, "--unreachable-after", "3"], { env: env("admin"), timeoutMs: 30_000 });
  assert.equal(cli.code, 2, cli.stderr);
  const fromCli = JSON.parse(cli.stdout) as { nodes: { identity: string; reachable: boolean; problems: { kind: string }[] }[]; summary: { unreachable: number } };
  assert.deepEqual(Object.keys(fromCli.nodes[0]!).sort(), Object.keys(api.nodes[0]!).sort());
  assert.deepEqual([fromCli.nodes[0]!.identity, fromCli.nodes[0]!.reachable, fromCli.nodes[0]!.problems[0]!.kind], [victim, false, "unreachable"]);
  const viewer = await loggedIn(VIEWER, "bob", "");
  await viewer.waitForSelector(item, { timeout: 10_000 });
  a11y.push(...(await a11yFindings(viewer, "health page with an unreachable node (viewer)")));
  await viewer.close();

  // power back on: its first heartbeat makes it reachable again
  await victimEmu!.stop().catch(() => undefined);
  await power();
  await page.waitForSelector(item, { state: "detached", timeout: 15_000 });
  const after = await unhealthyShown();
  assert.equal(await page.title(), after ? `(${after}) Health · muster` : "Health · muster");
  t.diagnostic(`unreachable on the page ${noticedMs} ms after the cut`);
  await page.close();
});

test("the landing page shows the site first: each service with its role, state, why and checks, then the nodes; how fresh the data is moves on by itself", async () => {
  const page = await loggedIn(VIEWER, "bob", "");
  // the registry and the console write their service heartbeats (src/beacon.ts) from their own processes
  for (const role of ["registry", "console"]) await page.waitForSelector(`section.site tr.service[data-role="${role}"][data-state="ok"]`, { timeout: 30_000 });
  const order = await page.evaluate(() => [...document.querySelectorAll("section.health-page h2")].map((h) => h.id));
  assert.deepEqual(order.slice(0, 2), ["h-site", "h-nodes"], "the site comes before the nodes");
  const row = page.locator('section.site tr.service[data-role="registry"]');
  assert.equal(await row.locator("td").first().textContent(), "Registry");
  await row.locator("details summary").click();
  assert.match((await row.locator("details li").first().textContent()) ?? "", /registrations \(ok\): \d+ current nodes?/);
  assert.match((await page.locator("#site-summary").textContent()) ?? "", /^\d+ services: \d+ healthy, \d+ unhealthy$/);
  // the same services as /api/health and `muster health --json`
  const api = (await (await fetch(`${url}/api/health`, { headers: { authorization: `Bearer ${VIEWER}` } })).json()) as { services: { role: string; name: string }[] };
  const shown = await page.locator("section.site tr.service").evaluateAll((rows) => rows.map((r) => `${(r as HTMLElement).dataset.role}/${(r as HTMLElement).dataset.name}`));
  assert.deepEqual(shown, api.services.map((x) => `${x.role}/${x.name}`));
  // how fresh: the age the page shows moves on between reports, so a stalled feed would show
  const age = async () => Number(await page.locator("#health-fresh").getAttribute("data-age"));
  await page.waitForFunction(() => /^data as of \d+ s ago$/.test(document.getElementById("health-fresh")?.textContent ?? ""), undefined, { timeout: 10_000 });
  assert.ok((await age()) < 15, "the console's view is current");
  a11y.push(...(await a11yFindings(page, "health page with the site's services (viewer)")));
  await page.close();
});

test("Puppet disabled or failing shows on the landing page with why", async () => {
  const page = await loggedIn(VIEWER, "bob", "");
  await page.waitForSelector("section.health-page", { timeout: 15_000 });
  sim.disable(managed[0]!, "maintenance by jane");
  const off = `.health-kind[data-kind="puppet_disabled"] li[data-identity="${managed[0]}"]`;
  await page.waitForSelector(off, { timeout: 10_000 });
  assert.match((await page.locator(off).textContent()) ?? "", /Puppet is disabled since .*: maintenance by jane/);
  puppetFailing.add(managed[4]!);
  const run = await runCli(["rpc", "puppet", "runonce", "force=true", "-I", managed[4]!, "--broker", lab.url], { env: env("admin"), timeoutMs: 30_000 });
  assert.equal(run.code, 0, run.stderr + run.stdout);
  const failed = `.health-kind[data-kind="puppet_failed"] li[data-identity="${managed[4]}"]`;
  await page.waitForSelector(failed, { timeout: 15_000 });
  assert.match((await page.locator(failed).textContent()) ?? "", /the last Puppet run failed .* ago \(1 failed resource\)/);
  a11y.push(...(await a11yFindings(page, "health page with Puppet disabled and failed")));
  // fixed: enabled, and a run that works
  sim.enable(managed[0]!);
  puppetFailing.delete(managed[4]!);
  assert.equal((await runCli(["rpc", "puppet", "runonce", "force=true", "-I", managed[4]!, "--broker", lab.url], { env: env("admin"), timeoutMs: 30_000 })).code, 0);
  await page.waitForSelector(off, { state: "detached", timeout: 10_000 });
  await page.waitForSelector(failed, { state: "detached", timeout: 15_000 });
  await page.close();
});

test("runall and Puppet history survive a restart of the console", async () => {
  await web.stop();
  await startConsole();
  const get = async (path: string) => (await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${VIEWER}` } })).json();
  const runs = await eventually(async () => {
    const r = (await get("/api/runall")) as { runs: { id: string; state: string; started_by: string; filter: string; concurrency: number; done: number }[] };
    return r.runs.length >= 2 ? r.runs : undefined;
  }, 15_000, "the runs read back from the runall history");
  const mine = runs.find((r) => r.id === lastRunall)!;
  assert.deepEqual([mine.state, mine.started_by, mine.filter, mine.concurrency, mine.done], ["finished", "alice (web console)", "role=app", 2, 5]);
  const results = (await get(`/api/runall/${lastRunall}`)) as { results: { identity: string; outcome: string }[] };
  assert.deepEqual(results.results.map((r) => r.identity).sort(), [...managed].sort());
  const node = (await get(`/api/nodes/${managed[4]}`)) as { puppet_runs: { status: string }[] };
  assert.ok(node.puppet_runs.length >= 3, `runs kept: ${JSON.stringify(node.puppet_runs)}`);
  assert.deepEqual(node.puppet_runs.slice(0, 2).map((r) => r.status), ["changed", "failed"], "newest first: the fixed run, then the failed one");
});

test("progress: the throughput chart and the ETA match the provisioner's records", async () => {
  const page = await loggedIn(VIEWER, "bob");
  await page.goto(`${url}/#/progress`);
  await page.waitForSelector("#throughput[data-since]", { timeout: 15_000 });
  const shown = await page.evaluate(() => {
    const fig = document.getElementById("throughput")!;
    return {
      now: Number(document.querySelector(".progress-page")!.getAttribute("data-now")),
      since: Number(fig.dataset.since),
      bucketMs: Number(fig.dataset.bucketMs),
      bars: [...fig.querySelectorAll("g[data-minute]")].map((g) => ({ minute: g.getAttribute("data-minute")!, done: Number(g.getAttribute("data-done")), failed: Number(g.getAttribute("data-failed")) })),
      eta: document.getElementById("progress-eta")!.dataset.etaS ?? "",
      rate: document.getElementById("progress-rate")!.dataset.rate ?? "",
      pending: Number(document.getElementById("progress-pending")!.textContent),
      inProgress: Number(document.getElementById("progress-in-progress")!.textContent),
    };
  });
  // The same figures, computed here from the bucket at the page's own "now".
  const recs = await store.list();
  const want = new Map<string, { done: number; failed: number }>();
  let finishedRecently = 0;
  for (const r of recs) {
    if ((r.status === "done" || r.status === "failed") && r.finishedAt !== undefined) {
      if (r.finishedAt >= shown.since && r.finishedAt < shown.since + 180 * shown.bucketMs) {
        const minute = new Date(Math.floor(r.finishedAt / 60_000) * 60_000).toISOString();
        const b = want.get(minute) ?? { done: 0, failed: 0 };
        b[r.status]++;
        want.set(minute, b);
      }
      if (r.finishedAt > shown.now - 15 * 60_000 && r.finishedAt <= shown.now) finishedRecently++;
    }
  }
  assert.ok(want.size > 0, "there is something to chart");
  assert.deepEqual(
    shown.bars.sort((a, b) => a.minute.localeCompare(b.minute)),
    [...want.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([minute, b]) => ({ minute, ...b })),
  );
  const left = recs.filter((r) => r.status === "pending" || r.status === "in_progress").length;
  assert.equal(shown.pending + shown.inProgress, left);
  assert.equal(Number(shown.rate), finishedRecently / 15);
  assert.equal(shown.eta, String(Math.round((left / (finishedRecently / 15)) * 60)));
  assert.ok((await page.locator("#stage-table tr[data-stage=bootstrap]").count()) === 1, "per-stage figures");
  assert.ok((await page.locator("#master-table tr[data-master]").count()) >= 2, "per-master figures");
  // the chart's time labels, the last one at its right edge included, show whole inside the chart
  const ticks = await page.locator("#throughput svg text.tick").count();
  assert.ok(ticks >= 4, `time labels: ${ticks}`);
  for (let i = 1; i <= ticks; i++) assert.deepEqual(await cutOff(page, `#throughput svg text.tick:nth-of-type(${i})`, { within: "#throughput" }), []);
  a11y.push(...(await a11yFindings(page, "progress page")));
  await page.close();
});

test("audit: operators see the console's actions and refusals, newest first, filtered by user and action; viewers do not", async () => {
  const op = await loggedIn(OPERATOR, "alice");
  await op.goto(`${url}/#/audit`);
  await op.waitForSelector(".audit-table tbody tr", { timeout: 15_000 });
  const rows = await op.locator(".audit-table tbody tr").evaluateAll((trs) => trs.map((t) => ({ user: t.getAttribute("data-user"), action: t.getAttribute("data-action"), ok: t.getAttribute("data-ok"), time: t.querySelector("time")!.getAttribute("datetime")! })));
  assert.ok(rows.some((r) => r.user === "web:alice" && r.action === "retry_group" && r.ok === "true"), JSON.stringify(rows));
  assert.ok(rows.some((r) => r.user === "web:alice" && r.action === "runall" && r.ok === "true"));
  assert.deepEqual(rows.map((r) => r.time), rows.map((r) => r.time).sort().reverse(), "newest first");
  await op.selectOption("#audit-action", "runall");
  await op.waitForFunction(() => [...document.querySelectorAll(".audit-table tbody tr")].every((t) => t.getAttribute("data-action") === "runall") && location.hash.includes("action=runall"), undefined, { timeout: 10_000 });
  await op.check("#audit-reads");
  await op.waitForFunction(() => location.hash.includes("reads=1"), undefined, { timeout: 10_000 });
  a11y.push(...(await a11yFindings(op, "audit page")));
  const viewer = await loggedIn(VIEWER, "bob");
  assert.equal(await viewer.locator('#nav a[data-view="audit"]').isHidden(), true);
  assert.equal((await viewer.request.get(`${url}/api/audit`)).status(), 403);
  await viewer.close();
  await op.close();
});

test("the page says when the registry is down, and recovers by itself when it is back", async () => {
  const page = await loggedIn(VIEWER, "bob");
  await page.waitForSelector("#board-live.on", { timeout: 15_000 });
  assert.equal(await page.locator("#status").isHidden(), true, "no banner while all is well");
  await page.evaluate(() => ((window as unknown as { marker: number }).marker = 7));
  const regCfg = join(tmp.path, "registry.yaml");
  await registry.stop();
  await page.waitForSelector("#status:not([hidden])", { timeout: 20_000 });
  assert.match((await page.locator("#status").textContent()) ?? "", /registry/i);
  // The same port again (the console's registry.url): the registry's config names port 0, so
  // restart it on the port it had.
  const port = Number(/:(\d+)$/.exec(registryUrl)![1]);
  writeFileSync(regCfg, toYaml({ broker: lab.url, collectives: ["muster"], http: { host: "127.0.0.1", port }, log: { level: "warn" } }));
  registry = spawnMuster(["registry", "serve", "--config", regCfg], { env: env("registry") });
  await registry.waitForLine(/ready/, 20_000);
  await page.waitForSelector("#status[hidden]", { state: "attached", timeout: 30_000 });
  assert.equal(await page.evaluate(() => (window as unknown as { marker?: number }).marker), 7, "recovered without a reload");
  await page.close();
});

test("the page says when the broker is down, and comes back live by itself when it is back; the health page says it cannot see, and marks nobody unreachable meanwhile", async () => {
  const page = await loggedIn(VIEWER, "bob");
  await page.waitForSelector("#board-live.on", { timeout: 15_000 });
  await page.evaluate(() => ((window as unknown as { marker: number }).marker = 9));
  const health = await loggedIn(VIEWER, "bob", "");
  await health.waitForSelector("#health-fresh", { timeout: 15_000 });
  const unhealthyBefore = Number(await health.locator("section.health-page").getAttribute("data-unhealthy"));
  await lab.stop();
  await page.waitForSelector("#status:not([hidden])", { timeout: 30_000 });
  assert.match((await page.locator("#status").textContent()) ?? "", /broker/i);
  // Heartbeats every second, unreachable after 3 s: a view that read its own silence as the
  // fleet's would list every node now. It says it cannot see, on the health page and every page.
  await health.waitForSelector("#health-degraded", { timeout: 30_000 });
  assert.match((await health.locator("#health-degraded").textContent()) ?? "", /This view cannot see the fleet since .*: not connected to the broker: reconnecting\. Nobody is marked unreachable/);
  await page.waitForFunction(() => /cannot see the fleet right now/.test(document.getElementById("status")?.textContent ?? ""), undefined, { timeout: 15_000 });
  // The claim is about time passing: nobody turns unreachable however long the silence lasts.
  // Past twice the 3 s threshold (the page's own clock), the count is what it was before the cut.
  await health.waitForFunction((ms) => Date.now() - ms > 8000, Date.now(), { timeout: 20_000, polling: 1000 });
  assert.equal(await health.locator("section.health-page").getAttribute("data-degraded"), "true");
  assert.equal(Number(await health.locator("section.health-page").getAttribute("data-unhealthy")), unhealthyBefore, "no node became unhealthy while the view could not see");
  a11y.push(...(await a11yFindings(health, "health page, degraded view (viewer)")));
  // The same port and store: every client, the console's included, reconnects by itself.
  await lab.start();
  // a banner that stays says which of its causes stayed, with the console's own account of it
  const saying = async (wait: Promise<unknown>, what: string) =>
    wait.catch(async (e: unknown) => {
      const banner = await page.locator("#status").textContent().catch((x: Error) => `(unread: ${x.message})`);
      const log = `${web.stdout()}\n${web.stderr()}`.split("\n").filter((l) => /"level":[45]0/.test(l)).slice(-30).join("\n");
      throw new Error(`${what}: ${(e as Error).message}\nthe banner says: ${banner}\nthe console's last warnings:\n${log}`);
    });
  await saying(page.waitForSelector("#status[hidden]", { state: "attached", timeout: 60_000 }), "the banner did not go once the broker was back");
  await saying(health.waitForSelector("#health-degraded", { state: "detached", timeout: 60_000 }), "the health page stayed degraded once the broker was back");
  await health.close();
  // Live again: a record written now reaches the open board.
  const id = "late.test";
  const nc2 = await lab.connect("admin", "late-writer");
  try {
    const st = await ProvisionState.open(bucketsOn(nc2), "muster_provision");
    const rec = { ...newRecord(id), status: "failed" as const, lastError: "written after the broker came back", startedAt: Date.now() };
    assert.ok(await st.compareAndSet({ record: rec, revision: 0 }));
    await page.waitForSelector(rowSel(id, "failed"), { timeout: 30_000 });
    await page.waitForSelector(`.group-card .tags a[href="#/node/${id}"]`, { state: "attached", timeout: 10_000 });
  } finally {
    await nc2.drain().catch(() => undefined);
  }
  assert.equal(await page.evaluate(() => (window as unknown as { marker?: number }).marker), 9, "recovered without a reload");
  await page.close();
});

test("logging out ends the session", async () => {
  const page = await loggedIn(VIEWER, "bob");
  assert.equal((await page.request.get(`${url}/api/session`)).status(), 200);
  await page.click("#logout");
  await page.waitForSelector("input[name=token]", { timeout: 10_000 });
  assert.equal((await page.request.get(`${url}/api/session`)).status(), 401, "the cookie no longer opens the API");
  await page.close();
});

test("a gone node: its badge shows whole on the board and its page, with the actions for it, and it is listed on the health page", async () => {
  // another provisioner's node, found gone: its claim holds, so this test's provisioner leaves it alone
  const id = "gone-badge.test";
  const now = Date.now();
  const rec: NodeRecord = { ...newRecord(id, now - 60_000), status: "in_progress", owner: "prov-elsewhere", claimExpires: now + 3600_000, current: "bootstrap", stage: "sign_csr", master: "master-de.test", rounds: 1, startedAt: now - 60_000, gone: { since: now - 30_000, reason: "no answer to 3 pings in 30 s" } };
  assert.ok(await store.compareAndSet({ record: rec, revision: 0 }));
  try {
    const page = await loggedIn(VIEWER, "bob");
    const badge = `${rowSel(id)}[data-gone="true"] .status-cell .badge.gone`;
    await page.waitForSelector(badge, { timeout: 15_000 });
    assert.deepEqual([...(await cutOff(page, badge)), ...(await cutOff(page, `${rowSel(id)} .status-cell .badge.in_progress`))], []);
    a11y.push(...(await a11yFindings(page, "board with a gone node (viewer)")));
    await page.evaluate((h) => (location.hash = h), `#/node/${id}`);
    await page.waitForSelector(`section.node[data-identity="${id}"] .badge.gone`, { timeout: 15_000 });
    assert.deepEqual(await cutOff(page, `section.node .badge.gone`), []);
    assert.equal(await page.locator("#node-retry").textContent(), "Retry now");
    assert.equal(await page.locator("#node-forget").isDisabled(), true, "a viewer may not");
    a11y.push(...(await a11yFindings(page, "node page of a gone node (viewer)")));
    await page.evaluate(() => (location.hash = "#/health"));
    await page.waitForSelector(`.health-kind[data-kind="gone"] li[data-identity="${id}"]`, { timeout: 15_000 });
    a11y.push(...(await a11yFindings(page, "health page with a gone node (viewer)")));
    await page.close();
  } finally {
    await store.remove(id);
  }
});

test("a node provisioned long ago whose heartbeats stopped: the board says done and unreachable; its page opens without asking it, with the last Puppet run health knows", async () => {
  // done in its record, never heard from since: health says unreachable, the record alone said "done" (issue 36 §6)
  const id = "ghost.test";
  const now = Date.now();
  const rec: NodeRecord = { ...newRecord(id, now - 3_600_000), status: "done", stage: "notify", master: "master-de.test", rounds: 1, startedAt: now - 3_600_000, finishedAt: now - 3_500_000 };
  assert.ok(await store.compareAndSet({ record: rec, revision: 0 }));
  const runs = await bucketsOn(nc).bucket(DEFAULT_PUPPET_RUNS_BUCKET);
  await runs.put(bucketKey(id), encodePuppetRun({ identity: id, time: now - 3_500_000, status: "changed", resources: { total: 40, changed: 3, failed: 0 }, duration_s: 12.5, config_version: "1700000000" }));
  try {
    const page = await loggedIn(VIEWER, "bob");
    const badge = `${rowSel(id, "done")}[data-unreachable="true"] .status-cell .badge.unreachable`;
    await page.waitForSelector(badge, { timeout: 20_000 });
    assert.deepEqual([...(await cutOff(page, badge)), ...(await cutOff(page, `${rowSel(id)} .status-cell .badge.done`))], []);
    assert.match((await page.locator("#board-summary").textContent()) ?? "", /\d+ unreachable now/);
    a11y.push(...(await a11yFindings(page, "board with a done node that is unreachable")));
    await page.evaluate((h) => (location.hash = h), `#/node/${id}`);
    await page.waitForSelector(`section.node[data-identity="${id}"] .puppet-run[data-source="health"]`, { timeout: 15_000 });
    assert.match((await page.locator("#puppet-known").textContent()) ?? "", /unreachable, so it was not asked/);
    assert.equal(await page.locator(".puppet-run td[data-count=changed]").textContent(), "3");
    assert.equal(await page.locator("text=No Puppet run reported").count(), 0);
    a11y.push(...(await a11yFindings(page, "node page of an unreachable node")));
    await page.close();
  } finally {
    await store.remove(id);
    await runs.purge(bucketKey(id));
  }
});

test("the Alerts page: an operator sends a test alert that reaches the receiver and silences a node, both in the history; a viewer sees the buttons unavailable and why", async () => {
  const op = await loggedIn(OPERATOR, "alice", "#/alerts");
  await op.waitForSelector("#alerts-delivery", { timeout: 15_000 });
  const before = hook.received.length;
  await op.click("#alerts-delivery button");
  await op.waitForSelector("#alerts-message", { timeout: 30_000 });
  assert.match((await op.locator("#alerts-message").textContent()) ?? "", /test alert delivered to http:\/\/127\.0\.0\.1:\d+\/ through alerts\.test/);
  assert.equal(await op.locator("#alerts-message.ok").count(), 1);
  assert.ok(hook.received.slice(before).some((b) => (b as { subject: string }).subject === "muster: test alert from web:alice"));
  await op.waitForSelector('#alerts-delivery[data-ok="true"]', { timeout: 10_000 });
  await op.fill("#silence-identity", victim);
  await op.selectOption("#silence-for", "1h");
  await op.fill("#silence-note", "moving racks");
  await op.click('#silence-form button[type="submit"]');
  await op.waitForSelector(`.silences li[data-identity="${victim}"]`, { timeout: 15_000 });
  await op.waitForSelector(`.alerts-history tr[data-type="silenced"][data-identity="${victim}"]`, { timeout: 15_000 });
  await op.waitForSelector('.alerts-history tr[data-type="test"]', { timeout: 15_000 });
  a11y.push(...(await a11yFindings(op, "alerts page (operator)")));
  await op.click(`.silences li[data-identity="${victim}"] button`);
  await op.waitForSelector(`.silences li[data-identity="${victim}"]`, { state: "detached", timeout: 15_000 });
  const viewer = await loggedIn(VIEWER, "bob", "#/alerts");
  await viewer.waitForSelector("#alerts-role", { timeout: 15_000 });
  assert.equal(await viewer.locator("#alerts-delivery button").isDisabled(), true);
  assert.equal(await viewer.locator('#silence-form button[type="submit"]').isDisabled(), true);
  a11y.push(...(await a11yFindings(viewer, "alerts page (viewer)")));
  await viewer.close();
  await op.close();
});

test("at 390 px wide the header's page links stay on one line (scrolling sideways), Log out shows whole on one line, and the header fits the screen", async () => {
  const page = await loggedIn(OPERATOR, "alice", "#/board", { width: 390, height: 844 });
  await page.waitForSelector("#logout:not([hidden])", { timeout: 15_000 });
  await page.waitForSelector('#nav a[data-view="audit"]:not([hidden])', { timeout: 15_000 });
  const layout = await page.evaluate(() => {
    const links = [...document.querySelectorAll<HTMLElement>("#nav a:not([hidden])")];
    const logout = document.getElementById("logout")!;
    const header = document.querySelector<HTMLElement>("header.top")!;
    return { tops: [...new Set(links.map((a) => Math.round(a.getBoundingClientRect().top)))], logoutLines: logout.getClientRects().length, logoutHeight: logout.getBoundingClientRect().height, lineHeight: parseFloat(getComputedStyle(logout).lineHeight) || parseFloat(getComputedStyle(logout).fontSize) * 1.4, headerWidth: header.scrollWidth, viewport: innerWidth };
  });
  assert.equal(layout.tops.length, 1, `the links on one line: ${JSON.stringify(layout)}`);
  assert.ok(layout.logoutLines === 1 && layout.logoutHeight < layout.lineHeight * 1.6, `Log out on one line: ${JSON.stringify(layout)}`);
  assert.ok(layout.headerWidth <= layout.viewport, `the header fits the screen: ${JSON.stringify(layout)}`);
  assert.deepEqual([...(await cutOff(page, "#logout")), ...(await cutOff(page, ".top .brand"))], []);
  // the last link, scrolled out of sight, comes into view when the keyboard reaches it
  await page.focus('#nav a[data-view="audit"]');
  assert.deepEqual(await cutOff(page, '#nav a[data-view="audit"]'), []);
  a11y.push(...(await a11yFindings(page, "board at 390 px")));
  await page.close();
});

test("the login page and the board have no accessibility finding", async () => {
  const ctx = await browser.newContext();
  contexts.push(ctx);
  const login = await ctx.newPage();
  await login.goto(url);
  await login.waitForSelector("input[name=token]");
  a11y.push(...(await a11yFindings(login, "login page")));
  const page = await loggedIn(VIEWER, "bob");
  await page.waitForSelector("#board-live.on", { timeout: 15_000 });
  await page.waitForSelector(".board-table .vport .row[data-identity]");
  a11y.push(...(await a11yFindings(page, "board")));
  await page.close();
});

test("axe-core finds nothing on any page (WCAG 2.1 A and AA and its best practices, any impact)", () => {
  assert.deepEqual(a11y, []);
});

test("no page broke the content security policy or threw", () => {
  assert.deepEqual(problems, []);
});

test("the broker refused nothing the console, the CLI, the registry, the provisioner or the fleet asked for (the lab's permissions)", () => {
  assert.deepEqual(lab.violations(), []);
});
