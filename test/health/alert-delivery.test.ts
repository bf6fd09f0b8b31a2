import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parse as parseYaml, stringify as toYaml } from "yaml";
import { authorizationConfig, type BrokerAuthSpec } from "../../src/broker/auth.js";
import { MusterClient } from "../../src/client/client.js";
import { consoleUserData } from "../../src/config/cloud-init.js";
import { AdminNotifier } from "../../src/fleet/admins.js";
import { ensureFleetStores } from "../../src/fleet/stores.js";
import { AlertHistory } from "../../src/health/alert-history.js";
import { HealthAlerts } from "../../src/health/alerter.js";
import { healthReport, type HealthInputs } from "../../src/health/model.js";
import { startNats, type NatsHandle } from "../../src/lab/nats.js";
import { spawnMuster, type MusterProcess } from "../../src/lab/processes.js";
import { startWebhookReceiver, type WebhookReceiver } from "../../src/lab/receivers.js";
import { silentLogger } from "../../src/log.js";
import type { Heartbeat } from "../../src/protocol/heartbeat.js";
import { createSigningKey } from "../../src/security/keys.js";
import { generateSigningKey, type SigningKey } from "../../src/protocol/signing.js";
import { parseAuditLines } from "../../src/security/audit.js";
import { ensureCA, issueCert, type CA, type CertFiles } from "../../src/security/pki.js";
import { cleanEnv, eventually, runCli, tempDir } from "../support/collective.js";
import { docCommandsRunBy, pathWithMuster } from "../support/doc-run.js";
import { startSmtpReceiver, type SmtpReceiver } from "../support/smtp.js";

// The console's alerts reach the admins (issue 36 §3). On the site the console's log said "no
// notifier answered discovery" for every alert while the provisioner's notices arrived: the
// notifier the console machine's user-data renders trusted the provisioners and the operators, not
// the console, so it dropped the console's discovery unanswered. Here: a real nats-server with the
// site's users (the console an admin, the notifier a node with its dedupe bucket), a real `muster
// server` run from the notifier config the console's user-data renders, a real HTTP receiver and a
// real SMTP server; the console's alerter and `muster alerts` as they run on the site.

const tmp = tempDir("alert-delivery");
const NOTIFIER = "console.test";
const collective = "muster";
let nats: NatsHandle;
let ca: CA;
let consoleCert: CertFiles;
let adminCert: CertFiles;
let consoleKey: SigningKey;
let hook: WebhookReceiver;
let smtp: SmtpReceiver;
let notifier: MusterProcess;
let client: MusterClient;
let history: AlertHistory;
const configDir = join(tmp.path, "cli");
let cliEnv: NodeJS.ProcessEnv;

const spec: BrokerAuthSpec = {
  collectives: [collective],
  nodes: [{ identity: NOTIFIER, users: [`CN=${NOTIFIER},OU=node,O=muster`], notifier: true }],
  admins: ["CN=console,OU=service,O=muster", "CN=admin,OU=service,O=muster"],
};

