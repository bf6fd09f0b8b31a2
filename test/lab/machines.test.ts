import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { MusterClient } from "../../src/client/client.js";
import { labWebToken, startLab, waitForNodes, type Lab, type LabNode } from "../../src/lab/lab.js";
import { decodeMountPath, labLinks, labRoutes, machineExec, machineLeader, publishToRepo } from "../../src/lab/machines/index.js";
import { launchChromium, watchPageProblems } from "../support/browser.js";
import { a11yFindings } from "../support/a11y.js";
import { isAlive, spawnMuster, type MusterProcess } from "../../src/lab/processes.js";
import { emptyFilter } from "../../src/protocol/types.js";
import type { NodeRecord } from "../../src/protocol/provision-record.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { eventually, repoRoot, runCli } from "../support/collective.js";

// Real machines from first boot (issue 19): whole Debian systems booted with systemd-nspawn from
// the lab's cached image, on the lab's own network namespace, seeded through cloud-init with the
// user-data `muster user-data` renders. cloud-init installs the .deb built here and systemd
// starts muster-server.service; the provisioner takes them from there against two real
// puppetservers. What only machines can show, in order:
//   1. first boot to provisioned, with the broker stopped for 30 s while they are provisioning;
//   2. a machine booted later (lab add) loses its power during its bootstrap Puppet run: the
//      provisioner marks it gone within 30 s; powered on again it ends provisioned exactly once,
//      with one certificate;
//   3. a reboot (systemctl reboot inside): the same node comes back, not provisioned again;
//   4. systemctl stop muster-server inside: the fleet sees it go; start: it is back;
//   5. the package upgraded in place from the lab's apt repository (version N+1): identity, keys,
//      certificate and config kept, the daemon restarted once;
//   6. removed as a cloud would (power off, disk deleted) and decommissioned;
//   7. (issue 28) a provisioned machine whose power is cut shows unreachable within 30 s in
//      `muster health`, on the console's landing page and in an alert to the admins; powered on, its
//      recovery shows the same three ways.
// Needs root (namespaces, overlay mounts, nspawn) and the setup's systemd-container, mmdebstrap, socat.

const execFileP = promisify(execFile);
const A = "node01.eu.lab"; // acme development mysql::master
const B = "node02.us.lab"; // acme development web
const C = "node03.eu.lab"; // booted later; its power is cut mid-bootstrap
const VERSION_NEXT = "99.0.0";
const root = process.getuid?.() === 0;

let dir: string;
let lab: Lab;
let client: MusterClient;
let store: ProvisionState;
let provisioner: MusterProcess;
let debNext: Promise<string>;
/** Every accessibility finding on the pages visited (axe-core), whatever its impact. */
const a11y: string[] = [];

const buildDeb = async (out: string, version?: string) => {
  const r = await execFileP(process.execPath, [join(repoRoot, "packaging", "build-deb.mjs"), "--out", out, "--compress", "gzip", ...(version ? ["--version", version] : [])], { maxBuffer: 64 << 20 });
  return r.stdout.trim().split("\n").at(-1)!;
};

before(async () => {
  if (!root) return;
  dir = mkdtempSync(join(tmpdir(), "muster-machines-"));
  process.env.MUSTER_CONFIG_DIR = join(dir, "keys"); // the operator: its key is in the machines' user-data
  const deb = await buildDeb(join(dir, "deb"));
  debNext = buildDeb(join(dir, "deb-next"), VERSION_NEXT); // for the upgrade, while the lab boots
  debNext.catch(() => undefined);
  lab = await startLab({ dir: join(dir, "lab"), nodes: 2, detached: false, provisioner: false, machines: { kind: "nspawn", deb, imageCache: join(repoRoot, ".muster", "images") } });
  // persistent: it rides out the broker outage below, as a daemon would
  client = await MusterClient.connect({ brokers: [lab.state.broker], collective: lab.state.collective, tls: lab.state.tls.admin, persistent: true });
  store = await ProvisionState.open(client, "muster_provision");
});

