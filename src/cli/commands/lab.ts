import { Command } from "commander";
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { MusterError } from "../../errors.js";
import { isAlive, stopPid } from "../../lab/processes.js";
import { labBrokers, labMachinesOf, labRunning, setMachinePid } from "../../lab/state.js";
import type { LabState, LabWeb } from "../../lab/lab.js";
import type { Role } from "../../web/auth.js";
import { LAB_REGIONS } from "../../lab/regions.js";
import { receiverCommand } from "../../lab/receiver-command.js";
import { DEFAULT_STATE_BUCKET } from "../../protocol/buckets.js";
import type { NodeRecord } from "../../protocol/provision-record.js";
import { bold, green, red, yellow } from "../style.js";

// `muster lab`: a local fleet on loopback that provisions itself end to end against real Puppet.
// State lives in ./.muster/lab; ./.muster/client.yaml points plain muster commands at it.

const labDir = () => resolve(".muster", "lab");
const clientConfig = () => resolve(".muster", "client.yaml");
const ts = () => new Date().toISOString().slice(11, 19);

// The lab's machinery (NATS, JetStream, puppetserver control, YAML) loads when a subcommand runs,
// not for `muster lab --help` (npm run bench:cli).
// The lab's machines, through their one front door.
const labMachines = () => import("../../lab/machines/index.js");
const load = async () => {
  const [lab, { MusterClient }, { ProvisionState }, { stringify: toYaml }, { unpackMuster }] = await Promise.all([import("../../lab/lab.js"), import("../../client/client.js"), import("../../provisioner/state.js"), import("yaml"), import("../../lab/package.js")]);
  return { ...lab, MusterClient, ProvisionState, toYaml, unpackMuster };
};

const running = (s: LabState): boolean => labRunning(s);

/** Live progress of these nodes' provisioning until each is done or failed; `since`: ignore records older than this (an earlier machine's). */
async function followProvisioning(s: LabState, ids: string[], timeoutMs: number, since = 0): Promise<NodeRecord[]> {
  const { MusterClient, ProvisionState } = await load();
  // persistent: following lasts minutes, and the lab's broker restarting meanwhile must not end it
  const client = await MusterClient.connect({ brokers: labBrokers(s), collective: s.collective, name: "muster-lab-follow", tls: s.tls?.admin, persistent: true });
  const store = await ProvisionState.open(client, DEFAULT_STATE_BUCKET);
  const { progressBar } = await import("../output.js"); // a terminal's bar, only when following
  const bar = progressBar(true);
  const seen = new Map<string, string>();
  const finished = (r: NodeRecord) => (r.status === "done" || r.status === "failed") && r.updatedAt >= since;
  bar.start(ids.length);
  try {
    await store.waitFor(ids, finished, timeoutMs, (rec) => {
      if (!ids.includes(rec.identity)) return;
      const label = rec.status === "in_progress" ? (rec.current ?? "starting") : rec.status;
      const was = seen.get(rec.identity);
      if (was === label) return;
      seen.set(rec.identity, label);
      const line = rec.status === "done" ? green(`provisioned against ${rec.master}`) : rec.status === "failed" ? red(`FAILED: ${rec.lastError ?? ""}`) : `${label}${rec.attempts ? ` (retry ${rec.attempts})` : ""}`;
      process.stderr.write(`\r\x1b[K${ts()} ${rec.identity.padEnd(16)} ${line}\n`);
      if (finished(rec) && was !== "done" && was !== "failed") bar.tick();
    });
  } catch (e) {
    process.stderr.write(`${ts()} ${(e as Error).message}\n`);
  } finally {
    bar.stop();
  }
  const all = await store.list();
  await client.close();
  return all.filter((r) => ids.includes(r.identity));
}

/**
 * The provisioned nodes that answer in the fleet (they reconnect on their Puppet certificate after
 * the last step): each is said as it answers; the ones that do not within a minute are said too.
 */
async function answeringInFleet(s: LabState, ids: string[]): Promise<string[]> {
  if (!ids.length) return [];
  const { waitForNodes } = await load();
  const answered: string[] = [];
  try {
    await waitForNodes(s, ids, 60_000, "fleet", (id) => (answered.push(id), process.stderr.write(`${ts()} ${id.padEnd(16)} ${green("answers in the fleet")}\n`)));
  } catch (e) {
    process.stderr.write(`${ts()} ${red((e as Error).message)}\n`);
  }
  return answered;
}

