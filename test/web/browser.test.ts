import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
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
import { newRecord, StateStore } from "../../src/provisioner/state.js";
import { launchChromium, watchPageProblems } from "../support/browser.js";
import { runCli, spawnMuster, tempDir, type MusterProcess } from "../support/collective.js";
import { writeSimulatedProvisionerConfig } from "../support/provisioner.js";
import { waitRegistered } from "../support/registry.js";
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
const ca = new SimulatedCA();

let nc: NatsConnection;
let emu: RunningEmulator;
let puppetEmu: RunningEmulator;
let store: StateStore;
let registry: MusterProcess;
let web: MusterProcess;
let provisioner: MusterProcess | undefined;
let browser: Browser;
let url = "";
let registryUrl = "";
const contexts: BrowserContext[] = [];
const problems: string[] = [];

before(async () => {
  lab = await startLabBroker({ dir: tmp.path, nodes: [...fleet, ...managedFleet].map((n) => n.identity) });
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
    // Puppet runs of about a second: each node is visibly in progress before it is done.
    factories: simulatedFactories(ca, { puppetRunMs: [500, 1500], csrMs: 5, fail: (id) => failing.has(id) }),
  });
  const sim = new SimulatedPuppetFleet({ runMs: () => 300 });
  puppetEmu = await startEmulator({ nc: await lab.connect("emulator", "emulator-managed"), nodes: managedFleet, collective: "muster", log: silentLogger, registration: { interval: 1, splay: false }, factories: { ...coreAgentFactories, puppet: sim.factory } });
  await waitRegistered(nc, [...fleet, ...managedFleet].map((n) => n.identity));
  store = await StateStore.open(nc, "muster_provision");

  const tokens = join(tmp.path, "tokens");
  writeFileSync(tokens, `# token role name\n${OPERATOR} operator alice\n${VIEWER} viewer bob\n`, { mode: 0o600 });
  const webCfg = join(tmp.path, "web.yaml");
  writeFileSync(webCfg, toYaml({ listen: "127.0.0.1:0", auth: { tokens_file: tokens }, registry: { url: registryUrl }, audit: { file: join(tmp.path, "audit.jsonl") } }));
  web = spawnMuster(["web", "--config", webCfg, "--broker", lab.url], { env: env("admin") });
  const readyLine = await web.waitForLine(/ready/, 20_000);
  url = /(https?:\/\/[0-9.]+:\d+)/.exec(readyLine)![1]!;
  browser = await launchChromium();
});

after(async () => {
  await browser?.close().catch(() => undefined);
  await provisioner?.stop();
  await web?.stop();
  await registry?.stop();
  await emu?.stop();
  await puppetEmu?.stop();
  await nc?.drain().catch(() => undefined);
  await lab?.stop();
  tmp.remove();
});

