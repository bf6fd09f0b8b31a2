import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse as parseYaml } from "yaml";
import { ensureImage, imageKey, machineImageSpec, mmdebstrapArgv, removeMatching } from "../../src/lab/machines/image.js";
import { decodeMountPath, isMounted, isSupervisorOf, leaderFile, machineExecAsync, machineLeader, machineSupervisor, supervisorFile, type MachineConfig } from "../../src/lab/machines/machine.js";
import { afterBoot, bootArgv } from "../../src/lab/machines/supervisor.js";
import { cmdlineOf, isAlive, livePidOf, pidFileText, stopPid } from "../../src/lab/processes.js";
import { servedPath, startPackageServer } from "../../src/lab/machines/package-server.js";
import { labNetnsName, machineAddress, machineMac, machineName, machineSshAlias, masterRelayAddress, RELAY_ADDRESS } from "../../src/lab/machines/addresses.js";
import { relayArgv } from "../../src/lab/machines/relay.js";
import { INOTIFY_FLOOR, inotifyRaises, makeRoomForMachines } from "../../src/lab/machines/host.js";
import { USER_DATA_COMMAND } from "../../src/lab/machines/packages.js";
import { instanceId, machineFacts, metaData, networkConfig, renderArgv, type BootMachineContext } from "../../src/lab/machines/seed.js";
import { sshConfigText } from "../../src/lab/machines/ssh.js";
import { labRole } from "../../src/lab/roles.js";
import { LAB_REGIONS } from "../../src/lab/regions.js";
import { readFileSync } from "node:fs";
import { spawn, spawnSync } from "node:child_process";
import { eventually, repoRoot, runCli } from "../support/collective.js";

// The pure parts of the lab's machines: addresses, seeds, the image's cache key, the relays' and
// the boot's command lines, and the package server's path rule (plus that server, for real).

test("addresses: machines by number on the lab network, relays apart from them, loopback ssh aliases", () => {
  assert.equal(machineAddress(1), "10.77.1.1");
  assert.equal(machineAddress(254), "10.77.1.254");
  assert.throws(() => machineAddress(0), /1 to 254/);
  assert.throws(() => machineAddress(255), /1 to 254/);
  assert.throws(() => machineAddress(1.5), /1 to 254/);
  assert.equal(masterRelayAddress(0), "10.77.0.11");
  assert.notEqual(masterRelayAddress(0), RELAY_ADDRESS);
  assert.equal(machineSshAlias(7), "127.0.2.7");
  assert.match(machineSshAlias(7), /^127\./, "the operator's side stays on loopback");
  assert.equal(machineMac(10), "52:54:00:4d:01:0a");
  assert.equal(new Set(Array.from({ length: 254 }, (_, i) => machineMac(i + 1))).size, 254);
  // nspawn names the host side of the veth vb-<first 12 characters>: numbered names never clash
  const names = Array.from({ length: 254 }, (_, i) => `vb-${machineName(i + 1)}`.slice(0, 15));
  assert.equal(new Set(names).size, 254);
});

test("one network namespace per lab directory, a valid interface-independent name", () => {
  const a = labNetnsName("/work/main/.muster/lab");
  assert.equal(a, labNetnsName("/work/main/.muster/lab"));
  assert.notEqual(a, labNetnsName("/tmp/muster-e2e-x/lab"));
  assert.match(a, /^muster-[0-9a-f]{10}$/);
});

test("seeds: meta-data names the instance, network-config gives one address and no route out", () => {
  assert.deepEqual(parseYaml(metaData("node01.eu.lab", "node01.eu.lab-1")), { "instance-id": "node01.eu.lab-1", "local-hostname": "node01.eu.lab" });
  const nspawn = parseYaml(networkConfig("10.77.1.3")) as { version: number; ethernets: Record<string, Record<string, unknown>> };
  assert.equal(nspawn.version, 2);
  assert.deepEqual(nspawn.ethernets, { host0: { addresses: ["10.77.1.3/16"] } });
  const vm = parseYaml(networkConfig("10.77.1.3", { mac: machineMac(3) })) as typeof nspawn;
  assert.deepEqual(vm.ethernets.host0, { match: { macaddress: "52:54:00:4d:01:03" }, "set-name": "host0", addresses: ["10.77.1.3/16"] });
  for (const cfg of [nspawn, vm]) assert.ok(!JSON.stringify(cfg).match(/gateway|routes|nameservers/), "no gateway, routes or DNS: nowhere to go");
  assert.notEqual(instanceId("n", 1000), instanceId("n", 2000), "a machine made anew is a new instance: cloud-init runs again");
});