before(async () => {
  ca = ensureCA(join(tmp.path, "ca"));
  const server = issueCert(ca, { name: "nats", subject: "/O=muster/CN=nats", ips: ["127.0.0.1"], dns: ["localhost"], usage: "server" });
  consoleCert = issueCert(ca, { name: "console", subject: "/O=muster/OU=service/CN=console", usage: "client" });
  adminCert = issueCert(ca, { name: "admin", subject: "/O=muster/OU=service/CN=admin", usage: "client" });
  const notifierCert = issueCert(ca, { name: NOTIFIER, subject: `/O=muster/OU=node/CN=${NOTIFIER}`, usage: "client" });
  nats = await startNats({ jetstream: true, tls: { ...server, ca: ca.cert, clients: "map" }, config: `log_file: ${JSON.stringify(join(tmp.path, "nats.log"))}\n${authorizationConfig(spec)}` });
  hook = await startWebhookReceiver();
  smtp = await startSmtpReceiver();

  // the site's keys: the console's (made as docs/deploy.md §7 says), the provisioners', the operator's
  const made = createSigningKey("console", join(tmp.path, "keys"));
  consoleKey = made.key;
  const operator = createSigningKey("admin", join(configDir, "keys")).key;
  // the notifier's server.yaml as the console machine's user-data writes it
  const u = consoleUserData({
    identity: NOTIFIER,
    brokers: ["tls://nats1.example.net:4222"],
    collective,
    caText: "",
    registry: { certText: "", keyText: "" },
    console: { certText: "", keyText: "" },
    notifier: { certText: "", keyText: "" },
    https: { certText: "", keyText: "" },
    registryTokenText: "",
    webTokensText: "",
    signingKeyText: readFileSync(made.file, "utf8"),
    provisionerKey: generateSigningKey("provisioner").key.publicKey,
    trustedKeys: [{ name: "admin", key: operator.publicKey }],
    recipients: [hook.url, "mailto:ops@example.net"],
    replicas: 1,
    source: { debUrl: "https://apt.example.net/muster.deb" },
    sshAuthorizedKeys: [],
  });
  const rendered = parseYaml(u.write_files.find((f) => f.path === "/etc/muster/server.yaml")!.content) as Record<string, unknown>;
  // this machine's broker, TLS files and SMTP server; everything else as rendered (its trusted keys above all)
  const dir = join(tmp.path, "notifier");
  mkdirSync(dir, { recursive: true });
  const cfg = {
    ...rendered,
    brokers: [nats.url],
    tls: { ca: ca.cert, ...notifierCert },
    facts: { facter: false, extra: { role: "notifier" } },
    registration: { interval: 0 },
    plugins: { notify: { ...(rendered.plugins as { notify: object }).notify, timeout: 5, smtp: { host: smtp.host, port: smtp.port } } },
    security: { ...(rendered.security as object), trust_local_user: false },
  };
  writeFileSync(join(dir, "server.yaml"), toYaml(cfg));
  notifier = spawnMuster(["server", "--config", join(dir, "server.yaml")], { logFile: join(dir, "server.log"), env: { MUSTER_CONFIG_DIR: join(dir, "home") } });

  client = await MusterClient.connect({ brokers: [nats.url], collective, tls: { ca: ca.cert, ...consoleCert }, key: consoleKey });
  await ensureFleetStores(client); // as the console does at its start: the audit stream, the alerts' history
  history = await AlertHistory.open(await client.streams());
  await eventually(async () => ((await client.discover({ timeoutMs: 1500, idleMs: 200 })).includes(NOTIFIER) ? true : undefined), 60_000, `${NOTIFIER} answering the console's discovery`).catch((e: Error) => {
    throw new Error(`${e.message}; its log: ${readFileSync(join(dir, "server.log"), "utf8").split("\n").slice(-8).join("\n")}`);
  });
  cliEnv = cleanEnv(configDir, { MUSTER_BROKER: nats.url, MUSTER_CALLER: "admin", MUSTER_TLS_CA: ca.cert, MUSTER_TLS_CERT: adminCert.cert, MUSTER_TLS_KEY: adminCert.key });
});

after(async () => {
  await client?.close();
  await notifier?.stop();
  await hook?.close();
  await smtp?.close();
  await nats?.stop();
  tmp.remove();
});

const T0 = Date.now();
const beat = (identity: string, at: number): HealthInputs => ({ identity, beat: { heartbeat: { identity, time: at, interval: 10, version: "1", phase: "serving", state: "up", status: {} } as Heartbeat, at }, runs: [] });
const report = (inputs: HealthInputs[], now: number) => healthReport(inputs, { unreachableAfterS: 25 }, now);
const subjects = () => hook.received.map((b) => (b as { subject: string }).subject);
const told = (subject: string) => eventually(async () => (subjects().includes(subject) ? true : undefined), 30_000, `the receiver told "${subject}"`);
const events = async () => (await history.book()).view(Date.now(), 500).history;

function alerter(sender: () => AdminNotifier | undefined, hooks: ConstructorParameters<typeof HealthAlerts>[3] = {}) {
  return new HealthAlerts({ unreachableAfterS: 0, puppetFailures: 3 }, sender, silentLogger, { by: "console:test", record: async (e) => void (await history.append(e)), ...hooks });
}

