import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { MUSTER_BIN } from "../../../src/lab/processes.js";
import { siteCredentials } from "../../../src/lab/site/credentials.js";
import { siteMachines } from "../../../src/lab/site/roles.js";
import type { Site } from "../../../src/lab/site/index.js";
import { ProvisionState } from "../../../src/provisioner/state.js";
import { askUntil, eventually, repoRoot, runCli } from "../../support/collective.js";
import { textBlockLines } from "../../support/doc-commands.js";
import { siteOperatorEnv } from "../../support/site.js";

// Issue 40 and issue 35's keys on the site (`muster lab up --site`): what an operator meets who
// builds a site from docs/deploy.md alone. One master (puppet-us.lab) boots with only a short host
// name and nothing on it resolving its full one; one node boots from the guide's own commands, run
// as written (only the example's host names point at the lab's); every node of the site ends
// `done`; every reply on the site verifies against the key directory; `muster doctor` finds no
// step missing; the brokers started clean and refused the nodes nothing the guide's order avoids.
//
// When each runs: bootGuideNode once the site is up (startSite resolved); the others once the
// site's nodes have been given time to provision (checkAllDone first: it waits for them).

const execFileP = promisify(execFile);
const GUIDE_NODE = "node42.example.net";
const SHORT_MASTER = siteMachines().find((m) => m.hostname)!;

/**
 * Boot node42.example.net from docs/deploy.md's own commands: the bootstrap credential
 * (section 2) and the node's user-data (section 7), each run as the guide prints it, with the
 * files the guide names (ca/, keys/provisioner.pub, the repository's key, the operator's ssh key)
 * and `muster` on PATH. Only the example's host names are the lab's: the apt repository and the
 * brokers. Resolves once the node waits in the provisioning collective. Run once the site is up.
 */
