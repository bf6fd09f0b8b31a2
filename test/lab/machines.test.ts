import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { MusterClient } from "../../src/client/client.js";
import { labWebToken, readLabState, stopLabFromState, stopLabRemains, type LabState } from "../../src/lab/lab.js";
import { decodeMountPath, labLinks, labRoutes, machineExec, machineLeader, unmountUnder } from "../../src/lab/machines/index.js";
import { waitForPort } from "../../src/lab/nats.js";
import { cmdlineOf, isAlive } from "../../src/lab/processes.js";
import { emptyFilter } from "../../src/protocol/types.js";
import { ProvisionState } from "../../src/provisioner/state.js";
import { launchChromium, watchPageProblems } from "../support/browser.js";
import { a11yFindings } from "../support/a11y.js";
import { eventually, repoRoot } from "../support/collective.js";
import { docCommandsRunBy, runShell, type Ran } from "../support/doc-run.js";

// The README's main job, as the README runs it (issue 19, issue 37): `./scripts/lab.sh` in a copy of
// the checkout (every entry a link to this one's, its own .muster with the shared image cache), then
// the README's and the docs' lab commands through the CLI, as written, with their real exit codes
// and output (test/support/doc-run.ts RUN_ELSEWHERE lists them; the last test fails unless every one
// ran). The lab's nodes are whole Debian systems booted with systemd-nspawn from the lab's cached
// image, on the lab's own network namespace, seeded through cloud-init with the user-data
// `muster user-data` renders; cloud-init installs the .deb `lab up` builds, systemd starts
// muster-server, and the lab's provisioner takes them from there against two real puppetservers.
// What only machines can show, in order:
//   1. ./scripts/lab.sh: setup (dist/ up to date: nothing rebuilt under the suite), four machines
//      from first boot to provisioned against their region's master;
//   2. the README's commands against it, seed 004 included (search_nodes, runall, nrpe with the
//      real plugins, resource, ssh into sshd);
//   3. a provisioned machine's power cut (`lab power cut`): unreachable in `muster health`, on the
//      console's landing page and in an alert to the admins; powered on, back the same three ways;
//   4. `lab add --machines 2`; `lab remove` and `decommission --wait`: its certificate revoked (its
//      serial on the master's CRL), its records dropped;
//   5. the machine coming back under that name (`lab add --identity`) loses its power during its
//      bootstrap Puppet run: the provisioner marks it gone; powered on, it resumes, and the broker
//      is stopped for 30 s meanwhile: provisioned once, one certificate, the admins told once;
//   6. a reboot: the same node comes back, not provisioned again;
//   7. systemctl stop muster-server inside: the fleet sees it go; start: it is back;
//   8. the package upgraded in place from the lab's apt repository (version N+1): identity, keys,
//      certificate and config kept, the daemon restarted once;
//   9. `lab down`: nothing left.
// Every wait is a deadline that only catches a hang; how long things take is printed here and
// measured in bench/machines.ts (docs/bench.md, Real machines).
// Needs root (namespaces, overlay mounts, nspawn) and the setup's systemd-container, mmdebstrap, socat.

const execFileP = promisify(execFile);
const A = "node01.eu.lab"; // acme development mysql::master
const B = "node02.us.lab"; // acme development web
const C = "node05.eu.lab"; // booted by `lab add`, removed, decommissioned, and back under its name
const EU = "puppet-eu.lab";
const VERSION_NEXT = "99.0.0";
const root = process.getuid?.() === 0;
const skip = !root && "needs root: network namespaces, overlay mounts and systemd-nspawn (CI runs as root)";

const view = mkdtempSync(join(tmpdir(), "muster-machines-"));
const labDir = join(view, ".muster", "lab");
const bin = join(view, ".bin");
const env: NodeJS.ProcessEnv = {
  ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("MUSTER_") && k !== "XDG_CONFIG_HOME")),
  PATH: `${bin}:${process.env.PATH ?? ""}`,
  MUSTER_CONFIG_DIR: join(view, ".keys"), // the operator's key: its public half goes into the machines' user-data
  XDG_CACHE_HOME: join(view, ".cache"),
  NO_COLOR: "1",
};
// this process's own client (discovery, the records) signs as the same operator: the machines
// trust that key only, so a client with another key of the same name is refused by every node
process.env.MUSTER_CONFIG_DIR = env.MUSTER_CONFIG_DIR;
const docs = docCommandsRunBy("test/lab/machines.test.ts", { cwd: view, env, timeoutMs: 600_000 });
/** A command of the CLI that is not a doc's (its exit code is the caller's to check). */
const sh = (command: string, timeoutMs = 180_000) => runShell(command, { cwd: view, env, timeoutMs });
const ok = (r: Ran, what: string) => assert.equal(r.code, 0, `${what}: exit ${r.code ?? r.signal}\n${r.stdout}${r.stderr}`);