/** The site's machines by role, as `lab up --site` ends with. */
function siteSummary(s: LabState): string {
  const byRole = new Map<string, string[]>();
  for (const m of s.site?.machines ?? []) byRole.set(m.role, [...(byRole.get(m.role) ?? []), m.identity]);
  return `The site (Debian ${s.site!.suite}): ${[...byRole.entries()].map(([role, ids]) => `${role} ${ids.join(", ")}`).join("; ")}. The brokers as this workstation reaches them: ${s.site!.brokers.join(", ")}.`;
}

/** Where the lab's console listens and how to log in (the tokens are the lab's own, loopback only). */
function webLogin(w: LabWeb, labWebToken: (file: string, role: Role) => string | undefined): string {
  const op = labWebToken(w.tokens_file, "operator");
  const viewer = labWebToken(w.tokens_file, "viewer");
  return `web console: ${w.url}\n  log in with the operator token ${op ?? "(see the file)"} or the viewer token ${viewer ?? "(see the file)"} (both in ${w.tokens_file})`;
}

/**
 * ./.muster/client.yaml: plain muster commands in this checkout reach the lab as its operator; with
 * machines, `muster ssh` reaches them through the lab's ssh_config and key.
 */
function writeClientConfig(s: LabState, toYaml: (v: unknown) => string): void {
  writeFileSync(clientConfig(), toYaml({ brokers: labBrokers(s), collective: s.collective, tls: s.tls.admin, ...(s.machines ? { ssh_command: `ssh -F ${s.machines.ssh.config}` } : {}) }));
}

/** The lab here, running, or a message and exit 1. */
async function runningLab(): Promise<LabState | undefined> {
  const { readLabState } = await load();
  const s = readLabState(labDir());
  if (!s || !running(s)) {
    process.stdout.write("no running lab here (start one with `muster lab up`)\n");
    process.exitCode = 1;
    return undefined;
  }
  return s;
}

/** A machine of the lab by identity (a node, or one of the site's), or a usage error naming the machines there are. */
function labMachine(s: LabState, identity: string) {
  const all = labMachinesOf(s);
  const m = all.find((x) => x.identity === identity);
  if (!m) {
    const processNode = s.nodes.some((x) => x.identity === identity);
    throw new MusterError("MUSTER_USAGE", processNode ? `${identity} is a process node, not a machine (start a lab with --machines N for machines)` : `no machine ${identity} in the lab (machines: ${all.map((x) => x.identity).join(", ") || "none: start the lab with --machines N"})`);
  }
  return m;
}