export async function bootGuideNode(site: Site, say: (l: string) => void = () => undefined): Promise<string> {
  const s = site.state;
  const doc = readFileSync(join(repoRoot, "docs", "deploy.md"), "utf8");
  const lines = textBlockLines(doc);
  const issue = lines.find((l) => l.startsWith(`muster broker bootstrap-credential --identity ${GUIDE_NODE}`));
  const render = lines.find((l) => l.startsWith("muster user-data --apt-repo"));
  assert.ok(issue && render, "docs/deploy.md shows the node's bootstrap credential and its user-data command");
  const work = mkdtempSync(join(tmpdir(), "muster-guide-node-"));
  try {
    // the workstation's files, under the guide's names
    const creds = siteCredentials(s.site!.files.dir);
    for (const d of ["ca", "keys", "bin", "home/.ssh"]) mkdirSync(join(work, d), { recursive: true });
    copyFileSync(creds.ca.cert, join(work, "ca", "ca.pem"));
    copyFileSync(creds.ca.key, join(work, "ca", "ca.key"));
    copyFileSync(join(creds.dir, "keys", "provisioner.pub"), join(work, "keys", "provisioner.pub"));
    copyFileSync(s.machines!.packages.key, join(work, "muster-archive-keyring.asc"));
    copyFileSync(`${s.machines!.ssh.key}.pub`, join(work, "home", ".ssh", "id_ed25519.pub"));
    writeFileSync(join(work, "bin", "muster"), `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(MUSTER_BIN)} "$@"\n`);
    chmodSync(join(work, "bin", "muster"), 0o755);
    const lab = (cmd: string) => cmd.replaceAll("https://apt.example.net/muster", s.machines!.packages.url).replace(/tls:\/\/nats(\d)\.example\.net:4222/g, "tls://nats$1.lab:4222");
    // the operator's own key (the one every machine of the site obeys): this process's caller
    const env = { ...process.env, PATH: `${join(work, "bin")}:${process.env.PATH}`, HOME: join(work, "home") };
    for (const cmd of [issue!, lab(render!)]) {
      const r = await execFileP("/bin/sh", ["-c", cmd], { cwd: work, env, maxBuffer: 8 << 20 }).catch((e: { stderr?: string; message: string }) => assert.fail(`${cmd}: ${e.stderr ?? e.message}`));
      say(`guide: ${cmd.slice(0, 90)}... ${r.stderr.trim().split("\n").at(-1) ?? ""}`);
    }
    const userData = readFileSync(join(work, "node42.user-data.yaml"), "utf8");
    assert.match(userData, /^#cloud-config\n/);
    await site.addNodes({ identities: [GUIDE_NODE], userData, progress: say });
    return GUIDE_NODE;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** Every node of the site (the guide's among them) ends `done`; those of the short-named master's region were signed by it. Run after the nodes had their time. */
export async function checkAllDone(site: Site, timeoutMs = 900_000): Promise<void> {
  const ids = site.state.nodes.map((n) => n.identity);
  assert.ok(ids.includes(GUIDE_NODE), `${GUIDE_NODE} is one of the site's nodes (bootGuideNode first)`);
  const client = await site.client("guide-check-done");
  try {
    const store = await ProvisionState.open(client, "muster_provision");
    const recs = await store.waitFor(ids, (r) => r.status === "done", timeoutMs);
    const short = [...recs.values()].filter((r) => r.master === SHORT_MASTER.identity);
    assert.ok(short.length > 0, `some node was provisioned by ${SHORT_MASTER.identity} (the master with only a short host name)`);
    assert.equal(recs.get(GUIDE_NODE)?.status, "done");
  } finally {
    await client.close();
  }
}

/** The short-named master: its host name is short, nothing on it resolves its full one, and its certificate is its identity's. */
export async function checkShortNamedMaster(site: Site): Promise<void> {
  const m = SHORT_MASTER;
  const sh = (cmd: string) => site.exec(m.identity, ["sh", "-c", cmd]);
  assert.equal((await sh("hostname")).stdout.trim(), m.hostname);
  const resolved = await sh(`getent hosts ${m.identity}`);
  assert.notEqual(resolved.status, 0, `${m.identity} resolves on itself: ${resolved.stdout}`);
  assert.equal((await sh("puppet config print certname")).stdout.trim(), m.identity);
  const certs = (await sh("ls /var/lib/puppet/ssl/certs")).stdout.split("\n");
  assert.ok(certs.includes(`${m.identity}.pem`), `its certificate is ${m.identity}'s: ${certs.join(" ")}`);
  assert.ok(!certs.includes(`${m.hostname}.pem`), `no certificate under its host name ${m.hostname}`);
}

/** Every sender on the site verifies: the masters, the notifier and the nodes, `"verified": true` each (issue 35). Run once the nodes are done. */
export async function checkEverySenderVerified(site: Site): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "muster-guide-cli-"));
  try {
    const r = await runCli(["rpc", "rpcutil", "ping", "--json", "--dt", "3"], { env: siteOperatorEnv(site, dir), timeoutMs: 120_000 });
    assert.equal(r.code, 0, r.stderr);
    const replies = (JSON.parse(r.stdout) as { replies: { sender: string; verified: boolean }[] }).replies;
    const senders = replies.map((x) => x.sender);
    for (const m of siteMachines().filter((x) => x.role === "master" || x.role === "console")) assert.ok(senders.includes(m.identity), `${m.identity} answered`);
    assert.deepEqual(replies.filter((x) => !x.verified).map((x) => x.sender), [], "every reply verified against the key directory");
    const human = await runCli(["rpc", "rpcutil", "ping", "--dt", "3"], { env: siteOperatorEnv(site, dir), timeoutMs: 120_000 });
    assert.doesNotMatch(human.stdout + human.stderr, /unverified/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * `muster doctor` with the operator's config finds no step of the guide missing. Run once the nodes
 * are done. A node restarts onto its Puppet certificate as it finishes, and doctor says so of one
 * that does not answer yet: it is asked again until clean (a deadline); the last report is what a
 * failure shows.
 */
export async function checkDoctorClean(site: Site, timeoutMs = 120_000): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "muster-guide-doctor-"));
  type Report = { ok: boolean; checks: { name: string; state: string; detail: string }[] };
  const NAMED = ["stores", "replies verified", "masters", "puppet CAs"];
  const clean = (rep: Report) => rep.ok && NAMED.every((name) => rep.checks.find((c) => c.name === name)?.state === "ok");
  try {
    const last = await askUntil(
      async () => {
        const r = await runCli(["doctor", "--json", "--dt", "3"], { env: siteOperatorEnv(site, dir), timeoutMs: 180_000 });
        return { code: r.code, stderr: r.stderr, ...(r.stdout.trim() ? { report: JSON.parse(r.stdout) as Report } : {}) };
      },
      (x) => x.report !== undefined && clean(x.report),
      timeoutMs,
    );
    assert.ok(last.report, `muster doctor printed no report (exit ${last.code}): ${last.stderr}`);
    for (const name of NAMED) assert.equal(last.report.checks.find((c) => c.name === name)?.state, "ok", `${name}: ${JSON.stringify(last.report.checks.find((c) => c.name === name))}`);
    assert.equal(last.report.ok, true, JSON.stringify(last.report.checks.filter((c) => c.state === "fail")));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * `muster health` with the operator's config, as docs/deploy.md's last section has the operator run
 * it: the guide's node among the healthy, every node and every service of the site healthy, exit 0.
 * Nodes that finished provisioning restart into production, so the report is asked again until it
 * is clean (a deadline); the last one is what a failure shows.
 */
export async function checkHealthClean(site: Site, guideNode: string, timeoutMs = 120_000): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "muster-guide-health-"));
  type Report = { nodes: { identity: string; problems: { kind: string; why: string }[] }[]; services: { role: string; name: string; problems: { kind: string; why: string }[] }[]; summary: { unhealthy: number }; service_summary: { unhealthy: number } };
  let last: { code: number | null; report?: Report; stderr: string } = { code: null, stderr: "" };
  try {
    await eventually(
      async () => {
        const r = await runCli(["health", "--json"], { env: siteOperatorEnv(site, dir), timeoutMs: 120_000 });
        last = { code: r.code, stderr: r.stderr, ...(r.stdout.trim() ? { report: JSON.parse(r.stdout) as Report } : {}) };
        return r.code === 0 && last.report?.summary.unhealthy === 0 && last.report.service_summary.unhealthy === 0 ? true : undefined;
      },
      timeoutMs,
      "muster health clean on the site",
    ).catch((e: Error) => {
      const bad = [...(last.report?.nodes ?? []), ...(last.report?.services ?? []).map((x) => ({ identity: `${x.role}/${x.name}`, problems: x.problems }))].filter((x) => x.problems.length).map((x) => `${x.identity}: ${x.problems.map((p) => `${p.kind} (${p.why})`).join("; ")}`);
      throw new Error(`${e.message}: exit ${last.code}; ${bad.join(" | ") || last.stderr.slice(0, 500)}`);
    });
    assert.ok(last.report?.nodes.some((n) => n.identity === guideNode && n.problems.length === 0), `${guideNode} is in muster health, healthy`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The brokers started clean (nats-server never failed on its key) and refused the nodes nothing
 * the guide's order avoids: no waiting node's inbox subscription, no node creating the audit
 * stream. Run once the nodes are done.
 */
export async function checkBrokersClean(site: Site, o: { except?: string[] } = {}): Promise<void> {
  // `except`: a broker whose power was cut (its volatile journal went with it)
  for (const b of siteMachines().filter((m) => m.role === "broker" && !o.except?.includes(m.identity))) {
    const log = (await site.exec(b.identity, ["journalctl", "-u", "nats-server", "--no-pager", "-o", "cat"])).stdout;
    assert.doesNotMatch(log, /permission denied/i, `${b.identity}'s nats-server could not read a file`);
    const refused = log.split("\n").filter((l) => /Violation/.test(l) && /_INBOX_|STREAM\.CREATE\.MUSTER_AUDIT/.test(l));
    assert.deepEqual(refused, [], `${b.identity} refused nodes what the guide's order avoids`);
    const starts = (await site.exec(b.identity, ["sh", "-c", "journalctl -u nats-server --no-pager -o cat | grep -c 'Starting nats-server' || true"])).stdout.trim();
    assert.ok(Number(starts) >= 1, `${b.identity}'s nats-server started`);
    const failed = (await site.exec(b.identity, ["sh", "-c", "journalctl -u nats-server --no-pager | grep -c 'Failed with result' || true"])).stdout.trim();
    assert.equal(Number(failed), 0, `${b.identity}'s nats-server never failed to start`);
  }
}