let client: MusterClient | undefined;
let store: ProvisionState;
let debNext: Promise<string>;
/** Brokers the test started in the lab's place (the outage): stopped with the lab, checked gone. */
// with each one's command line: pids come round again in a suite (pid_max 32768), and one taken since by another process is not ours
const brokerPids: { pid: number; cmd: string }[] = [];
const stillRuns = (r: { pid: number; cmd: string }) => isAlive(r.pid) && cmdlineOf(r.pid) === r.cmd;
/** Every accessibility finding on the pages visited (axe-core), whatever its impact. */
const a11y: string[] = [];

const state = (): LabState => {
  const s = readLabState(labDir);
  assert.ok(s, `no lab state in ${labDir}`);
  return s;
};
const machineDir = (id: string) => {
  const m = state().nodes.find((x) => x.identity === id)?.machine;
  assert.ok(m, `lab machine ${id}`);
  return m.dir;
};
const inMachine = (id: string, ...argv: string[]) => {
  const r = machineExec(machineDir(id), argv);
  assert.equal(r.status, 0, `${argv.join(" ")} in ${id}: ${r.stderr}`);
  return r.stdout;
};
const masterDir = (identity: string) => state().masters.find((m) => m.identity === identity)!.dir;
const signedCount = (master: string, certname: string) => {
  const inv = join(masterDir(master), "ca", "inventory.txt");
  return existsSync(inv) ? readFileSync(inv, "utf8").split("\n").filter((l) => l.trim().endsWith(`/CN=${certname}`)).length : 0;
};
const received = () =>
  existsSync(state().receiver.file)
    ? readFileSync(state().receiver.file, "utf8")
        .trim()
        .split("\n")
        .filter(Boolean)
        .map((l) => (JSON.parse(l) as { subject: string }).subject)
    : [];
/** The admins told a node was provisioned (not its health alerts: "muster: <id> unreachable"). */
const notified = (id: string) => received().filter((s) => s.startsWith(`Provisioned ${id} `)).length;
const discovered = async (id: string) => (await client!.discover({ filter: { ...emptyFilter(), identity: [id] }, timeoutMs: 2000, idleMs: 300 })).includes(id);

/** A copy of the checkout that is links to this one's entries, with a .muster of its own (its lab, its client config). */
function checkoutView(): void {
  for (const name of readdirSync(repoRoot)) if (name !== ".git" && name !== ".muster") symlinkSync(join(repoRoot, name), join(view, name));
  mkdirSync(join(repoRoot, ".muster", "images"), { recursive: true }); // the image cache is the checkout's: built once
  mkdirSync(join(view, ".muster"));
  symlinkSync(join(repoRoot, ".muster", "images"), join(view, ".muster", "images"));
  // `muster` on PATH is this checkout's, as setup.sh's npm link leaves it (setup.sh sees that and links nothing)
  mkdirSync(bin);
  symlinkSync(join(repoRoot, "dist", "src", "cli", "main.js"), join(bin, "muster"));
}

before(() => {
  if (!root) return;
  checkoutView();
  // N+1 for the upgrade, built while the lab comes up
  debNext = execFileP(process.execPath, [join(repoRoot, "packaging", "build-deb.mjs"), "--out", join(view, ".deb-next"), "--compress", "gzip", "--level", "1", "--version", VERSION_NEXT], { maxBuffer: 64 << 20 }).then((r) => r.stdout.trim().split("\n").at(-1)!);
  debNext.catch(() => undefined);
});

let labDown = false;
after(async () => {
  await client?.close();
  if (root && !labDown && existsSync(labDir)) {
    // a test failed midway: stop what the lab started, the CLI's way first
    const down = await sh("muster lab down", 300_000).catch(() => undefined);
    if (down?.code !== 0) {
      await stopLabFromState(labDir).catch(() => undefined);
      await stopLabRemains(labDir).catch(() => undefined);
    }
  }
  for (const b of brokerPids) if (stillRuns(b)) process.kill(b.pid, "SIGKILL");
  unmountUnder(view); // never delete through a machine's root
  rmSync(view, { recursive: true, force: true });
});