test("the image's cache key changes with anything that goes into it, and only then", () => {
  const base = machineImageSpec({ release: "bookworm", sources: "deb http://deb.debian.org/debian bookworm main\n" });
  assert.equal(imageKey(base), imageKey(machineImageSpec({ release: "bookworm", sources: "deb http://deb.debian.org/debian bookworm main\n" })));
  assert.equal(imageKey(base), imageKey({ ...base, packages: [...base.packages].reverse() }), "package order does not matter");
  const variants = [
    { ...base, release: "trixie" },
    { ...base, sources: "deb http://deb.debian.org/debian bookworm main contrib\n" },
    { ...base, packages: [...base.packages, "vim"] },
    { ...base, files: { ...base.files, "/etc/x": "y" } },
    machineImageSpec({ release: "bookworm", sources: base.sources, vm: true }),
  ];
  for (const v of variants) assert.notEqual(imageKey(v), imageKey(base));
  assert.match(imageKey(variants[4]!), /^bookworm-vm-/);
  for (const p of ["systemd-sysv", "cloud-init", "puppet-agent", "facter", "monitoring-plugins-basic", "openssh-server"]) assert.ok(base.packages.includes(p), p);
  assert.ok(!base.packages.some((p) => /muster/.test(p)), "nothing of muster: the package arrives through cloud-init");
  assert.ok(base.remove.some((r) => r.startsWith("/etc/ssh/ssh_host_")), "no host keys shared by every machine");
  const argv = mmdebstrapArgv(base, "/tmp/s.sources", "/tmp/root");
  assert.deepEqual(argv.slice(0, 2), ["mmdebstrap", "--variant=minbase"]);
  assert.ok(argv.includes(`--include=${base.packages.join(",")}`));
  assert.deepEqual(argv.slice(-3), ["bookworm", "/tmp/root", "/tmp/s.sources"]);
});