let labStopped = false;
after(async () => {
  await provisioner?.stop("SIGKILL");
  await client?.close();
  if (!labStopped) await lab?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const node = (id: string): LabNode => {
  const n = lab.state.nodes.find((x) => x.identity === id);
  assert.ok(n?.machine, `lab machine ${id}`);
  return n;
};
const inMachine = (id: string, ...argv: string[]) => {
  const r = machineExec(node(id).machine!.dir, argv);
  assert.equal(r.status, 0, `${argv.join(" ")} in ${id}: ${r.stderr}`);
  return r.stdout;
};
const signedCount = (m: 0 | 1, certname: string) => {
  const inv = join(lab.masters[m]!.cadir, "inventory.txt");
  return existsSync(inv) ? readFileSync(inv, "utf8").split("\n").filter((l) => l.trim().endsWith(`/CN=${certname}`)).length : 0;
};
/** The admins told a node was provisioned (not its health alerts: "muster: <id> unreachable"). */
const notified = (id: string) =>
  existsSync(lab.state.receiver.file)
    ? readFileSync(lab.state.receiver.file, "utf8")
        .trim()
        .split("\n")
        .filter((l) => l && (JSON.parse(l) as { subject: string }).subject.startsWith(`Provisioned ${id} `)).length
    : 0;
const done = (r: NodeRecord) => r.status === "done" || r.status === "failed";
const cli = (args: string[]) => runCli(args, { env: { ...process.env, MUSTER_BROKER: lab.state.broker, MUSTER_TLS_CA: lab.state.tls.ca, MUSTER_TLS_CERT: lab.state.tls.admin.cert, MUSTER_TLS_KEY: lab.state.tls.admin.key } });
const discovered = async (id: string) => (await client.discover({ filter: { ...emptyFilter(), identity: [id] }, timeoutMs: 2000, idleMs: 300 })).includes(id);

test("the machines are whole systems on a network of their own: hostname, address, no route out", { skip: !root && "needs root" }, (t) => {
  const t0 = Date.now();
  const links = labLinks(lab.state.machines!.netns);
  assert.ok(links.includes("mbr0") && links.every((l) => l === "lo" || l === "mbr0" || l.startsWith("vb-")), `only the bridge and the machines' veths: ${links.join(", ")}`);
  assert.ok(!labRoutes(lab.state.machines!.netns).some((r) => r.startsWith("default")), "no default route");
  for (const id of [A, B]) {
    assert.equal(inMachine(id, "cat", "/proc/1/comm").trim(), "systemd", "systemd is PID 1");
    const facts = JSON.parse(inMachine(id, "facter", "--json", "fqdn", "networking.ip")) as Record<string, string>;
    assert.equal(facts.fqdn, id, "facter: its own name");
    assert.equal(facts["networking.ip"], node(id).ipaddress, "facter: its own address");
    assert.match(inMachine(id, "cloud-init", "status", "--wait"), /status: done/); // --wait: cloud-final may still be finishing
    // the seed is root-only, and the directories above it keep the image's modes (the overlay's
    // upper layer would hide them: a /var/lib of 0700 stops dbus and networkd)
    assert.equal(inMachine(id, "stat", "-c", "%a", "/var", "/var/lib", "/var/lib/cloud/seed/nocloud").trim(), "755\n755\n700");
    assert.match(inMachine(id, "systemctl", "is-active", "muster-server.service"), /^active/);
    // the user-data is the renderer's, as docs/deploy.md gives it
    assert.match(readFileSync(join(node(id).machine!.dir, "render.sh"), "utf8"), /^muster user-data .*--apt-repo/ms);
  }
  t.diagnostic(`checked in ${Date.now() - t0} ms`);
});

test("first boot to provisioned against each region's master, with the broker stopped for 30 s meanwhile", { skip: !root && "needs root" }, async (t) => {
  const file = lab.provisionerConfig({ concurrency: 4, per_master_limit: 2, retries: { attempts: 3, backoff: 1, max_backoff: 5 }, sleeptime: 5, shutdown_grace: 5 });
  provisioner = spawnMuster(["provisioner", "--config", file, "--foreground"], { logFile: join(dir, "provisioner.log"), env: lab.state.provisionerEnv });
  // the broker goes away while both are being provisioned, and comes back 30 s later
  await store.waitFor([A, B], (r) => r.status === "in_progress" && r.current !== undefined && r.current !== "lock", 180_000);
  await lab.stopBroker();
  await new Promise((r) => setTimeout(r, 30_000)); // the outage itself, not a wait for anything
  await lab.startBroker();
  await eventually(async () => (await store.list()) && true, 60_000, "the test's own client back on the broker");
  const recs = await store.waitFor([A, B], done, 600_000);
  for (const [id, master] of [
    [A, "puppet-eu.lab"],
    [B, "puppet-us.lab"],
  ] as const) {
    const r = recs.get(id)!;
    assert.equal(r.status, "done", `${id}: ${r.lastError ?? ""}\n${r.log.join("\n")}`);
    assert.equal(r.master, master);
    t.diagnostic(`${id}: power on to provisioned ${((r.finishedAt! - node(id).machine!.poweredOnAt) / 1000).toFixed(1)} s`);
  }
  assert.equal(signedCount(0, A), 1);
  assert.equal(signedCount(1, B), 1);
  // the machine's own Puppet ran both stages with the system's real /etc/puppet and facts.d
  assert.match(inMachine(B, "cat", "/etc/facter/facts.d/muster_lifecycle_stage.yaml"), /lifecycle_stage: "?production/);
  assert.match(inMachine(A, "cat", "/etc/motd"), /node01\.eu\.lab is managed by Puppet \(country de, stage production\)[\s\S]*MySQL master/);
  // a role's user and the systemd service Puppet installs and keeps running
  assert.match(inMachine(B, "id", "webapp"), /webapp/);
  assert.match(inMachine(B, "systemctl", "is-active", "webapp.service"), /^active/);
  assert.match(inMachine(A, "systemctl", "is-active", "labdb.service"), /^active/);
});

test("seed 004 against machines: search_nodes, runall, nrpe with the real plugins, resource, ssh into sshd", { skip: !root && "needs root" }, async () => {
  // provisioned nodes leave the provisioning collective and come back to the fleet on their Puppet
  // certificates, with the classes of their production run: wait until both answer there
  for (const [id, cls] of [
    [A, "mysql::master"],
    [B, "role::web"],
  ] as const) {
    await eventually(async () => ((await client.discover({ filter: { ...emptyFilter(), class: [cls] }, timeoutMs: 2000, idleMs: 300 })).includes(id) ? true : undefined), 60_000, `${id} answering -C ${cls} in the fleet`);
  }
  // a service stopped behind Puppet's back is running again after the next run
  inMachine(B, "systemctl", "stop", "webapp.service");
  const runall = await cli(["puppet", "runall", "2", "-C", "role::web"]);
  assert.equal(runall.code, 0, runall.stderr);
  assert.match(inMachine(B, "systemctl", "is-active", "webapp.service"), /^active/);
  assert.match(inMachine(B, "cat", "/etc/webapp/webapp.conf"), /database_host = node01\.eu\.lab/, "web found its database master with search_nodes");
  const find = await cli(["find", "-W", "environment=development customer=acme mysql::master"]);
  assert.equal(find.stdout.trim(), A);
  const nrpe = await cli(["nrpe", "check_load", "-W", "environment=development customer=acme mysql::master"]);
  assert.equal(nrpe.code, 0, nrpe.stdout + nrpe.stderr);
  assert.match(nrpe.stdout, /^check_load: OK: 1 WARNING: 0 CRITICAL: 0 UNKNOWN: 0/);
  const res = await cli(["resource", "file", "/srv/muster-lab/files/hello", "ensure=file", "content=hi", "-W", "customer=acme mysql::master"]);
  assert.equal(res.code, 0, res.stdout + res.stderr);
  assert.equal(inMachine(A, "cat", "/srv/muster-lab/files/hello"), "hi");
  const ssh = await cli(["ssh", "--ssh-command", `ssh -F ${lab.state.machines!.ssh.config} -o BatchMode=yes`, "-W", "customer=acme mysql::master", "--", "hostname", "-f"]);
  assert.equal(ssh.code, 0, ssh.stderr);
  assert.equal(ssh.stdout.trim(), A, "ssh reached the machine's own sshd");
});

test("a provisioned machine's power is cut: unreachable within 30 s in muster health, on the console's landing page and in an alert to the admins; powered on, back the same three ways", { skip: !root && "needs root" }, async (t) => {
  const health = async (id: string) => {
    const r = await cli(["health", "--json", "-I", id]);
    const node = (JSON.parse(r.stdout || "{}") as { nodes?: { identity: string; reachable: boolean; problems: { kind: string; why: string }[] }[] }).nodes?.find((n) => n.identity === id);
    return { code: r.code, node };
  };
  const alerts = (id: string, what: RegExp) =>
    existsSync(lab.state.receiver.file)
      ? readFileSync(lab.state.receiver.file, "utf8")
          .trim()
          .split("\n")
          .filter((l) => l && what.test((JSON.parse(l) as { subject: string }).subject) && (JSON.parse(l) as { subject: string }).subject.includes(id)).length
      : 0;
  // B is provisioned and heard from: healthy (its Puppet ran during provisioning)
  await eventually(async () => ((await health(B)).node?.reachable ? true : undefined), 60_000, `${B} reachable in muster health`);
  const web = lab.state.web!;
  // the audit: the CLI's runall above reached B, and B's record of it is on the console's audit page
  const audit = await eventually(
    async () => {
      const res = await fetch(new URL("api/audit?action=puppet.runonce", web.url), { headers: { authorization: `Bearer ${labWebToken(web.tokens_file, "operator")}` } });
      const body = (await res.json()) as { rows: { target: string; source: string; ok: boolean }[]; sources: { name: string; ok: boolean }[] };
      return body.rows.some((r) => r.target === B && r.source === "node") ? body : undefined;
    },
    30_000,
    `${B}'s audit record of the CLI's puppet runonce in the console`,
  );
  assert.ok(audit.sources.every((x) => x.ok), JSON.stringify(audit.sources));
  const browser = await launchChromium();
  const problems: string[] = [];
  let poweredOff = false;
  try {
    const page = await (await browser.newContext({ viewport: { width: 1400, height: 1000 } })).newPage();
    watchPageProblems(page, problems);
    await page.goto(web.url);
    await page.fill("input[name=token]", labWebToken(web.tokens_file, "viewer")!);
    await Promise.all([page.waitForURL(`${web.url}**`), page.click("button[type=submit]")]);
    await page.waitForSelector("section.health-page", { timeout: 30_000 }); // the landing page
    const item = `.health-kind[data-kind="unreachable"] li[data-identity="${B}"]`;
    assert.equal(await page.locator(item).count(), 0);

    // alerts about B before this cut (a machine of a busy lab may have been told about once already)
    const toldBefore = { gone: alerts(B, /unreachable/), back: alerts(B, /reachable again/) };
    const cutAt = Date.now();
    await lab.stopServer(B, "SIGKILL"); // the power cut: no last heartbeat, no shutdown event
    poweredOff = true;
    const within = 30_000 - (Date.now() - cutAt);
    const [onPage, inCli, alerted] = await Promise.all([
      page.waitForSelector(item, { timeout: within }).then(() => Date.now() - cutAt),
      eventually(async () => ((await health(B)).code === 2 && (await health(B)).node?.problems[0]?.kind === "unreachable" ? Date.now() - cutAt : undefined), within, `${B} unreachable in muster health`),
      eventually(async () => (alerts(B, /unreachable/) > toldBefore.gone ? Date.now() - cutAt : undefined), within, `the admins told ${B} is unreachable`),
    ]);
    t.diagnostic(`power cut to unreachable: console ${onPage} ms, muster health ${inCli} ms, alert ${alerted} ms`);
    assert.match((await page.locator(item).textContent()) ?? "", /no heartbeat for \d+ s/);
    assert.match(await page.title(), /^\(\d+\) Health · muster$/);
    a11y.push(...(await a11yFindings(page, "the lab's health page with a machine unreachable")));
    assert.equal(alerts(B, /unreachable/), toldBefore.gone + 1, "told once");

    const onAt = Date.now();
    lab.startServer(B); // power on, same disk: it comes back provisioned and sends heartbeats again
    poweredOff = false;
    const [pageBack, cliBack, alertBack] = await Promise.all([
      page.waitForSelector(item, { state: "detached", timeout: 180_000 }).then(() => Date.now() - onAt),
      eventually(async () => ((await health(B)).node?.reachable ? Date.now() - onAt : undefined), 180_000, `${B} reachable again in muster health`),
      eventually(async () => (alerts(B, /reachable again/) > toldBefore.back ? Date.now() - onAt : undefined), 180_000, `the admins told ${B} is reachable again`),
    ]);
    t.diagnostic(`power on to reachable: console ${pageBack} ms, muster health ${cliBack} ms, alert ${alertBack} ms (the machine boots first)`);
    await waitForNodes(lab.state, [B], 120_000); // answering in the fleet, for the tests after this one
  } finally {
    await browser.close();
    if (poweredOff) lab.startServer(B); // whatever happened, the tests after this one need it
  }
  assert.deepEqual(problems, [], "no page broke the CSP or threw");
});

test("a machine loses its power during the bootstrap Puppet run: gone within 30 s; powered on, provisioned once, one certificate", { skip: !root && "needs root" }, async () => {
  const [added] = await lab.addNodes({ count: 1, country: "de" });
  assert.equal(added?.identity, C);
  await store.waitFor([C], (r) => r.current === "bootstrap", 300_000);
  // the Puppet run is under way in the machine (not merely asked for)
  await eventually(async () => (machineExec(node(C).machine!.dir, ["pgrep", "-f", "puppet agent"]).status === 0 ? true : undefined), 60_000, "puppet agent running in the machine");
  const cutAt = Date.now();
  await lab.stopServer(C, "SIGKILL"); // the power cut
  const gone = (await store.waitFor([C], (r) => r.gone !== undefined, 30_000)).get(C)!;
  assert.ok(gone.gone!.since - cutAt < 30_000, `marked gone ${gone.gone!.since - cutAt} ms after the power cut`);
  assert.notEqual(gone.status, "done");
  lab.startServer(C); // power on: same disk
  const r = (await store.waitFor([C], (x) => x.status === "done" || x.status === "failed", 600_000)).get(C)!;
  assert.equal(r.status, "done", `${r.lastError ?? ""}\n${r.log.join("\n")}`);
  assert.equal(r.gone, undefined, "no longer gone");
  assert.equal(signedCount(0, C), 1, "no certificate signed twice");
  await eventually(async () => (notified(C) >= 1 ? true : undefined), 30_000, "the admins told");
  assert.equal(notified(C), 1, "provisioned exactly once: the admins told once");
});

test("reboot: the same node comes back with its certificate, classes and facts, and is not provisioned again", { skip: !root && "needs root" }, async (t) => {
  const before = (await store.get(A))!;
  const cert = inMachine(A, "sha256sum", `/var/lib/puppet/ssl/certs/${A}.pem`);
  const dir = node(A).machine!.dir;
  const boots = () => readFileSync(join(dir, "boots.jsonl"), "utf8").trim().split("\n").length;
  const n = boots();
  const t0 = Date.now();
  const asked = machineExec(dir, ["systemctl", "reboot"]);
  assert.equal(asked.status, 0, `systemctl reboot in ${A}: ${asked.stderr}`);
  // The new boot starts within a second, and this whole test takes 8-18 s; once no boot came in
  // 120 s while the site test booted its masters beside it, and nothing said why. The deadline is the site's own for a reboot (180 s, then some
  // for the load); a miss names what the machine's console said (systemd's stop jobs, how nspawn ended).
  await eventually(async () => (boots() > n ? true : undefined), 300_000, "the machine booting again").catch((e: unknown) => {
    const console = readFileSync(join(dir, "console.log"), "utf8").split("\n").slice(-40).join("\n");
    throw new Error(`${(e as Error).message}; the end of ${A}'s console.log:\n${console}`);
  });
  t.diagnostic(`systemctl reboot to booting again: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  await waitForNodes(lab.state, [A], 120_000);
  assert.equal(inMachine(A, "sha256sum", `/var/lib/puppet/ssl/certs/${A}.pem`), cert, "its certificate");
  const inv = await client.call("rpcutil", "inventory", {}, { nodes: [A], timeoutMs: 30_000 });
  const data = inv.replies[0]?.data as { classes: string[]; facts: Record<string, unknown> };
  assert.ok(data.classes.includes("mysql::master"), `classes: ${data.classes.join(", ")}`);
  assert.equal(data.facts.country, "de");
  const after = (await store.get(A))!;
  assert.equal(after.record.status, "done");
  assert.equal(after.record.rounds, before.record.rounds, "not provisioned again");
  assert.equal(after.record.finishedAt, before.record.finishedAt);
  assert.equal(signedCount(0, A), 1);
});

test("systemctl stop muster-server inside a machine: the fleet sees it go; start: it is back", { skip: !root && "needs root" }, async () => {
  inMachine(B, "systemctl", "stop", "muster-server.service");
  await eventually(async () => ((await discovered(B)) ? undefined : true), 30_000, `${B} gone from discovery`);
  inMachine(B, "systemctl", "start", "muster-server.service");
  await eventually(async () => ((await discovered(B)) ? true : undefined), 60_000, `${B} back in discovery`);
});

test("the package upgraded in place (N+1) from the lab's apt repository: identity, keys, certificate and config kept, answering again within seconds", { skip: !root && "needs root" }, async (t) => {
  const deb = await debNext;
  const sums = () => inMachine(A, "sh", "-c", `sha256sum /etc/muster/server.yaml /var/lib/puppet/ssl/certs/${A}.pem /var/lib/muster/server/nodes/*.key`);
  const before = sums();
  const key = (await client.call("rpcutil", "ping", {}, { nodes: [A], timeoutMs: 10_000 })).replies[0];
  assert.ok(key, `${A} answers before the upgrade`);
  const restarts = () => Number(inMachine(A, "systemctl", "show", "-p", "NRestarts", "--value", "muster-server.service").trim());
  const started = () => inMachine(A, "systemctl", "show", "-p", "ExecMainStartTimestampMonotonic", "--value", "muster-server.service").trim();
  const [restartsBefore, startedBefore] = [restarts(), started()];
  // the operator publishes N+1 (muster lab publish); the machine upgrades as any apt user would
  await publishToRepo(join(lab.state.machines!.packages.dir, "apt"), lab.state.machines!.packages.gnupgHome, deb);
  const t0 = Date.now();
  inMachine(A, "sh", "-c", "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --only-upgrade -o Dpkg::Options::=--force-confold muster");
  assert.match(inMachine(A, "dpkg-query", "-W", "-f", "${Version}", "muster"), new RegExp(`^${VERSION_NEXT.replace(/\./g, "\\.")}$`));
  await eventually(async () => {
    const r = await client.call("rpcutil", "daemon_stats", {}, { nodes: [A], timeoutMs: 3000 });
    return (r.replies[0]?.data as { version?: string } | undefined)?.version === VERSION_NEXT ? true : undefined;
  }, 60_000, "the upgraded daemon answering");
  t.diagnostic(`answering as ${VERSION_NEXT} ${((Date.now() - t0) / 1000).toFixed(1)} s after apt-get began`);
  assert.equal(sums(), before, "config, certificate and node key unchanged");
  assert.notEqual(started(), startedBefore, "the daemon was restarted into the new version");
  assert.equal(restarts(), restartsBefore, "once, by the upgrade: not by systemd after a crash");
  const after = await client.call("rpcutil", "ping", {}, { nodes: [A], timeoutMs: 10_000 });
  assert.equal(after.replies[0]?.sender, key.sender, "the same identity");
  assert.equal(after.stats.verified, 1, "its reply verifies against the key the directory holds: the node key was kept");
});

test("removed as a cloud would (power off, disk deleted), then decommissioned: certificate revoked, records dropped", { skip: !root && "needs root" }, async () => {
  const removed = await lab.removeNode(C);
  assert.ok(!existsSync(removed.machine!.dir), "its disk is gone");
  const dec = await cli(["decommission", "--wait", C]);
  assert.equal(dec.code, 0, dec.stdout + dec.stderr);
  assert.equal(await store.get(C), undefined, "its provisioning record is dropped");
});

test("the lab's pages had no accessibility finding (axe: WCAG A and AA, best practices)", { skip: !root && "needs root" }, () => {
  assert.deepEqual(a11y, []);
});

test("the lab stops and leaves nothing: no machine on, nothing mounted, no network namespace, no relay", { skip: !root && "needs root" }, async () => {
  const labDir = join(dir, "lab");
  const ms = lab.state.machines!;
  const remembered = readFileSync(join(labDir, "pids.jsonl"), "utf8").trim().split("\n").map((l) => (JSON.parse(l) as { pid: number }).pid);
  assert.ok(remembered.length >= lab.state.nodes.length, "every process the lab started was remembered as it started");
  await provisioner?.stop();
  await client.close();
  labStopped = true;
  await lab.stop();
  const mounts = readFileSync("/proc/self/mountinfo", "utf8").split("\n").map((l) => decodeMountPath(l.split(" ")[4] ?? ""));
  assert.deepEqual(mounts.filter((m) => m.startsWith(`${labDir}/`)), [], "no machine root left mounted");
  for (const n of lab.state.nodes) if (n.machine) assert.equal(machineLeader(n.machine.dir), undefined, `${n.identity} is off`);
  assert.deepEqual(remembered.filter((pid) => isAlive(pid)), [], "no process of the lab runs (supervisors, relays, servers)");
  assert.ok(!existsSync(`/run/netns/${ms.netns}`), "its network namespace is gone");
  assert.ok(!existsSync(ms.socketDir), "its relays' sockets are gone");
});
