import { mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { MusterClient } from "../../client/client.js";
import { MusterError } from "../../errors.js";
import { enrollNodeKey, ensureFleetStores } from "../../fleet/stores.js";
import { defaultCallerName } from "../../security/keys.js";
import { LAB_COLLECTIVE, LAB_PROVISIONING_COLLECTIVE } from "../names.js";
import * as machines from "../machines/index.js";
import type { BootMachineContext, LabMachinesState, LabPackages, MachineImage, VmImage } from "../machines/index.js";
import { freePort } from "../ports.js";
import { spawnMuster, type MusterProcess } from "../processes.js";
import type { StepRun, StepTable } from "../runner.js";
import { rememberPid, writeLabState, type LabNode, type LabState, type SiteMachineState } from "../state.js";
import { waitForNodes, type LabReach } from "../waits.js";
import { prepareSiteFiles, writeClientsCa, writePuppetCode, type SiteFiles } from "./files.js";
import type { SiteShape, SiteStep } from "./plan.js";
import { puppetDbName, shortName, siteBrokerUrls, siteHostsLines, siteMachine, siteMachines, SITE_PORTS } from "./roles.js";
import { PUPPETDB_CERT_FILES, PUPPETDB_PORTS } from "../../config/puppetdb-site.js";
import { MASTER_FILES } from "../../config/site.js";
import { siteRenderArgv } from "./render.js";
import { need, siteReach, siteState, siteTls, type SiteReach, type SiteRun } from "./run.js";

export type { SiteRun } from "./run.js";
import { machineUp, siteExec, waitForCluster, waitForConsole } from "./reach.js";
import { placePuppetDbTls, waitForPuppetDb } from "./puppetdb.js";
import { linkMirror, pushToBrokers, readWhenThere, RECEIVER_RELAY_PORT, siteRenderContext } from "./operator.js";

// One implementation per kind of step of the site's plan (site/plan.ts), run by runner.ts: the
// operator's side on the host (files, mirror, relays, receiver) and the machines, each booted with
// its role's user-data. Each notes what it started, so a failure anywhere stops exactly that.


function keep(run: SiteRun, step: StepRun, name: string, p: MusterProcess, o: { machine?: string; graceMs?: number } = {}): void {
  rememberPid(run.dir, p.pid);
  if (o.machine) run.servers.set(o.machine, p);
  step.started(name, () => p.stop("SIGTERM", o.graceMs));
}

export const SITE_STEPS: StepTable<SiteStep, SiteRun> = {
  "check-host": ({ kind }) => machines.checkMachineHost(kind),

  "site-files"({ nodes }, _step, run) {
    run.files = prepareSiteFiles(run.dir, nodes, `http://${machines.RELAY_ADDRESS}:${RECEIVER_RELAY_PORT}/`);
  },

  async "site-image"({ release, kind, cache }, _step, run) {
    run.image = await machines.labImage(kind, cache ?? resolve(".muster", "images"), run.say, { release, site: { hosts: siteHostsLines() } });
  },

  "machine-network"(_args, step, run) {
    step.started("lab network", () => machines.clearMachineRemains(run.dir));
    run.network = machines.makeLabNetwork(run.dir, 0, run.say);
  },

  async "site-packages"({ deb }, step, run) {
    run.packages = await machines.startLabPackages({ labDir: run.dir, deb, detached: run.o.detached, track: (name, p) => keep(run, step, name, p), progress: run.say });
    // the lab's Debian mirror (built with the image) and the masters' Puppet code, on the same server
    const mirror = need(run, "image").image.mirror;
    if (!mirror) throw new MusterError("MUSTER_USAGE", "the site's image has no Debian mirror: its spec asked for none");
    linkMirror(run.packages.dir, run.o.suite, mirror);
    writePuppetCode(join(run.packages.dir, "puppet-code.tar.gz"));
  },

  async receiver(_args, step, run) {
    const port = await freePort("127.0.0.1");
    const file = join(run.dir, "notifications.jsonl");
    mkdirSync(join(run.dir, "logs"), { recursive: true });
    const proc = spawnMuster(["lab", "receiver", "--file", file, "--port", String(port)], { logFile: join(run.dir, "logs", "receiver.log"), detached: run.o.detached });
    keep(run, step, "webhook receiver", proc);
    run.receiver = { url: `http://127.0.0.1:${port}/`, file, pid: proc.pid };
  },

  async "site-relays"(_args, step, run) {
    const network = need(run, "network");
    const ns = machines.netnsPath(network.netns);
    const receiverPort = Number(new URL(need(run, "receiver").url).port);
    const specs: machines.RelaySpec[] = [
      { name: "packages", listen: { host: machines.RELAY_ADDRESS, port: machines.PACKAGE_PORT, netns: ns }, target: { host: "127.0.0.1", port: machines.packageServerPort(need(run, "packages")) } },
      { name: "receiver", listen: { host: machines.RELAY_ADDRESS, port: RECEIVER_RELAY_PORT, netns: ns }, target: { host: "127.0.0.1", port: receiverPort } },
    ];
    const reach: SiteReach = { brokers: [], web: "", registry: "" };
    // this workstation reaches the site through loopback aliases, one per machine, on free ports
    const toMachine = async (m: ReturnType<typeof siteMachines>[number], name: string, port: number) => {
      const local = await freePort(m.hostAlias);
      specs.push({ name: `${name}`, listen: { host: m.hostAlias, port: local }, target: { host: m.address, port, netns: ns } });
      return `${m.hostAlias}:${local}`;
    };
    for (const m of siteMachines()) {
      if (m.role === "broker") {
        const short = shortName(m.identity);
        reach.brokers.push({ identity: m.identity, client: `tls://${await toMachine(m, short, SITE_PORTS.nats)}`, monitor: `http://${await toMachine(m, `${short}-monitor`, SITE_PORTS.natsMonitor)}` });
      } else if (m.role === "console") {
        reach.web = `https://${await toMachine(m, "web", SITE_PORTS.web)}/`;
        reach.registry = `http://${await toMachine(m, "registry", SITE_PORTS.registry)}`;
      }
    }
    run.relays = await machines.startRelays(specs, network.socketDir, { logDir: join(run.dir, "logs"), detached: run.o.detached, track: (name, p) => keep(run, step, name, p) });
    run.reach = reach;
    run.say(`lab network ${network.netns}: the site on 10.77.2.0/24, nodes on 10.77.1.0/24, no route out; this workstation reaches the brokers on ${reach.brokers.map((b) => b.client).join(", ")} and the console on ${reach.web}`);
  },

  async "site-machines-ready"({ kind }, _step, run) {
    const ms = machines.labMachinesState({ kind, image: need(run, "image"), network: need(run, "network"), packages: need(run, "packages"), relays: need(run, "relays"), natsPort: SITE_PORTS.nats, ssh: machines.labSshKey(run.dir) });
    run.machines = ms;
    const files = need(run, "files");
    const boot = await machines.machineBootContext(run.dir, ms, files.creds.ca, files.creds.keys.provisioner.publicKey, run.o.detached, () => undefined);
    // nodes name the site's three brokers, and obey the console too (a runall from it)
    run.boot = { ...boot, brokers: siteBrokerUrls(), trusted: [...boot.trusted, { name: "console", key: files.creds.keys.console.publicKey }] };
    run.say(`powering on the site (${siteMachines().length} machines) and ${run.o.nodes} node(s), ${kind === "vm" ? "QEMU" : "systemd-nspawn"}, Debian ${run.o.suite}, image ${ms.imageKey}`);
  },

  async "boot-site-machine"({ identity }, step, run) {
    const m = siteMachine(identity)!;
    const files = need(run, "files");
    const boot = { ...need(run, "boot"), track: (name: string, p: MusterProcess) => keep(run, step, name, p) };
    const dir = machines.machineDir(run.dir, identity);
    await machines.freshMachineDir(boot.ms, dir, identity);
    const argv = siteRenderArgv(siteRenderContext(need(run, "machines"), files), m);
    const { machine, proc } = await machines.bootMachine(boot, { identity, slot: m.slot, argv, ...(m.hostname ? { hostname: m.hostname } : {}) });
    keep(run, step, `machine ${identity}`, proc, { machine: identity, graceMs: 60_000 });
    run.site.push({ identity, role: m.role, address: m.address, pid: proc.pid, machine });
  },

  async "boot-site-node"({ identity, region, serial, puppet }, step, run) {
    const boot = { ...need(run, "boot"), track: (name: string, p: MusterProcess) => keep(run, step, name, p) };
    const { node, proc } = await machines.bootLabMachine(boot, { identity, region, serial, role: puppet });
    keep(run, step, `machine ${identity}`, proc, { machine: identity, graceMs: 60_000 });
    run.nodes.push(node);
  },

  "ssh-config"(_args, _step, run) {
    machines.writeSshConfig(need(run, "machines"), [...run.site, ...run.nodes]);
  },

  "save-state"(_args, _step, run) {
    run.state ??= siteState(run);
    writeLabState(run.state);
  },

  async "machine-up"({ identity, units, timeoutMs }, step, run) {
    const m = run.site.find((x) => x.identity === identity)!;
    await machineUp(m, units, timeoutMs, step.signal, () => (run.servers.get(identity)?.exitCode() !== undefined ? `${identity} powered off before it was up (see ${join(m.machine.dir, "console.log")})` : undefined), run.say);
    run.say(`${identity} is up (${m.role}: ${units.join(", ")}) ${((Date.now() - m.machine.poweredOnAt) / 1000).toFixed(0)} s after power on`);
  },

  async "wait-brokers"({ timeoutMs }, step, run) {
    const files = need(run, "files");
    const brokers = need(run, "reach").brokers;
    const members = brokers.map((b) => {
      const machine = run.site.find((x) => x.identity === b.identity)!;
      return {
        server: shortName(b.identity),
        monitor: b.monitor,
        restart: async () => {
          const r = await siteExec(machine, ["systemctl", "restart", "nats-server.service"]);
          if (r.status !== 0) throw new MusterError("MUSTER_USAGE", `nats-server on ${b.identity} did not restart: ${r.stderr.trim()}`);
        },
        complaints: async () => {
          const r = await siteExec(machine, ["journalctl", "-u", "nats-server", "-o", "cat", "--no-pager", "--grep", "\\[(ERR|WRN)\\]", "-n", "8"]);
          return r.stdout.trimEnd().replace(/^/gm, "  ");
        },
      };
    });
    await waitForCluster(brokers.map((b) => b.client), siteTls(files).admin, timeoutMs, step.signal, members, run.say);
    run.say(`the brokers' cluster answers: ${need(run, "reach").brokers.map((b) => b.identity).join(", ")} with JetStream`);
  },

  async "site-stores"({ enroll }, _step, run) {
    // docs/deploy.md#3-the-broker, with the operator's admin credential: muster broker stores
    // --replicas 3, then muster key enroll for each site machine whose node key the operator made
    const files = need(run, "files");
    const client = await MusterClient.connect({ brokers: need(run, "reach").brokers.map((b) => b.client), collective: LAB_COLLECTIVE, name: "muster-lab-site-stores", tls: siteTls(files).admin });
    try {
      await ensureFleetStores(client, { replicas: need(run, "reach").brokers.length });
      for (const identity of enroll) {
        const plan = await enrollNodeKey(client, { identity, pubkey: files.creds.nodeKeys[identity]!.publicKey, by: defaultCallerName() });
        if (plan.act === "refuse") throw new MusterError("MUSTER_USAGE", `enrolling ${identity}: ${plan.why}`);
      }
    } finally {
      await client.close();
    }
    run.say(`the fleet's stores made (3 copies each), node keys enrolled: ${enroll.join(", ")}`);
  },

  async "site-puppetdb"({ masters, timeoutMs }, step, run) {
    // PuppetDB's TLS from each master's CA, under the name that master reaches it by (docs/deploy.md
    // section 10), then the wait until it serves in a run started after the files were written;
    // when it did is kept: a node whose production run began earlier is not in PuppetDB (the
    // masters' terminus drops what it cannot send, soft_write_failure), and `lab up` runs it again
    const cas: string[] = [];
    const pdbCerts: { name: string; cert: string; key: string }[] = [];
    for (const id of masters) {
      const m = run.site.find((x) => x.identity === id)!;
      cas.push(await readWhenThere(m, MASTER_FILES.puppetCa, timeoutMs, step.signal));
      const cert = await readWhenThere(m, PUPPETDB_CERT_FILES.cert, timeoutMs, step.signal);
      const key = await siteExec(m, ["cat", PUPPETDB_CERT_FILES.key]);
      if (key.status !== 0) throw new MusterError("MUSTER_USAGE", `${id} made PuppetDB's certificate but not its key (${PUPPETDB_CERT_FILES.key}): ${key.stderr.trim()}`);
      pdbCerts.push({ name: puppetDbName(siteMachine(id)!.region!), cert, key: key.stdout });
    }
    const consoleMachine = run.site.find((x) => x.role === "console")!;
    const { allow, before } = await placePuppetDbTls(consoleMachine, masters, pdbCerts, cas);
    run.say(`PuppetDB on ${consoleMachine.identity} serves TLS with a certificate from each master's CA (${pdbCerts.map((c) => c.name).join(", ")}), for ${allow.join(", ")}`);
    await waitForPuppetDb(consoleMachine, timeoutMs, step.signal, before);
    need(run, "state").site!.puppetdbSince = Date.now(); // saved with lab.json at the site's last step
    run.say(`PuppetDB runs on ${consoleMachine.identity} (ports ${PUPPETDB_PORTS.plain} on loopback, ${PUPPETDB_PORTS.ssl} TLS)`);
  },

  async "trust-masters"({ masters, timeoutMs }, step, run) {
    // each master made its Puppet CA in its user-data (puppetserver ca setup); the brokers trust it
    // once it is in their clients-ca.pem and they reload, as docs/deploy.md section 4 says
    const files = need(run, "files");
    const cas: string[] = [];
    for (const id of masters) cas.push(await readWhenThere(run.site.find((x) => x.identity === id)!, MASTER_FILES.puppetCa, timeoutMs, step.signal));
    writeClientsCa(files, cas);
    await pushToBrokers(run.site, files.clientsCa, "/etc/nats/clients-ca.pem");
    run.say(`the brokers trust the masters' Puppet CAs (${masters.join(", ")}): clients-ca.pem copied to each, nats-server reloaded`);
  },

  async "wait-fleet"({ identities, timeoutMs }, step, run) {
    await waitForNodes(siteReach(run), identities, timeoutMs, "fleet", undefined, () => (step.signal.aborted ? "no longer waited for: the lab's start was abandoned" : undefined));
    run.say(`in the fleet: ${identities.join(", ")}`);
  },

  async "wait-console"({ timeoutMs }, step, run) {
    const files = need(run, "files");
    await waitForConsole(need(run, "reach"), files, timeoutMs, step.signal);
    run.say(`registry and console answer (${need(run, "reach").web})`);
  },

  async "wait-provisioning"({ identities, timeoutMs }, step, run) {
    run.say("waiting for the nodes: boot, cloud-init, the package installed, muster-server waiting to be provisioned");
    const found = (id: string) => run.say(machines.machineWaiting(run.nodes.find((n) => n.identity === id)!));
    await waitForNodes(siteReach(run), identities, timeoutMs, "provisioning", found, () => (step.signal.aborted ? "no longer waited for: the lab's start was abandoned" : undefined));
  },
};