test("an image another live process is building: this one waits for that build and takes its image, building none", async () => {
  const cache = mkdtempSync(join(tmpdir(), "muster-image-lock-"));
  const other = spawn("sleep", ["600"], { stdio: "ignore" });
  try {
    const spec = machineImageSpec({ release: "bookworm", sources: "deb http://deb.debian.org/debian bookworm main\n" });
    const key = imageKey(spec);
    mkdirSync(join(cache, `.${key}.lock`));
    writeFileSync(join(cache, `.${key}.lock`, "pid"), `${other.pid}\n`);
    let told!: () => void;
    const waiting = new Promise<void>((r) => (told = r));
    const lines: string[] = [];
    const got = ensureImage(cache, spec, (l) => (lines.push(l), /waiting for another process's build/.test(l) ? told() : undefined));
    await waiting;
    // the other build finishes: its image in place, its lock gone
    mkdirSync(join(cache, key, "root"), { recursive: true });
    writeFileSync(join(cache, key, "done"), "1234\n");
    rmSync(join(cache, `.${key}.lock`), { recursive: true });
    assert.deepEqual(await got, { key, root: join(cache, key, "root"), built: false, bytes: 1234 });
    assert.deepEqual(lines, [`waiting for another process's build of the machine image ${key}`], "nothing built here");
  } finally {
    other.kill();
    rmSync(cache, { recursive: true, force: true });
  }
});

test("relays: the listener in the namespace it serves, socat's separators escaped inside EXEC", () => {
  const out = relayArgv({ name: "broker", listen: { host: "10.77.0.1", port: 4222, netns: "/run/netns/muster-x" }, target: { host: "127.0.0.1", port: 4222 } }, "/run/muster-lab/x");
  assert.equal(out.socket, "/run/muster-lab/x/broker.sock");
  assert.deepEqual(out.listener.slice(0, 3), ["nsenter", "--net=/run/netns/muster-x", "socat"]);
  assert.match(out.listener.at(-2)!, /^TCP-LISTEN:4222,bind=10\.77\.0\.1,/);
  assert.equal(out.listener.at(-1), "UNIX-CONNECT:/run/muster-lab/x/broker.sock");
  assert.equal(out.connector[0], "socat", "the host side runs on the host");
  assert.match(out.connector.at(-1)!, /^TCP:127\.0\.0\.1:4222,/);

  const ssh = relayArgv({ name: "ssh-3", listen: { host: "127.0.2.3", port: 2203 }, target: { host: "10.77.1.3", port: 22, netns: "/run/netns/muster-x" } }, "/run/muster-lab/x");
  assert.equal(ssh.listener[0], "socat", "the operator's side listens on the host");
  // socat reads ':' inside EXEC's command as its own separator: unescaped, every connection failed
  assert.equal(ssh.connector.at(-1), "EXEC:nsenter --net=/run/netns/muster-x socat - TCP\\:10.77.1.3\\:22");
  assert.throws(() => relayArgv({ name: "Bad Name", listen: { host: "a", port: 1 }, target: { host: "b", port: 2 } }, "/x"), /relay name/);
});

test("boot command lines: nspawn in the lab's namespace on its bridge; QEMU emulated, with its seed ISO and tap", () => {
  const m: MachineConfig = { identity: "node01.eu.lab", serial: 1, kind: "nspawn", image: "/img/root", netns: "/run/netns/muster-x", bridge: "mbr0", address: "10.77.1.1", mac: machineMac(1), name: machineName(1) };
  const n = bootArgv(m, "/lab/machines/node01.eu.lab");
  assert.deepEqual(n.slice(0, 3), ["nsenter", "--net=/run/netns/muster-x", "systemd-nspawn"]);
  for (const a of ["--boot", "--register=no", "--keep-unit", "--network-bridge=mbr0", "--directory=/lab/machines/node01.eu.lab/root", "--machine=lab-m1"]) assert.ok(n.includes(a), a);
  const v = bootArgv({ ...m, kind: "vm", image: "/img/vm/base.qcow2", vm: { kernel: "/img/vm/vmlinuz", initrd: "/img/vm/initrd.img", memoryMb: 768, tap: "mtap1" } }, "/lab/m");
  assert.equal(v[2], "qemu-system-x86_64");
  assert.equal(v[v.indexOf("-accel") + 1], "tcg,tb-size=128", "software emulation with a bounded translation cache");
  assert.ok(v.includes("tap,id=n0,ifname=mtap1,script=no,downscript=no"));
  assert.ok(v.includes(`virtio-net-pci,netdev=n0,mac=${machineMac(1)}`), "the MAC network-config matches on");
  assert.ok(v.some((a) => a.startsWith("file=/lab/m/seed.iso")));
});

test("package server: files under its directory only, GET and HEAD only, no listing", async () => {
  const root = mkdtempSync(join(tmpdir(), "muster-pkgsrv-"));
  try {
    assert.equal(servedPath(root, "/muster_1_amd64.deb"), join(root, "muster_1_amd64.deb"));
    assert.equal(servedPath(root, "/dists/bookworm/Release?x=1"), join(root, "dists/bookworm/Release"));
    for (const bad of ["/../etc/passwd", "/%2e%2e/etc/passwd", "/a/../../x", "/%00", "/%E0%A4%A"]) assert.equal(servedPath(root, bad), undefined, bad);
    mkdirSync(join(root, "pool"));
    writeFileSync(join(root, "pool", "muster.deb"), "DEB");
    writeFileSync(join(root, "..", "outside-muster-pkgsrv"), "secret");
    const srv = await startPackageServer({ dir: root, host: "127.0.0.1", port: 0 });
    const get = (path: string, method = "GET") =>
      new Promise<{ status: number; body: string; type?: string }>((resolve, reject) => {
        const req = request(new URL(path, srv.url), { method }, (res) => {
          let body = "";
          res.on("data", (d: Buffer) => (body += d.toString()));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body, type: res.headers["content-type"] }));
        });
        req.once("error", reject);
        req.end();
      });
    try {
      assert.deepEqual(await get("/pool/muster.deb"), { status: 200, body: "DEB", type: "application/vnd.debian.binary-package" });
      assert.equal((await get("/pool/muster.deb", "HEAD")).body, "");
      assert.equal((await get("/pool/")).status, 404, "no directory listings");
      assert.equal((await get("/")).status, 404);
      assert.equal((await get("/%2e%2e/outside-muster-pkgsrv")).status, 404);
      assert.equal((await get("/pool/muster.deb", "PUT")).status, 405);
    } finally {
      await srv.close();
    }
    await assert.rejects(startPackageServer({ dir: root, host: "0.0.0.0", port: 0 }), /loopback only/);
  } finally {
    rmSync(join(root, "..", "outside-muster-pkgsrv"), { force: true });
    rmSync(root, { recursive: true, force: true });
  }
});