test("the console's alert reaches the admins' receiver and mailbox through the notifier its machine's user-data renders, and so does the recovery; both are kept with who was told", async () => {
  const a = alerter(() => new AdminNotifier(client));
  a.onReport(report([beat("web1.test", T0)], T0 + 30_000));
  await told("muster: web1.test unreachable");
  await smtp.waitFor(1, 30_000);
  assert.equal(smtp.messages[0]!.subject, "muster: web1.test unreachable");
  a.onReport(report([beat("web1.test", T0 + 40_000)], T0 + 41_000));
  await told("muster: web1.test reachable again");
  const h = await eventually(async () => {
    const e = await events();
    return e.some((x) => x.type === "resolved" && x.identity === "web1.test") ? e : undefined;
  }, 10_000, "the recovery in the alerts' history");
  const fired = h.find((x) => x.type === "fired" && x.identity === "web1.test")!;
  assert.deepEqual(fired.told?.sort(), [hook.url, "mailto:ops@example.net"].sort(), "who was told");
  assert.equal(fired.notifier, NOTIFIER);
  assert.equal(h.find((x) => x.type === "resolved")!.alert, fired.alert, "the recovery names the alert it ends");
  assert.ok(readFileSync(join(tmp.path, "nats.log"), "utf8").split("\n").every((l) => !/Violation/.test(l)), "the broker refused the console and the notifier nothing");
});