test("./scripts/lab.sh, as the README runs it: four machines booted through cloud-init, each provisioned against its region's master; exit 0", { skip }, async (t) => {
  const log = join(view, "lab.sh.log");
  const t0 = Date.now();
  const r = await docs.run("./scripts/lab.sh", { timeoutMs: 1_800_000, onOutput: (x) => writeFileSync(log, x, { flag: "a" }) });
  t.diagnostic(`./scripts/lab.sh: ${((Date.now() - t0) / 1000).toFixed(0)} s from the command to 4 machines provisioned (${/==> build[^\n]*/.exec(r.stdout)?.[0] ?? "no build line"})`);
  assert.match(r.stdout, /4 of 4 nodes provisioned and answering in the fleet/);
  assert.match(r.stdout, /web console: http:\/\/127\.0\.0\.1:\d+/);
  assert.ok(existsSync(join(view, ".muster", "client.yaml")), "the client config plain commands read");
  const s = state();
  assert.deepEqual(
    s.nodes.map((n) => [n.identity, n.machine?.kind]),
    ["node01.eu.lab", "node02.us.lab", "node03.eu.lab", "node04.us.lab"].map((id) => [id, "nspawn"]),
  );
  // persistent: it rides out the broker outage below, as a daemon would
  client = await MusterClient.connect({ brokers: [s.broker], collective: s.collective, tls: s.tls.admin, persistent: true });
  store = await ProvisionState.open(client, "muster_provision");
  for (const [id, master] of [
    [A, EU],
    [B, "puppet-us.lab"],
  ] as const) {
    const rec = (await store.get(id))?.record;
    assert.equal(rec?.status, "done", `${id}: ${rec?.lastError ?? ""}`);
    assert.equal(rec.master, master);
    t.diagnostic(`${id}: power on to provisioned ${((rec.finishedAt! - s.nodes.find((n) => n.identity === id)!.machine!.poweredOnAt) / 1000).toFixed(1)} s`);
    assert.equal(signedCount(master, id), 1);
  }
  // the machine's own Puppet ran both stages with the system's real /etc/puppet and facts.d
  assert.match(inMachine(B, "cat", "/etc/facter/facts.d/muster_lifecycle_stage.yaml"), /lifecycle_stage: "?production/);
  assert.match(inMachine(A, "cat", "/etc/motd"), /node01\.eu\.lab is managed by Puppet \(country de, stage production\)[\s\S]*MySQL master/);
  // a role's user and the systemd service Puppet installs and keeps running
  assert.match(inMachine(B, "id", "webapp"), /webapp/);
  assert.match(inMachine(B, "systemctl", "is-active", "webapp.service"), /^active/);
  assert.match(inMachine(A, "systemctl", "is-active", "labdb.service"), /^active/);
});

test("the machines are whole systems on a network of their own: hostname, address, no route out", { skip }, () => {
  const ms = state().machines!;
  const links = labLinks(ms.netns);
  assert.ok(links.includes("mbr0") && links.every((l) => l === "lo" || l === "mbr0" || l.startsWith("vb-")), `only the bridge and the machines' veths: ${links.join(", ")}`);
  assert.ok(!labRoutes(ms.netns).some((r) => r.startsWith("default")), "no default route");
  for (const id of [A, B]) {
    assert.equal(inMachine(id, "cat", "/proc/1/comm").trim(), "systemd", "systemd is PID 1");
    const facts = JSON.parse(inMachine(id, "facter", "--json", "fqdn", "networking.ip")) as Record<string, string>;
    assert.equal(facts.fqdn, id, "facter: its own name");
    assert.equal(facts["networking.ip"], state().nodes.find((n) => n.identity === id)!.ipaddress, "facter: its own address");
    assert.match(inMachine(id, "cloud-init", "status", "--wait"), /status: done/); // --wait: cloud-final may still be finishing
    // the seed is root-only, and the directories above it keep the image's modes (the overlay's
    // upper layer would hide them: a /var/lib of 0700 stops dbus and networkd)
    assert.equal(inMachine(id, "stat", "-c", "%a", "/var", "/var/lib", "/var/lib/cloud/seed/nocloud").trim(), "755\n755\n700");
    // the user-data is the renderer's, as docs/deploy.md gives it
    assert.match(readFileSync(join(machineDir(id), "render.sh"), "utf8"), /^muster user-data .*--apt-repo/ms);
  }
});

test("the README's commands against the lab, as written: ping, health, find, facts, provision status and retry, doctor, rpc, lab status, lab exec", { skip }, async () => {
  const ping = await docs.run("muster ping");
  for (const id of ["node01.eu.lab", "node02.us.lab", "node03.eu.lab", "node04.us.lab"]) assert.match(ping.stdout, new RegExp(`^${id.replace(/\./g, "\\.")}\\b`, "m"));
  await docs.run("muster health"); // exit 0: every node healthy
  const de = await docs.run("muster find -F country=de");
  assert.deepEqual(de.stdout.trim().split("\n").filter((l) => /^node\d+\./.test(l)).sort(), ["node01.eu.lab", "node03.eu.lab"]);
  const facts = (await docs.run("muster facts country")).stdout;
  for (const cc of ["de", "us"]) assert.match(facts, new RegExp(`^\\s+${cc}\\s+found \\d+ times$`, "m"));
  assert.match((await docs.run("muster provision status")).stdout, /4 nodes: 4 done/);
  // every node is done: retry refuses, as the README says, and changes nothing
  const retry = await docs.run("muster provision retry node03.eu.lab");
  assert.match(retry.stderr, /node03\.eu\.lab is done; retry applies to failed and gone nodes/);
  assert.equal((await store.get("node03.eu.lab"))?.record.status, "done");
  await docs.run("muster doctor");
  assert.match((await docs.run("muster rpc rpcutil daemon_stats -I node01.eu.lab")).stdout, /node01\.eu\.lab/);
  const status = await docs.run("muster lab status");
  for (const id of ["node01.eu.lab", "node02.us.lab", "node03.eu.lab", "node04.us.lab"]) assert.match(status.stdout, new RegExp(`on \\s+node\\s+${id.replace(/\./g, "\\.")}`));
  const unit = await docs.run("muster lab exec node01.eu.lab -- systemctl status muster-server");
  assert.match(unit.stdout, /Active: active \(running\)/);
});

test("decommission of names the lab never had (the docs' examples): every step finds nothing to do; exit 0", { skip }, async () => {
  for (const cmd of ["muster decommission web3.example.net", "muster decommission node07.eu.lab", "muster decommission --wait web3.example.net web4.example.net"]) {
    const r = await docs.run(cmd);
    assert.match(r.stdout + r.stderr, /already gone/, cmd);
  }
  const json = JSON.parse((await docs.run("muster decommission --json old1.example.net")).stdout) as unknown;
  assert.match(JSON.stringify(json), /old1\.example\.net/);
});

test("seed 004 as the README writes it, against machines: search_nodes, runall, nrpe with the real plugins, resource, ssh into sshd", { skip }, async () => {
  // provisioned nodes answer in the fleet on their Puppet certificates, with their production
  // classes; the registry has heard them (its answers are what --dm registry reads)
  await eventually(async () => ((await sh("muster find --dm registry -C role::web")).stdout.includes(B) ? true : undefined), 120_000, `${B} in the registry as role::web`);
  const find = await docs.run('muster find -W "environment=development customer=acme mysql::master"');
  assert.equal(find.stdout.trim(), A);
  // no command: a login shell (its stdin at its end, it exits), and the machine's motd greets it
  const ssh = await docs.run('muster ssh -W "environment=development customer=acme mysql::master"');
  assert.match(ssh.stdout, /node01\.eu\.lab is managed by Puppet/);
  const nrpe = await docs.run('muster nrpe check_load -W "environment=development customer=acme mysql::master"');
  assert.match(nrpe.stdout, /^check_load: OK: 1 WARNING: 0 CRITICAL: 0 UNKNOWN: 0\|total=1 ok=1 warn=0 crit=0 unknown=0 checktime=/);
  // a service stopped behind Puppet's back is running again after the next run
  inMachine(B, "systemctl", "stop", "webapp.service");
  await docs.run("muster puppet runall 2 -C role::web");
  assert.match(inMachine(B, "systemctl", "is-active", "webapp.service"), /^active/);
  await docs.run('muster resource file /srv/muster-lab/files/hello ensure=file content=hi -W "customer=acme mysql::master"');
  assert.equal(inMachine(A, "cat", "/srv/muster-lab/files/hello"), "hi");
  assert.match((await docs.run("muster find --dm registry -C role::web")).stdout, new RegExp(B.replace(/\./g, "\\.")));
  assert.match((await docs.run("muster lab exec node02.us.lab -- cat /etc/webapp/webapp.conf")).stdout, /database_host = node01\.eu\.lab/, "web found its database master with search_nodes");
  assert.match((await docs.run("muster ssh -I node01.eu.lab -- cat /etc/motd")).stdout, /node01\.eu\.lab is managed by Puppet/, "through the machine's own sshd");
  assert.match((await docs.run("muster lab exec node02.us.lab -- systemctl is-active webapp")).stdout, /^active/);
  // docs/fleet.md: every node of the lab runs Puppet, two at a time
  const all = await docs.run("muster puppet runall 2");
  for (const id of ["node01.eu.lab", "node02.us.lab", "node03.eu.lab", "node04.us.lab"]) assert.match(all.stdout, new RegExp(`> ${id.replace(/\./g, "\\.")} (ok|changed) after`), all.stdout);
});

test("a provisioned machine's power is cut (`lab power cut`): unreachable in muster health, on the console's landing page and in an alert to the admins; powered on, back the same three ways", { skip }, async (t) => {
  const health = async (id: string) => {
    const r = await sh(`muster health --json -I ${id}`);
    const node = (JSON.parse(r.stdout || "{}") as { nodes?: { identity: string; reachable: boolean; problems: { kind: string; why: string }[] }[] }).nodes?.find((n) => n.identity === id);
    return { code: r.code, node };
  };
  const alerts = (id: string, what: RegExp) => received().filter((s) => what.test(s) && s.includes(id)).length;
  await eventually(async () => ((await health(B)).node?.reachable ? true : undefined), 60_000, `${B} reachable in muster health`);
  const web = state().web!;
  // the audit: the CLI's runall above reached B, and B's record of it is on the console's audit page
  const audit = await eventually(
    async () => {
      const res = await fetch(new URL("api/audit?action=puppet.runonce", web.url), { headers: { authorization: `Bearer ${labWebToken(web.tokens_file, "operator")}` } });
      const body = (await res.json()) as { rows: { target: string; source: string; ok: boolean }[]; sources: { name: string; ok: boolean }[] };
      return body.rows.some((r) => r.target === B && r.source === "node") ? body : undefined;
    },
    60_000,
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
    await page.waitForSelector("section.health-page", { timeout: 60_000 }); // the landing page
    const item = `.health-kind[data-kind="unreachable"] li[data-identity="${B}"]`;
    assert.equal(await page.locator(item).count(), 0);

    // alerts about B before this cut (a machine of a busy lab may have been told about once already)
    const toldBefore = { gone: alerts(B, /unreachable/), back: alerts(B, /reachable again/) };
    const cutAt = Date.now();
    await docs.run("muster lab power cut node02.us.lab"); // no last heartbeat, no shutdown event
    poweredOff = true;
    // deadlines that only catch a hang: detection is 25 s of silence by design (docs/fleet.md#health)
    const [onPage, inCli, alerted] = await Promise.all([
      page.waitForSelector(item, { timeout: 300_000 }).then(() => Date.now() - cutAt),
      eventually(async () => ((await health(B)).code === 2 && (await health(B)).node?.problems[0]?.kind === "unreachable" ? Date.now() - cutAt : undefined), 300_000, `${B} unreachable in muster health`),
      eventually(async () => (alerts(B, /unreachable/) > toldBefore.gone ? Date.now() - cutAt : undefined), 300_000, `the admins told ${B} is unreachable`),
    ]);
    t.diagnostic(`power cut to unreachable: console ${onPage} ms, muster health ${inCli} ms, alert ${alerted} ms (bench/machines.ts measures it)`);
    assert.match((await page.locator(item).textContent()) ?? "", /no heartbeat for \d+ s/);
    assert.match(await page.title(), /^\(\d+\) Health · muster$/);
    a11y.push(...(await a11yFindings(page, "the lab's health page with a machine unreachable")));
    assert.equal(alerts(B, /unreachable/), toldBefore.gone + 1, "told once");

    const onAt = Date.now();
    ok(await sh(`muster lab power on ${B}`), "power on"); // same disk: it comes back provisioned and sends heartbeats again
    poweredOff = false;
    const [pageBack, cliBack, alertBack] = await Promise.all([
      page.waitForSelector(item, { state: "detached", timeout: 300_000 }).then(() => Date.now() - onAt),
      eventually(async () => ((await health(B)).node?.reachable ? Date.now() - onAt : undefined), 300_000, `${B} reachable again in muster health`),
      eventually(async () => (alerts(B, /reachable again/) > toldBefore.back ? Date.now() - onAt : undefined), 300_000, `the admins told ${B} is reachable again`),
    ]);
    t.diagnostic(`power on to reachable: console ${pageBack} ms, muster health ${cliBack} ms, alert ${alertBack} ms (the machine boots first)`);
    await eventually(async () => ((await discovered(B)) ? true : undefined), 120_000, `${B} answering in the fleet`);
  } finally {
    await browser.close();
    if (poweredOff) await sh(`muster lab power on ${B}`); // whatever happened, the tests after this one need it
  }
  assert.deepEqual(problems, [], "no page broke the CSP or threw");
});

test("`lab add --machines 2`, then `lab remove` and `decommission --wait`: two more machines provisioned; the removed one's certificate revoked (its serial on the master's CRL) and its records dropped", { skip }, async () => {
  const added = await docs.run("muster lab add --machines 2");
  assert.match(added.stdout, /2 of 2 added node\(s\) provisioned/);
  assert.deepEqual(state().nodes.map((n) => n.identity).slice(-2), [C, "node06.us.lab"]);
  assert.equal(signedCount(EU, C), 1);
  // its certificate's serial, as the CA's inventory has it (0x0007 2026-... /CN=node05.eu.lab)
  const line = readFileSync(join(masterDir(EU), "ca", "inventory.txt"), "utf8").split("\n").find((l) => l.trim().endsWith(`/CN=${C}`))!;
  const serial = BigInt(line.split(/\s+/)[0]!);
  const disk = machineDir(C);
  assert.match((await docs.run("muster lab remove node05.eu.lab")).stdout, /node05\.eu\.lab: powered off, its disk .* deleted/);
  assert.ok(!existsSync(disk), "its disk is gone");
  await docs.run("muster decommission --wait node05.eu.lab");
  // every CRL the CA keeps (its chain's, in one file)
  const crl = (await execFileP("openssl", ["storeutl", "-noout", "-text", "-crls", join(masterDir(EU), "ca", "ca_crl.pem")])).stdout;
  const revoked = [...crl.matchAll(/Serial Number: ([0-9A-Fa-f]+)/g)].map((m) => BigInt(`0x${m[1]}`));
  assert.ok(revoked.includes(serial), `serial ${serial} on ${EU}'s CRL: ${revoked.join(", ")}`);
  assert.ok(!existsSync(join(masterDir(EU), "ca", "signed", `${C}.pem`)), "its signed certificate cleaned from the CA");
  assert.equal(await store.get(C), undefined, "its provisioning record is dropped");
});

/** The lab's broker goes away and comes back `ms` later: same config, port and JetStream store, a new process. */
async function brokerOutage(ms: number): Promise<void> {
  const s = state();
  const conf = join(s.dir, "nats", "nats.conf");
  const port = Number(/:(\d+)$/.exec(s.broker)![1]);
  process.kill(s.natsPid, "SIGTERM");
  await eventually(async () => (isAlive(s.natsPid) ? undefined : true), 30_000, "the broker stopping");
  await new Promise((r) => setTimeout(r, ms)); // the outage itself, not a wait for anything
  const out = openSync(join(s.dir, "nats", "nats.log"), "a");
  const child = spawn("nats-server", ["-c", conf], { detached: true, stdio: ["ignore", out, out] });
  closeSync(out);
  child.unref();
  brokerPids.push({ pid: child.pid!, cmd: cmdlineOf(child.pid!) });
  await waitForPort("127.0.0.1", port, 30_000);
  // the lab's state names its broker: `lab status` and `lab down` find this one
  writeFileSync(join(s.dir, "lab.json"), JSON.stringify({ ...state(), natsPid: child.pid }, null, 2));
}

test("a machine back under its old name (`lab add --identity`) loses its power during its bootstrap Puppet run: gone; powered on, it resumes through a 30 s broker outage and ends provisioned once, with one new certificate", { skip }, async (t) => {
  const [signedBefore, toldBefore] = [signedCount(EU, C), notified(C)];
  const adding = docs.run("muster lab add --identity node05.eu.lab");
  adding.catch(() => undefined);
  await store.waitFor([C], (r) => r.current === "bootstrap", 600_000);
  // the Puppet run is under way in the machine (not merely asked for)
  await eventually(async () => (machineExec(machineDir(C), ["pgrep", "-f", "puppet agent"]).status === 0 ? true : undefined), 120_000, "puppet agent running in the machine");
  const cutAt = Date.now();
  ok(await sh(`muster lab power cut ${C}`), "power cut");
  const gone = (await store.waitFor([C], (r) => r.gone !== undefined, 300_000)).get(C)!;
  t.diagnostic(`power cut to marked gone: ${Date.now() - cutAt} ms (${gone.gone!.reason}); bench/machines.ts measures it`);
  assert.notEqual(gone.status, "done");
  ok(await sh(`muster lab power on ${C}`), "power on"); // same disk
  const back = (await store.waitFor([C], (r) => r.gone === undefined, 300_000)).get(C)!;
  if (back.status === "in_progress") {
    t.diagnostic(`the broker stopped for 30 s while ${C} is back at ${back.current}`);
    await brokerOutage(30_000);
  } else t.diagnostic(`${C} was ${back.status} before the outage could start: none`);
  const r = await adding; // `lab add` follows it to the end, through the outage
  assert.match(r.stdout, /1 of 1 added node\(s\) provisioned/);
  const rec = (await store.get(C))!.record;
  assert.equal(rec.status, "done", `${rec.lastError ?? ""}\n${rec.log.join("\n")}`);
  assert.equal(rec.gone, undefined, "no longer gone");
  assert.equal(signedCount(EU, C), signedBefore + 1, "a new certificate, signed once");
  await eventually(async () => (notified(C) > toldBefore ? true : undefined), 60_000, "the admins told");
  assert.equal(notified(C), toldBefore + 1, "provisioned once: the admins told once");
});

test("reboot (`lab power reboot`): the same node comes back with its certificate, classes and facts, and is not provisioned again", { skip }, async (t) => {
  const before = (await store.get(A))!;
  const cert = inMachine(A, "sha256sum", `/var/lib/puppet/ssl/certs/${A}.pem`);
  const dir = machineDir(A);
  const boots = () => readFileSync(join(dir, "boots.jsonl"), "utf8").trim().split("\n").length;
  const n = boots();
  const t0 = Date.now();
  ok(await sh(`muster lab power reboot ${A}`), "reboot");
  // A miss names what the machine's console said (systemd's stop jobs, how nspawn ended).
  await eventually(async () => (boots() > n ? true : undefined), 300_000, "the machine booting again").catch((e: unknown) => {
    const console = readFileSync(join(dir, "console.log"), "utf8").split("\n").slice(-40).join("\n");
    throw new Error(`${(e as Error).message}; the end of ${A}'s console.log:\n${console}`);
  });
  t.diagnostic(`reboot to booting again: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  await eventually(async () => ((await discovered(A)) ? true : undefined), 300_000, `${A} answering again`);
  assert.equal(inMachine(A, "sha256sum", `/var/lib/puppet/ssl/certs/${A}.pem`), cert, "its certificate");
  const inv = await client!.call("rpcutil", "inventory", {}, { nodes: [A], timeoutMs: 30_000 });
  const data = inv.replies[0]?.data as { classes: string[]; facts: Record<string, unknown> };
  assert.ok(data.classes.includes("mysql::master"), `classes: ${data.classes.join(", ")}`);
  assert.equal(data.facts.country, "de");
  const after = (await store.get(A))!;
  assert.equal(after.record.status, "done");
  assert.equal(after.record.rounds, before.record.rounds, "not provisioned again");
  assert.equal(after.record.finishedAt, before.record.finishedAt);
  assert.equal(signedCount(EU, A), 1);
});

test("systemctl stop muster-server inside a machine (`lab exec`): the fleet sees it go; start: it is back", { skip }, async () => {
  ok(await sh(`muster lab exec ${B} -- systemctl stop muster-server.service`), "stop");
  await eventually(async () => ((await discovered(B)) ? undefined : true), 120_000, `${B} gone from discovery`);
  ok(await sh(`muster lab exec ${B} -- systemctl start muster-server.service`), "start");
  await eventually(async () => ((await discovered(B)) ? true : undefined), 120_000, `${B} back in discovery`);
});

test("the package upgraded in place (N+1) from the lab's apt repository (`lab publish`): identity, keys, certificate and config kept, the daemon restarted once by the upgrade", { skip }, async (t) => {
  const deb = await debNext;
  const sums = () => inMachine(A, "sh", "-c", `sha256sum /etc/muster/server.yaml /var/lib/puppet/ssl/certs/${A}.pem /var/lib/muster/server/nodes/*.key`);
  const before = sums();
  const key = (await client!.call("rpcutil", "ping", {}, { nodes: [A], timeoutMs: 30_000 })).replies[0];
  assert.ok(key, `${A} answers before the upgrade`);
  const restarts = () => Number(inMachine(A, "systemctl", "show", "-p", "NRestarts", "--value", "muster-server.service").trim());
  const started = () => inMachine(A, "systemctl", "show", "-p", "ExecMainStartTimestampMonotonic", "--value", "muster-server.service").trim();
  const [restartsBefore, startedBefore] = [restarts(), started()];
  ok(await sh(`muster lab publish ${deb}`), "publish"); // the operator publishes N+1; the machine upgrades as any apt user would
  const t0 = Date.now();
  ok(await sh(`muster lab exec ${A} -- sh -c 'apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --only-upgrade -o Dpkg::Options::=--force-confold muster'`, 600_000), "apt-get");
  assert.match(inMachine(A, "dpkg-query", "-W", "-f", "${Version}", "muster"), new RegExp(`^${VERSION_NEXT.replace(/\./g, "\\.")}$`));
  await eventually(async () => {
    const r = await client!.call("rpcutil", "daemon_stats", {}, { nodes: [A], timeoutMs: 3000 });
    return (r.replies[0]?.data as { version?: string } | undefined)?.version === VERSION_NEXT ? true : undefined;
  }, 300_000, "the upgraded daemon answering");
  t.diagnostic(`answering as ${VERSION_NEXT} ${((Date.now() - t0) / 1000).toFixed(1)} s after apt-get began`);
  assert.equal(sums(), before, "config, certificate and node key unchanged");
  assert.notEqual(started(), startedBefore, "the daemon was restarted into the new version");
  assert.equal(restarts(), restartsBefore, "once, by the upgrade: not by systemd after a crash");
  const after = await client!.call("rpcutil", "ping", {}, { nodes: [A], timeoutMs: 30_000 });
  assert.equal(after.replies[0]?.sender, key.sender, "the same identity");
  assert.equal(after.stats.verified, 1, "its reply verifies against the key the directory holds: the node key was kept");
});

test("the lab's pages had no accessibility finding (axe: WCAG A and AA, best practices)", { skip }, () => {
  assert.deepEqual(a11y, []);
});

test("`lab down` stops the lab and leaves nothing: no machine on, nothing mounted, no network namespace, no relay, no client config; every doc command given to this file ran", { skip }, async () => {
  const s = state();
  const remembered = [...readFileSync(join(labDir, "pids.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as { pid: number; cmd: string }), ...brokerPids];
  assert.ok(remembered.length >= s.nodes.length, "every process the lab started was remembered as it started");
  await client?.close();
  client = undefined;
  const down = await docs.run("muster lab down");
  labDown = true;
  assert.match(down.stdout, /^stopped: /);
  const mounts = readFileSync("/proc/self/mountinfo", "utf8").split("\n").map((l) => decodeMountPath(l.split(" ")[4] ?? ""));
  assert.deepEqual(mounts.filter((m) => m.startsWith(`${view}/`)), [], "no machine root left mounted");
  for (const n of s.nodes) if (n.machine) assert.equal(machineLeader(n.machine.dir), undefined, `${n.identity} is off`);
  assert.deepEqual(remembered.filter(stillRuns).map((r) => `${r.pid}: ${r.cmd}`), [], "no process of the lab runs (supervisors, relays, servers, the broker)");
  assert.ok(!existsSync(`/run/netns/${s.machines!.netns}`), "its network namespace is gone");
  assert.ok(!existsSync(s.machines!.socketDir), "its relays' sockets are gone");
  assert.ok(!existsSync(join(view, ".muster", "client.yaml")), "the client config is gone with it");
  docs.ranAll();
});