test("machines' user-data comes from docs/deploy.md's render command, flag for flag", () => {
  const tmp = mkdtempSync(join(tmpdir(), "muster-render-"));
  try {
    writeFileSync(join(tmp, "id_ed25519.pub"), "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHop muster-lab\n");
    const ms = { packages: { url: "http://10.77.0.1:8080/apt", key: "/lab/packages/apt/muster-archive-keyring.asc" }, broker: "tls://10.77.0.1:4222", ssh: { key: join(tmp, "id_ed25519") } } as BootMachineContext["ms"];
    const ctx = { ms, provisionerKey: "P".repeat(43) + "=", trusted: [{ name: "user=root", key: "K".repeat(43) + "=" }] } as BootMachineContext;
    const plan = { identity: "node01.eu.lab", region: LAB_REGIONS[0]!, serial: 1, role: labRole(0) };
    const argv = renderArgv(ctx, plan, { ca: "/c/ca.pem", cert: "/c/b.pem", key: "/c/b.key" }, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHop muster-lab");
    assert.equal(argv[0], USER_DATA_COMMAND);
    const doc = readFileSync(join(repoRoot, "docs", "deploy.md"), "utf8");
    const block = /```text\n(muster user-data --apt-repo[\s\S]*?)```/.exec(doc)?.[1];
    assert.ok(block, "docs/deploy.md shows the render command");
    const squash = (flags: string[]) => flags.filter((f, i) => f !== flags[i - 1]);
    const docFlags = squash([...block.matchAll(/(?:^|\s)(--[a-z-]+)/g)].map((m) => m[1]!));
    assert.deepEqual(squash(argv.filter((a) => a.startsWith("--"))), docFlags, "the lab's command is the operators' command");
    // every fact the provisioner picks masters by, and the role the lab site maps to classes
    const facts = machineFacts(plan);
    for (const f of ["country", "ec2_placement_region", "role", "customer", "environment"]) assert.ok(argv.includes(`${f}=${facts[f]}`), f);
    assert.equal(argv[argv.indexOf("--ssh-authorized-key") + 1], "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHop muster-lab", "the lab's key lets the operator in");
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});

test("lab commands refuse what cannot be, before anything starts", async () => {
  const cwd = mkdtempSync(join(tmpdir(), "muster-lab-cli-"));
  try {
    const run = (...args: string[]) => runCli(["lab", ...args], { env: { ...process.env, MUSTER_CONFIG_DIR: join(cwd, "keys") }, cwd });
    const both = await run("up", "--machines", "2", "--nodes", "3");
    assert.equal(both.code, 64);
    assert.match(both.stderr, /--machines and --nodes choose the kind of node: give one/);
    const vm = await run("up", "--nodes", "2", "--vm");
    assert.equal(vm.code, 64);
    assert.match(vm.stderr, /--vm goes with --machines N/);
    // alone, --vm is refused for what it is, not as a bad node count
    const vmAlone = await run("up", "--vm");
    assert.equal(vmAlone.code, 64);
    assert.match(vmAlone.stderr, /--vm goes with --machines N \(for instance `muster lab up --machines 1 --vm`\)/);
    const vms = await run("up", "--vms", "1", "--machines", "2");
    assert.equal(vms.code, 64);
    assert.match(vms.stderr, /--vms N is --machines N --vm: give one of them/);
    const none = await run("add", "--machines", "0");
    assert.equal(none.code, 64);
    assert.match(none.stderr, /--machines takes a whole number from 1 to 50/, "the error names the flag that was given");
    const many = await run("up", "--machines", "51");
    assert.equal(many.code, 64);
    assert.match(many.stderr, /--machines takes a whole number from 1 to 50/);
    const power = await run("power", "bogus", "node01.eu.lab");
    assert.equal(power.code, 64);
    assert.match(power.stderr, /power takes on, off, cut or reboot/);
    const exec = await run("exec", "node01.eu.lab", "--", "true");
    assert.equal(exec.code, 1);
    assert.match(exec.stdout, /no running lab here/);
    assert.ok(!existsSync(join(cwd, ".muster", "lab")), "nothing was started");
  } finally {
    rmSync(cwd, { recursive: true, force: true });
  }
});

test("the supervisor boots again only after a reboot nobody asked to stop", () => {
  assert.equal(afterBoot("nspawn", 133, false), "boot again", "systemctl reboot: nspawn exits 133");
  assert.equal(afterBoot("nspawn", 133, true), "off", "powered off while it rebooted");
  assert.equal(afterBoot("nspawn", 0, false), "off", "poweroff inside the machine");
  assert.equal(afterBoot("nspawn", 128, false), "off", "power cut: its init killed");
  assert.equal(afterBoot("nspawn", null, false), "off");
  assert.equal(afterBoot("vm", 133, false), "off", "a guest reboot stays inside qemu");
});

test("mount points as mountinfo escapes them; the real mountinfo read back", () => {
  assert.equal(decodeMountPath("/lab/my\\040machines/root"), "/lab/my machines/root");
  assert.equal(decodeMountPath("/a\\011b\\012c\\134d"), "/a\tb\nc\\d");
  assert.equal(decodeMountPath("/plain"), "/plain");
  assert.ok(isMounted("/"), "/ is a mount point");
  assert.ok(!isMounted("/definitely/not/mounted"));
});

test("pids that are not processes are never signalled: 0 is our group, -1 everyone", async () => {
  for (const pid of [0, -1, -12345, Number.NaN, 1.5]) assert.equal(isAlive(pid), false, String(pid));
  await stopPid(0); // a no-op, or this test run would be killed
  await stopPid(-1);
  assert.ok(isAlive(process.pid));
});

test("a stale leader or supervisor file naming another process is not taken for the machine", async () => {
  const dir = mkdtempSync(join(tmpdir(), "muster-machine-pid-"));
  const other = spawn("sleep", ["30"], { stdio: "ignore" });
  try {
    writeFileSync(join(dir, "machine.json"), JSON.stringify({ identity: "node01.eu.lab", kind: "nspawn" }));
    // a pid reused by a process of the host's PID namespace: not a machine's init
    writeFileSync(leaderFile(dir), `${other.pid}\n`);
    assert.equal(machineLeader(dir), undefined);
    writeFileSync(join(dir, "machine.json"), JSON.stringify({ identity: "node01.eu.lab", kind: "vm" }));
    assert.equal(machineLeader(dir), undefined, "not qemu");
    writeFileSync(supervisorFile(dir), `${other.pid}\n`);
    assert.equal(machineSupervisor(dir), undefined, "not `muster lab machine-run`");
  } finally {
    other.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  }
});

test("pids come round again: another machine's supervisor is not this one's, and a pid file names its process by when it started too, so a pid taken since by another machine is not signalled", async () => {
  const dir = mkdtempSync(join(tmpdir(), "muster-machine-pid-"));
  const elsewhere = mkdtempSync(join(tmpdir(), "muster-machine-other-"));
  // another machine's supervisor: `muster lab machine-run <its dir>` (what a pid of ours may have become)
  const theirs = spawn("sh", ["-c", "sleep 30", "muster", "lab", "machine-run", elsewhere], { stdio: "ignore" });
  try {
    writeFileSync(join(dir, "machine.json"), JSON.stringify({ identity: "node08.eu.lab", kind: "nspawn" }));
    writeFileSync(supervisorFile(dir), `${theirs.pid}\n`);
    assert.equal(machineSupervisor(dir), undefined, "another machine's supervisor");
    assert.equal(isSupervisorOf(theirs.pid!, dir), false);
    assert.equal(isSupervisorOf(theirs.pid!, elsewhere), true);
    // the file as the supervisor writes it names the process, start and all
    assert.match(pidFileText(theirs.pid!), new RegExp(`^${theirs.pid} \\d+\n$`));
    assert.equal(livePidOf(pidFileText(theirs.pid!)), theirs.pid);
    // the same pid with another start: the process it named is gone, whoever has the pid now
    assert.equal(livePidOf(`${theirs.pid} 1\n`), undefined);
    writeFileSync(supervisorFile(elsewhere), `${theirs.pid} 1\n`);
    assert.equal(machineSupervisor(elsewhere), undefined, "a stale supervisor file, its pid taken by a process that started later");
    writeFileSync(supervisorFile(elsewhere), pidFileText(theirs.pid!));
    assert.equal(machineSupervisor(elsewhere), theirs.pid);
  } finally {
    theirs.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
    rmSync(elsewhere, { recursive: true, force: true });
  }
});

test("one supervisor per machine: a second `lab machine-run` on a powered machine refuses", async () => {
  const dir = mkdtempSync(join(tmpdir(), "muster-machine-power-"));
  // stands in for a running supervisor: a live process whose command line is machine-run's
  const first = spawn("sh", ["-c", "sleep 30", "muster", "lab", "machine-run", dir], { stdio: "ignore" });
  try {
    writeFileSync(join(dir, "machine.json"), JSON.stringify({ identity: "node01.eu.lab", serial: 1, kind: "nspawn", image: "/nonexistent", netns: "/run/netns/none", bridge: "mbr0", address: "10.77.1.1", mac: machineMac(1), name: machineName(1) }));
    writeFileSync(supervisorFile(dir), `${first.pid}\n`);
    assert.equal(machineSupervisor(dir), first.pid);
    const second = await runCli(["lab", "machine-run", dir], { env: process.env });
    assert.notEqual(second.code, 0);
    assert.match(second.stderr, new RegExp(`already powered by supervisor ${first.pid}`));
    assert.equal(readFileSync(supervisorFile(dir), "utf8").trim(), String(first.pid), "the first keeps the power");
    assert.ok(!existsSync(join(dir, "root")), "nothing was mounted or booted");
  } finally {
    first.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  }
});

test("ssh_config names machines by identity, keys known by identity; ssh itself reads it so", () => {
  const dir = mkdtempSync(join(tmpdir(), "muster-ssh-config-"));
  try {
    const ssh = { key: join(dir, "id_ed25519"), config: join(dir, "config"), knownHosts: join(dir, "known_hosts") };
    const machine = (serial: number) => ({ kind: "nspawn" as const, dir: "/x", ssh: { host: machineSshAlias(serial), port: 2200 + serial }, relayPids: [], poweredOnAt: 0 });
    const text = sshConfigText(ssh, [
      { identity: "node01.eu.lab", machine: machine(1) },
      { identity: "notifier.lab" }, // not a machine: not in it
      { identity: "node02.us.lab", machine: machine(2) },
    ]);
    assert.doesNotMatch(text, /notifier/);
    writeFileSync(ssh.config, text);
    const g = spawnSync("ssh", ["-G", "-F", ssh.config, "node02.us.lab"], { encoding: "utf8" });
    assert.equal(g.status, 0, g.stderr);
    const opt = (k: string) => new RegExp(`^${k} (.*)$`, "m").exec(g.stdout)?.[1];
    assert.equal(opt("hostname"), "127.0.2.2");
    assert.equal(opt("port"), "2202");
    assert.equal(opt("hostkeyalias"), "node02.us.lab", "a relay's address and port change; the machine's name does not");
    assert.equal(opt("user"), "root");
    assert.equal(opt("stricthostkeychecking"), "accept-new");
    assert.equal(opt("userknownhostsfile"), ssh.knownHosts);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the image loses its ssh host keys by pattern, with no shell in between", () => {
  const root = mkdtempSync(join(tmpdir(), "muster image $(touch pwned) '"));
  try {
    mkdirSync(join(root, "etc", "ssh"), { recursive: true });
    for (const f of ["ssh_host_rsa_key", "ssh_host_ed25519_key.pub", "sshd_config", "moduli"]) writeFileSync(join(root, "etc", "ssh", f), "x");
    removeMatching(root, "/etc/ssh/ssh_host_*");
    assert.deepEqual(readdirSync(join(root, "etc", "ssh")).sort(), ["moduli", "sshd_config"]);
    removeMatching(root, "/etc/nothing/here_*"); // a directory the image lacks: nothing to do
    assert.ok(!existsSync("pwned") && !existsSync(join(root, "pwned")), "the path was never given to a shell");
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test("a command run in a machine while it shuts down does not keep the machine from ending: the nsenter its stop left stopped is continued, and reaps it", { skip: process.getuid?.() !== 0 && "needs root (a PID namespace of its own)" }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "muster-machine-stop-"));
  // a "machine": a PID namespace of its own whose PID 1 sleeps, as a booted machine's init would wait
  const machine = spawn("unshare", ["--pid", "--fork", "--kill-child", "--mount-proc", "sleep", "600"], { stdio: "ignore" });
  let nsenter: number | undefined;
  try {
    const init = await eventually(async () => {
      const kids = readFileSync(`/proc/${machine.pid}/task/${machine.pid}/children`, "utf8").trim();
      return kids ? Number(kids.split(/\s+/)[0]) : undefined;
    }, 10_000, "the namespace's PID 1");
    writeFileSync(join(dir, "machine.json"), JSON.stringify({ identity: "node09.eu.lab", kind: "nspawn" }));
    writeFileSync(leaderFile(dir), pidFileText(init));
    assert.equal(machineLeader(dir), init);
    const ran = machineExecAsync(dir, ["sleep", "300"], { timeoutMs: 600_000 });
    nsenter = await eventually(async () => {
      const all = readdirSync("/proc").filter((p) => /^\d+$/.test(p)).map(Number);
      return all.find((p) => cmdlineOf(p).startsWith("nsenter") && cmdlineOf(p).includes(`--target=${init}`));
    }, 10_000, "the nsenter running the command");
    const command = await eventually(async () => {
      const kids = readFileSync(`/proc/${nsenter}/task/${nsenter}/children`, "utf8").trim();
      return kids ? Number(kids.split(/\s+/)[0]) : undefined;
    }, 10_000, "the command in the machine");
    // what systemd-shutdown does to every process in the machine: stop it, then kill it
    process.kill(command, "SIGSTOP");
    await eventually(async () => (/^\d+ \(.*\) T /.test(readFileSync(`/proc/${command}/stat`, "utf8")) ? true : undefined), 10_000, "the command stopped");
    process.kill(command, "SIGKILL");
    // the old code: nsenter stopped itself when its child stopped, and never reaped it (the 600 s timeout was all that ended it)
    const r = await Promise.race([ran, new Promise<"hung">((res) => setTimeout(() => res("hung"), 20_000).unref())]);
    assert.notEqual(r, "hung", "the exec ended with the command it ran");
    assert.equal(isAlive(command), false, "the command was reaped, so its namespace can end");
  } finally {
    if (nsenter !== undefined && isAlive(nsenter)) process.kill(nsenter, "SIGKILL"); // the old code's stopped nsenter
    machine.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  }
});

test("room for machines: inotify limits below the floor are raised to it, said aloud; higher ones and unreadable ones are left alone", () => {
  assert.deepEqual(inotifyRaises({ max_user_instances: 128, max_user_watches: 8192 }), INOTIFY_FLOOR);
  assert.deepEqual(inotifyRaises({ max_user_instances: 4096, max_user_watches: 1_000_000 }), {});
  assert.deepEqual(inotifyRaises({ max_user_instances: 128 }), { max_user_instances: 1024 });
  // the same on files shaped as /proc/sys/fs/inotify is (Debian's defaults, as the CI host had them)
  const dir = mkdtempSync(join(tmpdir(), "inotify-"));
  try {
    writeFileSync(join(dir, "max_user_instances"), "128\n");
    writeFileSync(join(dir, "max_user_watches"), "1048576\n");
    const said: string[] = [];
    makeRoomForMachines((l) => said.push(l), dir);
    assert.equal(readFileSync(join(dir, "max_user_instances"), "utf8").trim(), "1024");
    assert.equal(readFileSync(join(dir, "max_user_watches"), "utf8").trim(), "1048576", "never lowered");
    assert.equal(said.length, 1);
    assert.match(said[0]!, /^raised fs\.inotify\.max_user_instances from 128 to 1024: /);
    makeRoomForMachines((l) => said.push(l), dir);
    assert.equal(said.length, 1, "once per process");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
