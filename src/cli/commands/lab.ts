import { Command } from "commander";
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { MusterError } from "../../errors.js";
import { isAlive, stopPid } from "../../lab/processes.js";
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
const load = async () => {
  const [lab, scale, { MusterClient }, { ProvisionState }, { stringify: toYaml }, { unpackMuster }] = await Promise.all([import("../../lab/lab.js"), import("../../lab/scale.js"), import("../../client/client.js"), import("../../provisioner/state.js"), import("yaml"), import("../../lab/package.js")]);
  return { ...lab, ...scale, MusterClient, ProvisionState, toYaml, unpackMuster };
};

function running(s: LabState): boolean {
  return isAlive(s.natsPid);
}

/** Live progress of these nodes' provisioning until each is done or failed; `since`: ignore records older than this (an earlier machine's). */
async function followProvisioning(s: LabState, ids: string[], timeoutMs: number, since = 0): Promise<NodeRecord[]> {
  const { MusterClient, ProvisionState } = await load();
  const client = await MusterClient.connect({ brokers: [s.broker], collective: s.collective, name: "muster-lab-follow", tls: s.tls?.admin });
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

/** Where the lab's console listens and how to log in (the tokens are the lab's own, loopback only). */
function webLogin(w: LabWeb, labWebToken: (file: string, role: Role) => string | undefined): string {
  const op = labWebToken(w.tokens_file, "operator");
  const viewer = labWebToken(w.tokens_file, "viewer");
  return `web console: ${w.url}\n  log in with the operator token ${op ?? "(see the file)"} or the viewer token ${viewer ?? "(see the file)"} (both in ${w.tokens_file})`;
}

export function labCommand(): Command {
  const lab = new Command("lab").description("A local fleet on loopback: broker, two real puppetservers, nodes, notifier and provisioner");
  lab.addCommand(
    new Command("up")
      .description("Start the lab and provision every node end to end, with live progress; leaves the lab running")
      .option("--nodes <n>", "how many nodes to provision", "4")
      .option("--timeout <seconds>", "give up following progress after this long", "900")
      .option("--from-package <file>", "run the lab's muster processes from this .deb (npm run package), unpacked into .muster/lab/pkg, instead of this checkout")
      .action(async (o: { nodes: string; timeout: string; fromPackage?: string }) => {
        const { readLabState, stopLabFromState, startLab, toYaml, labWebToken, unpackMuster } = await load();
        const n = Number(o.nodes);
        if (!Number.isInteger(n) || n < 1 || n > 200) throw new MusterError("MUSTER_USAGE", "--nodes takes a whole number from 1 to 200");
        if (o.fromPackage && !existsSync(o.fromPackage)) throw new MusterError("MUSTER_USAGE", `--from-package: no file ${o.fromPackage} (build one with \`npm run package\`; it prints the path)`);
        const existing = readLabState(labDir());
        if (existing && running(existing)) {
          process.stdout.write(`The lab is already running (${existing.nodes.length} nodes, broker ${existing.broker}).\nSee \`muster lab status\`, or \`muster lab down\` first to start afresh.\n`);
          return;
        }
        if (existing) await stopLabFromState(labDir()); // leftovers of a lab that died: clear them first
        rmSync(labDir(), { recursive: true, force: true });
        mkdirSync(labDir(), { recursive: true });
        const t0 = Date.now();
        const pkg = o.fromPackage ? unpackMuster(o.fromPackage, resolve(labDir(), "pkg")) : undefined;
        if (pkg) process.stderr.write(`${ts()} running muster ${pkg.version} from ${o.fromPackage} (${pkg.bin})\n`);
        const started = await startLab({ dir: labDir(), nodes: n, detached: true, provisioner: true, bin: pkg?.bin, progress: (l) => process.stderr.write(`${ts()} ${l}\n`) });
        const s = started.state;
        writeFileSync(clientConfig(), toYaml({ brokers: [s.broker], collective: s.collective, tls: s.tls.admin }));
        process.stderr.write(`${ts()} lab is up; provisioning ${n} nodes${s.web ? `; watch it at ${s.web.url}` : ""}\n`);
        const recs = await followProvisioning(s, s.nodes.map((n) => n.identity), Number(o.timeout) * 1000);
        const done = recs.filter((r) => r.status === "done").length;
        process.stdout.write(`\n${(await import("./provision.js")).renderStatusTable(recs)}\n\n`);
        process.stdout.write(`${bold(`${done} of ${n} nodes provisioned`)} in ${((Date.now() - t0) / 1000).toFixed(0)} s (lab start included). Notifications: ${s.receiver.file}\n\n`);
        if (s.web) process.stdout.write(`${webLogin(s.web, labWebToken)}\n\n`);
        process.stdout.write(`The lab keeps running. Try:\n  muster ping\n  muster find -F country=de\n  muster provision status\n  muster facts country\n  muster puppet runall 2 -C role::web\n  muster find -W "environment=development customer=acme mysql::master"\n  muster nrpe check_load -W "environment=development customer=acme mysql::master"\n  muster rpc rpcutil daemon_stats -I ${s.nodes[0]?.identity ?? "node01.eu.lab"}\n  muster lab add --count 2\n  muster lab status\n  muster lab down\n`);
        process.exitCode = done === n ? 0 : 2;
      }),
  );
  lab.addCommand(
    new Command("down").description("Stop everything the lab started and remove its state").action(async () => {
      const { stopLabFromState } = await load();
      const stopped = await stopLabFromState(labDir());
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
          const client = await MusterClient.connect({ brokers: [s.broker], collective: s.collective, name: "muster-lab-status", tls: s.tls?.admin });
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
        if (s.web) process.stdout.write(`\n\n  ${webLogin(s.web, labWebToken).replace(/\n/g, "\n  ")}`);
        process.stdout.write(`\n\n${recs.length ? (await import("./provision.js")).renderStatusTable(recs) : "no provisioning records"}\n`);
        process.exitCode = procs.every((p) => p.alive) ? 0 : 2;
      }),
  );
  lab.addCommand(
    new Command("add")
      .description("Boot new nodes into the running lab, as auto-scaling would, and follow the provisioner taking them unattended")
      .option("--count <n>", "how many nodes (numbered after the highest so far)", "1")
      .option("--country <cc>", `their country: ${LAB_REGIONS.map((r) => `${r.country} (${r.region})`).join(", ")}; default: regions in turn`)
      .option("--identity <name>", "boot a node under this exact name instead (a machine coming back; repeatable)", (v: string, prev: string[] = []) => [...prev, v])
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

Exit code 0 when every new node was provisioned, 2 when any failed or the wait timed out.`,
      )
      .action(async (o: { count: string; country?: string; identity?: string[]; follow: boolean; timeout: string }) => {
        const { labRegionFor, readLabState, MusterClient, ProvisionState, addLabNodes } = await load();
        const count = Number(o.count);
        if (!Number.isInteger(count) || count < 1 || count > 50) throw new MusterError("MUSTER_USAGE", "--count takes a whole number from 1 to 50");
        const timeout = Number(o.timeout);
        if (!Number.isFinite(timeout) || timeout <= 0) throw new MusterError("MUSTER_USAGE", "--timeout takes a positive number of seconds");
        if (o.country) labRegionFor(o.country); // a bad country fails before anything starts
        const s = readLabState(labDir());
        if (!s || !running(s)) {
          process.stdout.write("no running lab here (start one with `muster lab up`)\n");
          process.exitCode = 1;
          return;
        }
        const t0 = Date.now();
        if (o.identity?.length) {
          // A record left from an earlier machine under that name keeps the provisioner away from it.
          const client = await MusterClient.connect({ brokers: [s.broker], collective: s.collective, name: "muster-lab-add", tls: s.tls.admin });
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
        const added = await addLabNodes(s, { count: o.identity?.length ? undefined : count, country: o.country, identities: o.identity, detached: true, progress: (l) => process.stderr.write(`${ts()} ${l}\n`) });
        const ids = added.map((n) => n.identity);
        process.stderr.write(`${ts()} ${ids.join(", ")} waiting to be provisioned (${((Date.now() - t0) / 1000).toFixed(1)} s)\n`);
        if (!o.follow) return;
        if (!s.provisioner || !isAlive(s.provisioner.pid)) {
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
      .description("Terminate nodes as a cloud would: kill the muster server, delete the node's directory and broker user")
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
        for (const id of ids) if (!s.nodes.some((n) => n.identity === id)) throw new MusterError("MUSTER_USAGE", `no node ${id} in the lab (nodes: ${s.nodes.map((n) => n.identity).join(", ") || "none"})`);
        for (const id of ids) {
          const n = await removeLabNode(s, id, (x) => stopPid(x.pid, 5000));
          process.stdout.write(`${id}: terminated (pid ${n.pid}), ${n.dir} deleted\n`);
        }
        process.stdout.write(`Its certificate and records remain: \`muster decommission ${ids.join(" ")}\`\n`);
      }),
  );
  lab.addCommand(receiverCommand(), { hidden: true });
  return lab;
}