test("a console whose key the notifier does not trust: nothing is delivered, the failure is kept with why (the trust it lacks), and the last delivery says so", async () => {
  const stranger = await MusterClient.connect({ brokers: [nats.url], collective, tls: { ca: ca.cert, ...consoleCert }, key: generateSigningKey("console").key });
  try {
    const before = hook.received.length;
    const a = alerter(() => new AdminNotifier(stranger));
    a.onReport(report([beat("node05.eu.lab", T0)], T0 + 30_000));
    const failed = await eventually(async () => (await events()).find((x) => x.type === "delivery_failed" && x.identity === "node05.eu.lab"), 20_000, "the failed delivery in the history");
    assert.match(failed.error!, /no notifier answered discovery.*trusts this caller's key \(console\)/);
    assert.equal(failed.of, "fired");
    assert.equal(hook.received.length, before, "nobody was told");
    assert.deepEqual([a.delivery?.ok, a.failed], [false, 1]);
    const book = await history.book();
    assert.equal(book.lastDelivery()?.ok, false, "the notifier's health as the history says it: its last delivery failed");
    assert.deepEqual(book.view(Date.now()).open.filter((x) => x.identity === "node05.eu.lab").map((x) => x.delivery), ["failing"]);
  } finally {
    await stranger.close();
  }
});

test("a silenced node's alert is kept, not sent, and is told once the silence ends while it is still unreachable; alerts held while the view is degraded decide nothing", async () => {
  const book = await history.book();
  const kept = await history.append({ type: "silenced", time: Date.now(), by: "admin", identity: "web3.test", until: Date.now() + 2000, note: "disk swap" });
  book.apply(kept);
  let degraded: string | undefined = "the broker connection is being re-established";
  const a = alerter(() => new AdminNotifier(client), { silenced: (id, now) => book.silenced(id, now), held: () => degraded });
  const down = [beat("web3.test", T0)];
  a.onReport(report(down, T0 + 30_000));
  assert.equal(a.holding, degraded, "held: nothing decided");
  degraded = undefined;
  a.onReport(report(down, T0 + 31_000));
  const held = await eventually(async () => (await events()).find((x) => x.type === "fired" && x.identity === "web3.test"), 10_000, "the silenced alert in the history");
  assert.deepEqual(held.told, []);
  assert.match(held.held!, /silenced until .* by admin \(disk swap\)/);
  assert.ok(!subjects().includes("muster: web3.test unreachable"), "not sent while silenced");
  // the silence ends (its time): the next report tells the admins, the trouble lasting
  await eventually(async () => (book.silenced("web3.test", Date.now()) ? undefined : true), 5000, "the silence's end");
  a.onReport(report(down, T0 + 40_000));
  await told("muster: web3.test unreachable");
});

test("muster alerts: a test alert reaches the admins; ack, silence and unsilence are kept; each action and each refusal is in the audit stream; while deliveries fail it exits 2 and muster health warns", async () => {
  const cli = (...args: string[]) => runCli(["alerts", ...args], { env: cliEnv, timeoutMs: 60_000 });
  // docs/fleet.md's `muster alerts test` and `ack`, as written: through /bin/sh with `muster` on PATH
  const docs = docCommandsRunBy("test/health/alert-delivery.test.ts", { cwd: tmp.path, env: { ...cliEnv, PATH: pathWithMuster(tmp.path, cliEnv.PATH) }, timeoutMs: 60_000 });
  const t = await docs.run("muster alerts test");
  assert.match(t.stdout, new RegExp(`test alert delivered through ${NOTIFIER.replace(".", "\\.")} to .*${hook.url.replace(/[/.:]/g, "\\$&")}`));
  await told("muster: test alert from admin");
  // the open alert of node05.eu.lab (the untrusted console's) is acknowledged by node
  await docs.run('muster alerts ack node05.eu.lab --note "on it"');
  docs.ranAll();
  const none = await cli("ack", "nobody.test");
  assert.equal(none.code, 1);
  assert.match(none.stderr, /nobody\.test has no open alert/);
  assert.equal((await cli("silence", "web9.test", "--for", "90s")).code, 0);
  const bad = await cli("silence", "web9.test", "--for", "forever");
  assert.equal(bad.code, 64, bad.stderr);
  assert.match(bad.stderr, /--for takes a length such as 30m/);
  assert.equal((await cli("unsilence", "web9.test")).code, 0);
  const v = JSON.parse((await cli("--json", "--history", "50")).stdout) as { open: { identity: string; acknowledged: { by: string; note?: string } | null }[]; silences: unknown[]; history: { type: string; by: string }[] };
  assert.deepEqual(v.open.find((x) => x.identity === "node05.eu.lab")?.acknowledged?.by, "admin");
  assert.deepEqual(v.silences, []);
  assert.ok(["test", "acknowledged", "silenced", "unsilenced"].every((type) => v.history.some((e) => e.type === type && e.by === "admin")), JSON.stringify(v.history.map((e) => [e.type, e.by])));
  const audit = parseAuditLines((await (await client.streams()).tail("MUSTER_AUDIT", 200, 5000)) ?? []).filter((e) => e.agent === "cli");
  const rows = audit.map((e) => [e.action, e.caller, e.statuscode === 0]);
  for (const want of [["alerts.test", "admin", true], ["alerts.ack", "admin", true], ["alerts.ack", "admin", false], ["alerts.silence", "admin", true], ["alerts.unsilence", "admin", true]]) assert.ok(rows.some((r) => JSON.stringify(r) === JSON.stringify(want)), `${JSON.stringify(want)} in ${JSON.stringify(rows)}`);
  assert.ok(audit.every((e) => typeof e.data.signature === "string" && e.data.signer === "admin"), "signed by the operator's key");
  // the notifier's own audit: the requests it handled (the console's alerts, the CLI's test)
  const handled = parseAuditLines((await (await client.streams()).tail("MUSTER_AUDIT", 200, 5000)) ?? []).filter((e) => e.identity === NOTIFIER && e.agent === "notify");
  assert.ok(handled.some((e) => e.caller === "console") && handled.some((e) => e.caller === "admin"), JSON.stringify(handled.map((e) => e.caller)));
  // the last delivery failing (the untrusted console's, then a test to a receiver that refuses) is exit 2
  const refusing = await startWebhookReceiver({ status: 500 });
  try {
    const r = await cli("test", "--notify-to", refusing.url);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /test alert not delivered: .*HTTP 500/);
    const s = await cli();
    assert.equal(s.code, 2);
    assert.match(s.stdout, /Delivery: FAILING since .*HTTP 500/);
    // `muster health` says it too: the notifier's health is its last delivery
    const h = await runCli(["health"], { env: cliEnv, timeoutMs: 60_000 });
    assert.match(h.stderr, /warning: alerts are not reaching the admins \(since .*\): .*HTTP 500 Internal Server Error; see `muster alerts`/);
  } finally {
    await refusing.close();
  }
});

test("a notifier that did not answer discovery once (stopped for a moment) is asked for again at the next alert, not a minute later", async () => {
  const sender = new AdminNotifier(client);
  // frozen: it cannot answer the 2 s discovery
  process.kill(notifier.pid, "SIGSTOP");
  try {
    await assert.rejects(sender.send("muster: frozen", "the notifier is stopped", `frozen-${Date.now()}`), /no notifier answered discovery/);
  } finally {
    process.kill(notifier.pid, "SIGCONT");
  }
  await eventually(async () => ((await client.discover({ timeoutMs: 1500, idleMs: 200 })).includes(NOTIFIER) ? true : undefined), 30_000, `${NOTIFIER} answering again`);
  const r = await sender.send("muster: thawed", "the notifier answers again", `thawed-${Date.now()}`);
  assert.equal(r.notifier, NOTIFIER);
  await told("muster: thawed");
});