export function labCommand(): Command {
  const lab = new Command("lab").description("A local fleet on loopback: broker, two real puppetservers, nodes, notifier and provisioner");
  lab.addCommand(
    new Command("up")
      .description("Start the lab and provision every node end to end, with live progress; leaves the lab running")
      .option("--machines <n>", "how many nodes, each a whole Debian system booted with systemd-nspawn on the lab's own network, installing the package through cloud-init (the default: 4, when this host can run them)")
      .option("--nodes <n>", "how many nodes, as processes on this host instead (fast, no root needed)")
      .option("--vm", "with --machines: QEMU virtual machines with their own kernel (software emulation here: minutes per machine)")
      .option("--vms <n>", "the same as --machines N --vm")
      .option("--package <file>", "with --machines: the .deb they install (default: built now from this checkout)")
      .option("--timeout <seconds>", "give up following progress after this long", "900")
      .option("--from-package <file>", "run the lab's muster processes from this .deb (npm run package), unpacked into .muster/lab/pkg, instead of this checkout")
      .option("--site", "the whole site as machines: three brokers, two Puppet 8 masters, two provisioners and the console (nats1..3.lab, puppet-eu.lab, puppet-us.lab, provisioner1..2.lab, console.lab), each installed from the package as docs/deploy.md says, besides the nodes")
      .option("--suite <release>", "the Debian release of the machines: the site's default is trixie (Debian 13, Puppet 8); without --site, the host's own (its masters are its Puppet)")
      .addHelpText(
        "after",
        `
Machines are the lab's default: each node is a Debian system with systemd as PID 1, its own
hostname, address and sshd, booted from a cached image built with mmdebstrap from Debian's
packages (a minute or two, once). cloud-init installs the package from the lab's package server
and starts muster-server.service; the provisioner takes it from there. The lab's network namespace
has no route out: machines reach the broker and masters through relays. They need root and
systemd-container, mmdebstrap and socat (./scripts/setup.sh installs them); without them the lab
says so and runs process nodes.

With --site the host keeps only what an operator's workstation has (./.muster/client.yaml, the
site's credentials in .muster/lab/site), the package server with the lab's Debian mirror, the
relays and the admins' webhook receiver: every service is a machine, booted through cloud-init
with the user-data \`muster user-data\` renders for its role.

Examples:
  muster lab up                      4 machines booted through cloud-init (process nodes if this host cannot)
  muster lab up --site               the whole site on Debian 13 with Puppet 8, and 4 nodes
  muster lab up --site --machines 6  the site and 6 nodes
  muster lab up --machines 8         8 machines
  muster lab up --nodes 6            6 process nodes on this host (no root needed)
  muster lab up --machines 1 --vm    one QEMU machine with its own kernel (slow here: ~5-10 min)`,
      )
      .action(async (o: { nodes: string; machines?: string; vm?: boolean; vms?: string; package?: string; timeout: string; fromPackage?: string; site?: boolean; suite?: string }) => {
        const { readLabState, stopLabFromState, stopLabRemains, startLab, toYaml, labWebToken, unpackMuster } = await load();
        if (o.vms !== undefined) {
          if (o.machines !== undefined) throw new MusterError("MUSTER_USAGE", "--vms N is --machines N --vm: give one of them");
          o.machines = o.vms;
          o.vm = true;
        }
        if (o.machines && o.nodes) throw new MusterError("MUSTER_USAGE", "--machines and --nodes choose the kind of node: give one");
        if (o.site && (o.nodes || o.fromPackage)) throw new MusterError("MUSTER_USAGE", `--site runs everything on machines: ${o.nodes ? "--nodes (process nodes)" : "--from-package (host processes)"} does not go with it; --machines N sizes its nodes`);
        if (o.suite !== undefined && !/^[a-z]+$/.test(o.suite)) throw new MusterError("MUSTER_USAGE", `--suite takes a Debian release's codename (trixie, bookworm), not ${JSON.stringify(o.suite)}`);
        if (o.suite && o.nodes) throw new MusterError("MUSTER_USAGE", "--suite chooses the release of machines: process nodes (--nodes) run this host's");
        if (o.site && !o.machines) o.machines = "4";
        // flags that only go with machines, before any default is chosen
        if ((o.vm || o.package) && !o.machines) throw new MusterError("MUSTER_USAGE", `${o.vm ? "--vm" : "--package"} goes with --machines N (for instance \`muster lab up --machines 1${o.vm ? " --vm" : ` --package ${o.package}`}\`)`);
        if (!o.machines && !o.nodes) {
          // machines by default, when this host can run them
          try {
            (await labMachines()).checkMachineHost("nspawn");
            o.machines = "4";
          } catch (e) {
            process.stderr.write(`${ts()} ${yellow("process nodes")}: ${(e as Error).message}\n`);
            o.nodes = "4";
          }
        }
        const n = Number(o.machines ?? o.nodes);
        if (!Number.isInteger(n) || n < 1 || n > 200) throw new MusterError("MUSTER_USAGE", `${o.machines ? "--machines" : "--nodes"} takes a whole number from 1 to 200`);
        if (o.machines && n > 50) throw new MusterError("MUSTER_USAGE", "--machines takes a whole number from 1 to 50 (each machine is a whole system)");
        if (o.package && !existsSync(o.package)) throw new MusterError("MUSTER_USAGE", `--package: no file ${o.package} (build one with \`npm run package\`; it prints the path)`);
        if (o.fromPackage && !existsSync(o.fromPackage)) throw new MusterError("MUSTER_USAGE", `--from-package: no file ${o.fromPackage} (build one with \`npm run package\`; it prints the path)`);
        const machines = o.machines ? { kind: (o.vm ? "vm" : "nspawn") as "vm" | "nspawn", deb: o.package ?? o.fromPackage, imageCache: resolve(".muster", "images") } : undefined;
        if (machines) (await labMachines()).checkMachineHost(machines.kind); // says what to install before anything starts
        if (!o.site && o.suite) {
          // the host's masters run the host's Puppet: a newer agent must not be pointed at an older server
          const host = (await labMachines()).hostRelease().release;
          if (o.suite !== host) throw new MusterError("MUSTER_USAGE", `this lab's Puppet masters run on this host (Debian ${host}'s Puppet), and nodes of ${o.suite} would run a Puppet agent that must not be pointed at a different server version: use --site for the site's own masters (Debian 13, Puppet 8), or leave --suite out`);
        }
        const existing = readLabState(labDir());
        if (existing && running(existing)) {
          process.stdout.write(`The lab is already running (${existing.nodes.length} nodes, broker ${existing.broker}).\nSee \`muster lab status\`, or \`muster lab down\` first to start afresh.\n`);
          return;
        }
        if (existing) await stopLabFromState(labDir()); // leftovers of a lab that died: clear them first
        await stopLabRemains(labDir()); // and of a `lab up` interrupted before it wrote its state
        (await labMachines()).unmountUnder(labDir()); // never delete through a machine's root
        rmSync(labDir(), { recursive: true, force: true });
        mkdirSync(labDir(), { recursive: true });
        const t0 = Date.now();
        const pkg = o.fromPackage ? unpackMuster(o.fromPackage, resolve(labDir(), "pkg")) : undefined;
        if (pkg) process.stderr.write(`${ts()} running muster ${pkg.version} from ${o.fromPackage} (${pkg.bin})\n`);
        // Ctrl-C: the lab's processes are detached and keep running; say how to stop them
        process.once("SIGINT", () => {
          process.stderr.write(`\n${ts()} interrupted: what the lab started keeps running (\`muster lab status\`); \`muster lab down\` stops all of it\n`);
          process.exit(130);
        });
        const progress = (l: string) => process.stderr.write(`${ts()} ${l}\n`);
        const s = o.site
          ? (await (await import("../../lab/site/index.js")).startSite({ dir: labDir(), nodes: n, suite: o.suite, kind: machines!.kind, deb: machines!.deb, imageCache: machines!.imageCache, detached: true, progress })).state
          : (await startLab({ dir: labDir(), nodes: n, detached: true, provisioner: true, bin: pkg?.bin, machines, progress })).state;
        writeClientConfig(s, toYaml);
        process.stderr.write(`${ts()} lab is up; provisioning ${n} nodes${s.web ? `; watch it at ${s.web.url}` : ""}\n`);
        const recs = await followProvisioning(s, s.nodes.map((n) => n.identity), Number(o.timeout) * 1000);
        // provisioned is not ready: a node is ready once it answers in the fleet, on its Puppet certificate
        const done = (await answeringInFleet(s, recs.filter((r) => r.status === "done").map((r) => r.identity))).length;
        // a node that looked up others before they were provisioned (a web node its database master) asks again
        const settled = await (await import("../../lab/settle.js")).settleLookups(s, recs, (l) => process.stderr.write(`${ts()} ${l}\n`)).catch((e: unknown) => ({ ran: [], failed: [{ identity: "the lab", why: (e as Error).message }] }));
        for (const f of settled.failed) process.stderr.write(`${ts()} ${f.identity.padEnd(16)} ${red(`Puppet run again: ${f.why}`)}\n`);
        process.stdout.write(`\n${(await import("./provision.js")).renderStatusTable(recs)}\n\n`);
        process.stdout.write(`${bold(`${done} of ${n} nodes provisioned and answering in the fleet`)} in ${((Date.now() - t0) / 1000).toFixed(0)} s (lab start included). Notifications: ${s.receiver.file}\n\n`);
        if (s.site) process.stdout.write(`${siteSummary(s)}\n\n`);
        if (s.web) process.stdout.write(`${webLogin(s.web, labWebToken)}\n\n`);
        if (s.machines) process.stdout.write(`Machines: ssh into one with \`muster ssh -I ${s.nodes[0]?.identity}\`, run a command in it with \`muster lab exec ${s.nodes[0]?.identity} -- systemctl status muster-server\`, reboot or cut its power with \`muster lab power\`.\n\n`);
        process.stdout.write(`The lab keeps running. Try:\n  muster ping\n  muster find -F country=de\n  muster provision status\n  muster facts country\n  muster puppet runall 2 -C role::web\n  muster find -W "environment=development customer=acme mysql::master"\n  muster nrpe check_load -W "environment=development customer=acme mysql::master"\n  muster rpc rpcutil daemon_stats -I ${s.nodes[0]?.identity ?? "node01.eu.lab"}\n  muster lab add ${s.machines ? "--machines" : "--count"} 2\n  muster lab status\n  muster lab down\n`);
        process.exitCode = done === n && settled.failed.length === 0 ? 0 : 2;
      }),
  );
  lab.addCommand(
    new Command("down").description("Stop everything the lab started (machines are shut down cleanly) and remove its state").action(async () => {
      const { stopLabFromState, stopLabRemains } = await load();
      const stopped = await stopLabFromState(labDir());
      stopped.push(...(await stopLabRemains(labDir()))); // what a lab that died or an interrupted `lab up` left
      const { unmountUnder } = await labMachines();
      unmountUnder(labDir()); // never delete through a machine's mounted root
      rmSync(resolve(".muster", "lab"), { recursive: true, force: true });
      if (existsSync(clientConfig())) rmSync(clientConfig());
      process.stdout.write(stopped.length ? `stopped: ${stopped.join(", ")}\n` : "no lab was running\n");
    }),
  );
  lab.addCommand(
    new Command("status")
      .description("Which lab processes run, and where provisioning stands")
      .option("--json", "machine-readable")
      .action(async (o: { json?: boolean }) => {
        const { readLabState, labPids, MusterClient, ProvisionState, connectedUsers, labWebToken } = await load();
        const s = readLabState(labDir());
        if (!s) {
          process.stdout.write("no lab here (start one with `muster lab up`)\n");
          process.exitCode = 1;
          return;
        }
        const procs = labPids(s).map((p) => ({ ...p, alive: isAlive(p.pid) }));
        let recs: NodeRecord[] = [];
        if (running(s)) {
          const client = await MusterClient.connect({ brokers: labBrokers(s), collective: s.collective, name: "muster-lab-status", tls: s.tls?.admin });
          recs = await (await ProvisionState.open(client, DEFAULT_STATE_BUCKET)).list();
          await client.close();
        }
        if (o.json) {
          process.stdout.write(`${JSON.stringify({ state: s, processes: procs, provisioning: recs }, null, 2)}\n`);
          return;
        }
        process.stdout.write(`lab in ${s.dir}\nbroker ${s.broker} (TLS, CA ${s.tls?.ca ?? "none"}), collective ${s.collective}, waiting nodes in ${s.provisioningCollective ?? s.collective}\n\n`);
        const users = running(s) && s.monitor ? await connectedUsers(s.monitor) : new Map<string, string>(); // a nicety: the list stands without it
        for (const p of procs) {
          const id = p.name.startsWith("muster server ") ? p.name.slice("muster server ".length) : p.name === "provisioner" ? undefined : "";
          const user = id === undefined ? [...users.entries()].find(([n]) => n.startsWith("muster-provisioner:"))?.[1] : id ? users.get(`muster-server:${id}`) : undefined;
          process.stdout.write(`  ${p.alive ? green("running") : red("stopped")}  ${String(p.pid).padStart(7)}  ${p.name}${user ? `  (broker user ${user})` : ""}\n`);
        }
        for (const m of s.masters) process.stdout.write(`\n  master ${m.identity}: https://${m.host}:${m.port} (${m.region.country}, ${m.region.region})`);
        if (s.machines) {
          const { machineLeader } = await labMachines();
          process.stdout.write(`\n\n  machines (${s.machines.kind === "vm" ? "QEMU" : "systemd-nspawn"}, image ${s.machines.imageKey}, network namespace ${s.machines.netns}, package ${s.machines.packages.deb}):`);
          for (const m of labMachinesOf(s)) {
            const on = isAlive(m.pid) && machineLeader(m.machine.dir) !== undefined;
            process.stdout.write(`\n    ${on ? green("on ") : red("off")}  ${m.role.padEnd(11)} ${m.identity.padEnd(17)} ${(m.machine.release ?? "").padEnd(9)} ssh ${m.machine.ssh.host}:${m.machine.ssh.port}  (muster lab exec ${m.identity} -- ...)`);
          }
          if (s.site) process.stdout.write(`\n\n  the site's brokers, as this workstation reaches them: ${s.site.brokers.join(", ")}`);
        }
        if (s.web) process.stdout.write(`\n\n  ${webLogin(s.web, labWebToken).replace(/\n/g, "\n  ")}`);
        process.stdout.write(`\n\n${recs.length ? (await import("./provision.js")).renderStatusTable(recs) : "no provisioning records"}\n`);
        process.exitCode = procs.every((p) => p.alive) ? 0 : 2;
      }),
  );
  lab.addCommand(
    new Command("add")
      .description("Boot new nodes into the running lab, as auto-scaling would, and follow the provisioner taking them unattended")
      .option("--count <n>", "how many nodes (numbered after the highest so far)", "1")
      .option("--machines <n>", "in a lab of machines: how many machines to boot (the same as --count)")
      .option("--country <cc>", `their country: ${LAB_REGIONS.map((r) => `${r.country} (${r.region})`).join(", ")}; default: regions in turn`)
      .option("--identity <name>", "boot a node under this exact name instead (a machine coming back; repeatable); in a site, a site machine's name boots a new machine for that role", (v: string, prev: string[] = []) => [...prev, v])
      .option("--suite <release>", "in a site: the new nodes' Debian release (bookworm: Debian 12 with Puppet 7, as in a fleet mid-upgrade)")
      .option("--no-follow", "return once the nodes wait to be provisioned")
      .option("--timeout <seconds>", "give up following progress after this long", "900")
      .addHelpText(
        "after",
        `
New nodes wait in the provisioning collective with their own bootstrap credentials, exactly like
the first ones (each also gets its broker user for later, when it connects with its Puppet
certificate); the lab's provisioner finds them by their startup event and provisions them with
nobody at the keyboard. \`lab add\` shows their progress until each is done or failed.

Examples:
  muster lab add                         one node, the next region in turn
  muster lab add --count 2 --country de  two nodes in eu-central-1
  muster lab add --identity node03.eu.lab  a machine coming back under an old name
                                          (after \`muster lab remove\` and \`muster decommission\`)
  muster lab add --machines 2            in a lab of machines: two more, booted through cloud-init

Exit code 0 when every new node was provisioned, 2 when any failed or the wait timed out.`,
      )
      .action(async (o: { count: string; machines?: string; country?: string; identity?: string[]; follow: boolean; timeout: string; suite?: string }) => {
        const { labRegionFor, readLabState, MusterClient, ProvisionState, addLabNodes } = await load();
        const count = Number(o.machines ?? o.count);
        if (!Number.isInteger(count) || count < 1 || count > 50) throw new MusterError("MUSTER_USAGE", `${o.machines !== undefined ? "--machines" : "--count"} takes a whole number from 1 to 50`);
        const timeout = Number(o.timeout);
        if (!Number.isFinite(timeout) || timeout <= 0) throw new MusterError("MUSTER_USAGE", "--timeout takes a positive number of seconds");
        if (o.country) labRegionFor(o.country); // a bad country fails before anything starts
        const s = readLabState(labDir());
        if (!s || !running(s)) {
          process.stdout.write("no running lab here (start one with `muster lab up`)\n");
          process.exitCode = 1;
          return;
        }
        if (o.machines && !s.machines) throw new MusterError("MUSTER_USAGE", "this lab's nodes are processes: add them with --count N, or start a lab of machines with `muster lab up --machines N`");
        const t0 = Date.now();
        const { siteMachine } = await import("../../lab/site/roles.js");
        const siteNames = (o.identity ?? []).filter((id) => siteMachine(id));
        if (siteNames.length) {
          // a new machine for a site role, under its fixed name
          if (!s.site) throw new MusterError("MUSTER_USAGE", `${siteNames.join(", ")}: a site machine's name, and this lab is no site (\`muster lab up --site\`)`);
          if (siteNames.length !== o.identity!.length) throw new MusterError("MUSTER_USAGE", "add site machines and nodes in two commands");
          const { addSiteMachine } = await import("../../lab/site/scale.js");
          for (const id of siteNames) await addSiteMachine(s, id, { detached: true, say: (l) => process.stderr.write(`${ts()} ${l}\n`), track: () => undefined });
          process.stdout.write(`${siteNames.join(", ")} up (${((Date.now() - t0) / 1000).toFixed(0)} s)\n`);
          return;
        }
        if (o.identity?.length) {
          // A record left from an earlier machine under that name keeps the provisioner away from it.
          const client = await MusterClient.connect({ brokers: labBrokers(s), collective: s.collective, name: "muster-lab-add", tls: s.tls.admin });
          try {
            const store = await ProvisionState.open(client, DEFAULT_STATE_BUCKET);
            for (const id of o.identity) {
              const old = (await store.get(id))?.record;
              if (old) throw new MusterError("MUSTER_USAGE", `${id} still has a provisioning record (${old.status}${old.master ? `, against ${old.master}` : ""}): the provisioner would not take a new machine under that name. Run \`muster decommission ${id}\` first`);
            }
          } finally {
            await client.close();
          }
        }
        const added = await addLabNodes(s, { count: o.identity?.length ? undefined : count, country: o.country, identities: o.identity, suite: o.suite, detached: true, progress: (l) => process.stderr.write(`${ts()} ${l}\n`) });
        const ids = added.map((n) => n.identity);
        process.stderr.write(`${ts()} ${ids.join(", ")} waiting to be provisioned (${((Date.now() - t0) / 1000).toFixed(1)} s)\n`);
        if (!o.follow) return;
        if (!s.site && (!s.provisioner || !isAlive(s.provisioner.pid))) {
          process.stdout.write(`${yellow("no provisioner runs in this lab")}: the new nodes wait until one does (muster provisioner --config ${s.provisioner?.config ?? ".muster/lab/config/provisioner.yaml"})\n`);
          process.exitCode = 2;
          return;
        }
        const recs = await followProvisioning(s, ids, timeout * 1000, t0);
        const done = recs.filter((r) => r.status === "done" && r.updatedAt >= t0).length;
        process.stdout.write(`\n${(await import("./provision.js")).renderStatusTable(recs)}\n\n${bold(`${done} of ${ids.length} added node(s) provisioned`)} in ${((Date.now() - t0) / 1000).toFixed(0)} s\n`);
        process.exitCode = done === ids.length ? 0 : 2;
      }),
  );
  lab.addCommand(
    new Command("remove")
      .description("Terminate nodes as a cloud would: kill the muster server (a machine: power off and delete its disk), delete the node's directory and broker user")
      .argument("<identity...>", "lab node identities")
      .addHelpText(
        "after",
        `
What the fleet knows of the node stays: its certificate on the master, its provisioning and
registry records. Clean those with \`muster decommission IDENTITY\` (it works on a node that is
already gone). Example:
  muster lab remove node03.eu.lab && muster decommission --wait node03.eu.lab`,
      )
      .action(async (ids: string[]) => {
        const { readLabState, removeLabNode } = await load();
        const s = readLabState(labDir());
        if (!s) {
          process.stdout.write("no lab here (start one with `muster lab up`)\n");
          process.exitCode = 1;
          return;
        }
        const inSite = (id: string) => s.site?.machines.some((m) => m.identity === id) ?? false;
        for (const id of ids) if (!s.nodes.some((n) => n.identity === id) && !inSite(id)) throw new MusterError("MUSTER_USAGE", `no node ${id} in the lab (nodes: ${s.nodes.map((n) => n.identity).join(", ") || "none"}${s.site ? `; site machines: ${s.site.machines.map((m) => m.identity).join(", ")}` : ""})`);
        for (const id of ids.filter(inSite)) {
          await (await import("../../lab/site/scale.js")).removeSiteMachine(s, id);
          process.stdout.write(`${id}: powered off, its disk deleted (\`muster lab add --identity ${id}\` makes it anew)\n`);
        }
        if (ids.every(inSite)) return;
        for (const id of ids.filter((x) => !inSite(x))) {
          const n = await removeLabNode(s, id, async (x) => {
            if (x.machine) await (await labMachines()).powerOffMachine(x.machine.dir, x.pid, { cut: true });
            else await stopPid(x.pid, 5000);
          });
          process.stdout.write(n.machine ? `${id}: powered off, its disk ${n.dir} deleted\n` : `${id}: terminated (pid ${n.pid}), ${n.dir} deleted\n`);
        }
        process.stdout.write(`Its certificate and records remain: \`muster decommission ${ids.join(" ")}\`\n`);
      }),
  );
  lab.addCommand(
    new Command("exec")
      .description("Run a command inside a lab machine, as root (no network or sshd needed)")
      .argument("<identity>", "the machine")
      .argument("<command...>", "the command and its arguments (after --)")
      .addHelpText("after", "\nExamples:\n  muster lab exec node01.eu.lab -- systemctl status muster-server\n  muster lab exec node01.eu.lab -- cloud-init status --long\n  muster lab exec node01.eu.lab -- facter networking.ip fqdn\n\nExit code: the command's. QEMU machines: use `muster ssh -I <identity> -- <command>`.")
      .action(async (identity: string, command: string[]) => {
        const s = await runningLab();
        if (!s) return;
        const n = labMachine(s, identity);
        const { keepContinued, machineExecArgv } = await labMachines();
        const [cmd, ...args] = machineExecArgv(n.machine.dir, command) as [string, ...string[]];
        const { spawn } = await import("node:child_process");
        const child = spawn(cmd, args, { stdio: "inherit" });
        const unwatch = keepContinued(child.pid); // a machine shutting down must not leave it stopped for good
        process.exitCode = await new Promise<number>((res) => child.once("close", (code, sig) => res(code ?? (sig ? 128 : 1))));
        unwatch();
      }),
  );
  lab.addCommand(
    new Command("power")
      .description("A lab machine's power: on, off (a clean shutdown), cut (killed outright, as a power failure), reboot")
      .argument("<action>", "on | off | cut | reboot")
      .argument("<identity...>", "machines")
      .addHelpText("after", "\nExamples:\n  muster lab power cut node02.us.lab     the machine dies mid-whatever, no goodbye\n  muster lab power on node02.us.lab      it boots again from the same disk\n  muster lab power reboot node01.eu.lab  systemctl reboot inside it")
      .action(async (action: string, ids: string[]) => {
        if (!["on", "off", "cut", "reboot"].includes(action)) throw new MusterError("MUSTER_USAGE", `power takes on, off, cut or reboot, not ${JSON.stringify(action)}`);
        const s = await runningLab();
        if (!s) return;
        const nodes = ids.map((id) => labMachine(s, id));
        const { machineLeader, machineExecAsync, powerOnMachine, powerOffMachine } = await labMachines();
        const { stateFile } = await load();
        for (const n of nodes) {
          const on = isAlive(n.pid) && machineLeader(n.machine.dir) !== undefined;
          if (action === "on") {
            if (on) process.stdout.write(`${n.identity}: already on\n`);
            else {
              setMachinePid(s, n.identity, (n.pid = powerOnMachine(n.machine.dir, true).pid));
              process.stdout.write(`${n.identity}: powered on\n`);
            }
          } else if (!on) process.stdout.write(`${n.identity}: already off\n`);
          else if (action === "reboot") {
            await machineExecAsync(n.machine.dir, ["systemctl", "reboot"]);
            process.stdout.write(`${n.identity}: rebooting\n`);
          } else {
            await powerOffMachine(n.machine.dir, n.pid, { cut: action === "cut" });
            process.stdout.write(`${n.identity}: ${action === "cut" ? "power cut" : "powered off"}\n`);
          }
        }
        writeFileSync(stateFile(s.dir), JSON.stringify(s, null, 2));
      }),
  );
  lab.addCommand(
    new Command("publish")
      .description("Add a .deb to the lab's signed apt repository, which the machines install from: they upgrade with apt-get")
      .argument("<deb>", "the package (npm run package, or node packaging/build-deb.mjs --version V for another version)")
      .addHelpText("after", "\nExample:\n  node packaging/build-deb.mjs --version 0.2.0 --compress gzip --out /tmp/n1\n  muster lab publish /tmp/n1/muster_0.2.0_amd64.deb\n  muster lab exec node01.eu.lab -- sh -c 'apt-get update && apt-get install -y --only-upgrade muster'")
      .action(async (deb: string) => {
        const s = await runningLab();
        if (!s) return;
        if (!s.machines) throw new MusterError("MUSTER_USAGE", "this lab's nodes are processes (they run the checkout's muster): publish is for a lab of machines");
        if (!existsSync(deb) || !deb.endsWith(".deb")) throw new MusterError("MUSTER_USAGE", `${deb}: not a .deb file (build one with \`npm run package\`)`);
        const { publishToRepo } = await labMachines();
        await publishToRepo(resolve(s.machines.packages.dir, "apt"), s.machines.packages.gnupgHome, resolve(deb));
        process.stdout.write(`published ${deb} to ${s.machines.packages.url} (the machines' repository); on a machine: apt-get update && apt-get install --only-upgrade muster\n`);
      }),
  );
  lab.addCommand(
    new Command("machine-run")
      .description("(lab internal) a machine's power supervisor: boots it, reboots it, powers it off on SIGTERM")
      .argument("<dir>", "the machine's directory")
      .action(async (dir: string) => {
        const { superviseMachine } = await labMachines();
        await superviseMachine(resolve(dir));
      }),
    { hidden: true },
  );
  lab.addCommand(
    new Command("serve-packages")
      .description("(lab internal) the lab's package server: a directory over HTTP on loopback")
      .requiredOption("--dir <dir>", "what to serve")
      .option("--host <addr>", "loopback address", "127.0.0.1")
      .option("--port <n>", "port", "0")
      .action(async (o: { dir: string; host: string; port: string }) => {
        const { startPackageServer } = await labMachines();
        const srv = await startPackageServer({ dir: resolve(o.dir), host: o.host, port: Number(o.port), log: (l) => process.stdout.write(`${new Date().toISOString()} ${l}\n`) });
        // Handlers before the ready line: a supervisor may stop us the moment it reads it.
        const stopping = new Promise<void>((res) => {
          process.once("SIGTERM", () => res());
          process.once("SIGINT", () => res());
        });
        process.stdout.write(`package server on ${srv.url}: ready\n`);
        await stopping;
        await srv.close();
      }),
    { hidden: true },
  );
  lab.addCommand(receiverCommand(), { hidden: true });
  return lab;
}