/** A page logged in with the token through the login form, as a person would. */
async function loggedIn(token: string, name: string): Promise<Page> {
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  contexts.push(ctx);
  const page = await ctx.newPage();
  watchPageProblems(page, problems);
  await page.goto(url);
  await page.fill("input[name=token]", token);
  await Promise.all([page.waitForURL(`${url}/**`), page.click("button[type=submit]")]);
  await page.waitForFunction((n) => document.getElementById("who")?.textContent?.includes(n), name, { timeout: 15_000 });
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

test("the board shows nodes moving to done without a reload, the failed node first with its log tail", async () => {
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

  // Failed first: in the table and as a card with its error and log tail.
  assert.equal(await page.locator(".board-table .vport .row").first().getAttribute("data-identity"), broken);
  const card = page.locator(`.failed-card[data-identity="${broken}"]`);
  assert.match((await card.locator(".err").textContent()) ?? "", /bootstrap/);
  assert.ok(((await card.locator(".logtail").textContent()) ?? "").trim().length > 0, "the log tail is shown");
  assert.match((await page.locator("#board-summary").textContent()) ?? "", /9 done, 0 in progress, 0 pending, 1 failed/);
  // Each done node has a timeline with its stages.
  assert.ok((await page.locator(`${rowSel(done[0]!)} .timeline .seg`).count()) >= 3, "stages in the timeline");
  // The find box narrows the table: by part of a name, or by status.
  await page.fill("#board-find", "web0");
  await page.waitForFunction(() => document.querySelectorAll(".board-table .vport .row[data-identity]").length === 10);
  await page.fill("#board-find", "failed");
  await page.waitForFunction(() => document.querySelectorAll(".board-table .vport .row[data-identity]").length === 1);
  assert.equal(await page.locator(".board-table .vport .row[data-identity]").getAttribute("data-identity"), broken);
  await page.fill("#board-find", "");
  await page.close();
});

test("retry is refused to a viewer and works for an operator", async () => {
  const viewer = await loggedIn(VIEWER, "bob");
  const vcard = viewer.locator(`.failed-card[data-identity="${broken}"]`);
  await vcard.waitFor({ timeout: 15_000 });
  await vcard.locator("button.retry").click();
  await viewer.waitForSelector(`.failed-card[data-identity="${broken}"] .retry-result.error`, { timeout: 10_000 });
  assert.match((await vcard.locator(".retry-result").textContent()) ?? "", /refused/);
  assert.equal((await store.get(broken))!.record.status, "failed", "nothing was retried");

  failing.delete(broken);
  const op = await loggedIn(OPERATOR, "alice");
  const ocard = op.locator(`.failed-card[data-identity="${broken}"]`);
  await ocard.waitFor({ timeout: 15_000 });
  await ocard.locator("button.retry").click();
  // The operator's retry provisions the node again; both boards follow without a reload.
  await op.waitForSelector(rowSel(broken, "done"), { timeout: 60_000 });
  await viewer.waitForSelector(rowSel(broken, "done"), { timeout: 10_000 });
  assert.equal(await op.locator(".failed-card").count(), 0, "no failed nodes left");
  assert.equal((await store.get(broken))!.record.rounds, 2);
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

  // A node's page from the explorer: its facts and its provisioning.
  await page.fill("#filter", "");
  await page.click("#explorer-form button[type=submit]");
  await page.click(`.explorer-table .row[data-identity="${waiting[1]}"] a`);
  await page.waitForSelector(`section.node[data-identity="${waiting[1]}"]`, { timeout: 10_000 });
  assert.match((await page.locator("table.facts").textContent()) ?? "", /country\s*de/);
  assert.match((await page.locator("section.node .badge").first().textContent()) ?? "", /done/);
  await page.close();
});

test("runall: an operator starts a Puppet run from the page and watches it finish; a viewer is refused", async () => {
  const viewer = await loggedIn(VIEWER, "bob");
  await viewer.goto(`${url}/#/runall`);
  await viewer.fill("#runall-form input[name=filter]", "role=app");
  await viewer.click("#runall-form button[type=submit]");
  await viewer.waitForSelector("#runall-message.error", { timeout: 10_000 });
  assert.match((await viewer.locator("#runall-message").textContent()) ?? "", /refused/);

  const op = await loggedIn(OPERATOR, "alice");
  await op.goto(`${url}/#/runall`);
  await op.fill("#runall-form input[name=filter]", "role=app");
  await op.fill("#runall-form input[name=concurrency]", "2");
  await op.click("#runall-form button[type=submit]");
  await op.waitForSelector("#runall-message.ok", { timeout: 10_000 });
  const id = /started run (\S+)/.exec((await op.locator("#runall-message").textContent()) ?? "")![1]!;
  // Both pages follow the run live: slots while it goes, then finished with every node done.
  await op.waitForSelector(`.run-card[data-run="${id}"][data-state="finished"]`, { timeout: 30_000 });
  await viewer.waitForSelector(`.run-card[data-run="${id}"][data-state="finished"]`, { timeout: 10_000 });
  assert.match((await op.locator(`.run-card[data-run="${id}"]`).textContent()) ?? "", /5 done, 0 failed, 0 to go of 5/);
  assert.match((await op.locator(`.run-card[data-run="${id}"]`).textContent()) ?? "", /started by alice/);
  await viewer.close();
  await op.close();
});

test("runall from the CLI (the lab's admin credential) shows on the Puppet runs page", async () => {
  const page = await loggedIn(VIEWER, "bob");
  await page.goto(`${url}/#/runall`);
  const cli = await runCli(["puppet", "runall", "2", "-F", "role=app", "--broker", lab.url], { env: env("admin"), timeoutMs: 60_000 });
  assert.equal(cli.code, 0, cli.stderr + cli.stdout);
  await page.waitForFunction(() => [...document.querySelectorAll(".run-card[data-state=finished]")].some((c) => /role=app/.test(c.textContent ?? "") && /5 done, 0 failed/.test(c.textContent ?? "") && !/alice/.test(c.textContent ?? "")), undefined, { timeout: 30_000 });
  await page.close();
});

test("the page says when the registry is down, and recovers by itself when it is back", async () => {
  const page = await loggedIn(VIEWER, "bob");
  await page.waitForSelector("#board-live.on", { timeout: 15_000 });
  assert.equal(await page.locator("#health").isHidden(), true, "no banner while all is well");
  await page.evaluate(() => ((window as unknown as { marker: number }).marker = 7));
  const regCfg = join(tmp.path, "registry.yaml");
  await registry.stop();
  await page.waitForSelector("#health:not([hidden])", { timeout: 20_000 });
  assert.match((await page.locator("#health").textContent()) ?? "", /registry/i);
  // The same port again (the console's registry.url): the registry's config names port 0, so
  // restart it on the port it had.
  const port = Number(/:(\d+)$/.exec(registryUrl)![1]);
  writeFileSync(regCfg, toYaml({ broker: lab.url, collectives: ["muster"], http: { host: "127.0.0.1", port }, log: { level: "warn" } }));
  registry = spawnMuster(["registry", "serve", "--config", regCfg], { env: env("registry") });
  await registry.waitForLine(/ready/, 20_000);
  await page.waitForSelector("#health[hidden]", { state: "attached", timeout: 30_000 });
  assert.equal(await page.evaluate(() => (window as unknown as { marker?: number }).marker), 7, "recovered without a reload");
  await page.close();
});

test("the page says when the broker is down, and comes back live by itself when it is back", async () => {
  const page = await loggedIn(VIEWER, "bob");
  await page.waitForSelector("#board-live.on", { timeout: 15_000 });
  await page.evaluate(() => ((window as unknown as { marker: number }).marker = 9));
  await lab.stop();
  await page.waitForSelector("#health:not([hidden])", { timeout: 30_000 });
  assert.match((await page.locator("#health").textContent()) ?? "", /broker/i);
  // The same port and store: every client, the console's included, reconnects by itself.
  await lab.start();
  await page.waitForSelector("#health[hidden]", { state: "attached", timeout: 60_000 });
  // Live again: a record written now reaches the open board.
  const id = "late.test";
  const nc2 = await lab.connect("admin", "late-writer");
  try {
    const st = await StateStore.open(nc2, "muster_provision");
    const rec = { ...newRecord(id), status: "failed" as const, lastError: "written after the broker came back", startedAt: Date.now() };
    assert.ok(await st.save({ record: rec, revision: 0 }));
    await page.waitForSelector(`.failed-card[data-identity="${id}"]`, { timeout: 30_000 });
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

test("no page broke the content security policy or threw", () => {
  assert.deepEqual(problems, []);
});

test("the broker refused nothing the console, the CLI, the registry, the provisioner or the fleet asked for (the lab's permissions)", () => {
  assert.deepEqual(lab.violations(), []);
});
