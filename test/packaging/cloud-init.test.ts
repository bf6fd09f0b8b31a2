import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { parse as parseYaml } from "yaml";
import { MusterClient } from "../../src/client/client.js";
import { nodeServerConfig } from "../../src/config/node.js";
import { labNodeSpec } from "../../src/lab/lab.js";
import { generateSigningKey } from "../../src/protocol/signing.js";
import { loadServerConfig } from "../../src/server/config.js";
import { testPki } from "../support/index.js";
import { cleanEnv, cliPath, repoRoot, spawnMuster, startBroker, tempDir, type Broker, type MusterProcess } from "../support/collective.js";

// examples/cloud-init/user-data.yaml is `muster user-data`'s output, whose server config
// comes from the generator the lab's nodes use (src/config/node.ts). Rendered for a real broker
// and credential, it makes a muster server that waits isolated and answers the provisioner.

const run = promisify(execFile);
const render = (...args: string[]) => run(process.execPath, [cliPath, "user-data", ...args], { cwd: repoRoot }).then((r) => r.stdout);
const tmp = tempDir("cloud-init");

interface UserData {
  write_files: { path: string; content: string; permissions: string }[];
  runcmd: string[][];
}
const file = (u: UserData, path: string) => u.write_files.find((f) => f.path === path);

let broker: Broker;
let server: MusterProcess | undefined;
before(async () => {
  broker = await startBroker();
});
after(async () => {
  await server?.stop();
  await broker?.dispose();
  tmp.remove();
});

test("the checked-in example is exactly what the generator renders (re-render it: muster user-data > examples/cloud-init/user-data.yaml)", async () => {
  assert.equal(readFileSync(join(repoRoot, "examples", "cloud-init", "user-data.yaml"), "utf8"), await render());
});

test("the example installs the package, writes config and credential, starts the server; its server config loads", () => {
  const text = readFileSync(join(repoRoot, "examples", "cloud-init", "user-data.yaml"), "utf8");
  assert.match(text, /^#cloud-config\n/);
  const u = parseYaml(text) as UserData;
  assert.equal(file(u, "/etc/muster/tls/bootstrap.key")?.permissions, "0600", "the key is root's only");
  const cmds = u.runcmd.map((c) => c.join(" "));
  assert.ok(cmds.some((c) => /apt-get install .*--force-confold .*muster\.deb/.test(c)), "installs the package, keeping the files written before");
  assert.deepEqual(u.runcmd.at(-1), ["systemctl", "enable", "--now", "muster-privileged.socket", "muster-server.service"]);
  // the server runs as muster: its config and bootstrap key are made readable to that group once the package made it
  assert.ok(cmds.includes("chgrp muster /etc/muster/server.yaml /etc/muster/tls/bootstrap.key") && cmds.indexOf("chgrp muster /etc/muster/server.yaml /etc/muster/tls/bootstrap.key") > cmds.findIndex((c) => c.includes("apt-get install")));
  const cfgFile = join(tmp.path, "example-server.yaml");
  writeFileSync(cfgFile, file(u, "/etc/muster/server.yaml")!.content);
  const cfg = loadServerConfig(cfgFile);
  assert.equal(cfg.provisioning?.cert, "/etc/muster/tls/bootstrap.pem");
  assert.equal(cfg.tls?.use_puppet_cert, true);
  assert.equal(cfg.privileged_helper, "/run/muster/privileged.sock", "the packaged server's helper");
});

test("--apt-repo: the node adds the signed repository (one sources line, one keyring) and installs muster from it", async () => {
  const key = join(tmp.path, "repo-key.asc");
  writeFileSync(key, "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEtest\n-----END PGP PUBLIC KEY BLOCK-----\n");
  const u = parseYaml(await render("--apt-repo", "https://apt.example.net/muster", "--apt-key", key)) as UserData;
  assert.equal(file(u, "/etc/apt/keyrings/muster-archive-keyring.asc")?.content, readFileSync(key, "utf8"));
  assert.equal(file(u, "/etc/apt/sources.list.d/muster.list")?.content, "deb [signed-by=/etc/apt/keyrings/muster-archive-keyring.asc] https://apt.example.net/muster stable main\n");
  const cmds = u.runcmd.map((c) => c.join(" "));
  assert.ok(!cmds.some((c) => c.includes("curl")), "nothing downloaded outside apt");
  assert.ok(cmds.indexOf("apt-get update") >= 0 && cmds.indexOf("apt-get update") < cmds.findIndex((c) => /apt-get install .*--force-confold muster$/.test(c)));
  const bad = (args: string[]) => run(process.execPath, [cliPath, "user-data", ...args], { cwd: repoRoot }).then(() => assert.fail(`accepted ${args.join(" ")}`), (e: { code: number; stderr: string }) => e);
  const both = await bad(["--apt-repo", "https://x", "--apt-key", key, "--deb-url", "https://x/m.deb"]);
  assert.equal(both.code, 64);
  assert.match(both.stderr, /two ways to install: give one/);
  assert.match((await bad(["--apt-repo", "https://x"])).stderr, /--apt-repo and --apt-key go together/);
});

test("lab nodes and cloud nodes share the generator: same keys, agents, isolation and TLS shape", () => {
  const lab = labNodeSpec(join(tmp.path, "lab"), 0, { ca: "/lab/ca.pem", cert: "/lab/b.pem", key: "/lab/b.key" }).server;
  const cloud = nodeServerConfig({ collectives: ["muster"], ca: "/c/ca.pem", bootstrap: { cert: "/c/b.pem", key: "/c/b.key" }, provisioning: { collective: "provisioning", callers: ["provisioner"] }, brokers: [], security: {} });
  // privileged_helper: cloud nodes run the packaged, unprivileged server; the lab's nodes are processes run as root
  const shape = (c: Record<string, unknown>) => Object.keys(c).filter((k) => !["identity", "brokers", "security", "privileged_helper"].includes(k)).sort();
  assert.deepEqual(shape(lab), shape(cloud));
  assert.deepEqual(lab.agents, cloud.agents);
  assert.deepEqual(Object.keys(lab.provisioning as object).sort(), Object.keys(cloud.provisioning as object).sort());
  assert.deepEqual(Object.keys(lab.tls as object).sort(), Object.keys(cloud.tls as object).sort());
});

test("rendered for a real broker and credential: the node waits in the provisioning collective and answers only the provisioner", async () => {
  const pki = testPki();
  const prov = generateSigningKey("provisioner");
  const identity = "cloud1.cloud-init.test";
  const text = await render("--identity", identity, "--broker", broker.url, "--ca", pki.ca, "--cert", pki.clientCert, "--key", pki.clientKey, "--provisioner-key", prov.key.publicKey, "--deb-url", "https://apt.example.net/muster.deb");
  const u = parseYaml(text) as UserData;
  assert.equal(file(u, "/etc/muster/tls/bootstrap.key")!.content, readFileSync(pki.clientKey, "utf8"), "the credential, verbatim");
  assert.ok(u.runcmd.some((c) => c.join(" ").includes('"https://apt.example.net/muster.deb"')));
  // Play cloud-init's write_files under a scratch /etc/muster.
  const etc = join(tmp.path, "etc-muster");
  const local = (p: string) => p.replaceAll("/etc/muster", etc);
  for (const f of u.write_files) {
    mkdirSync(join(local(f.path), ".."), { recursive: true });
    writeFileSync(local(f.path), local(f.content), { mode: parseInt(f.permissions, 8) });
  }
  // Facter off only to keep the test quick.
  writeFileSync(local("/etc/muster/server.yaml"), local(file(u, "/etc/muster/server.yaml")!.content).replace("facter: true", "facter: false"));
  server = spawnMuster(["server", "--config", local("/etc/muster/server.yaml")], { env: cleanEnv(join(tmp.path, "home")) });
  await server.waitForLine(/ready/, 30_000);

  const tls = { ca: pki.ca, cert: pki.clientCert, key: pki.clientKey };
  const client = await MusterClient.connect({ brokers: [broker.url], collective: "provisioning", tls, key: prov.key, name: "cloud-init-test" });
  try {
    assert.deepEqual(await client.discover({ timeoutMs: 3000 }), [identity], "the provisioner finds it");
    const stranger = await MusterClient.connect({ brokers: [broker.url], collective: "provisioning", tls, key: generateSigningKey("provisioner").key, name: "cloud-init-stranger" });
    try {
      assert.deepEqual(await stranger.discover({ timeoutMs: 1500 }), [], "a key the node was not given finds nothing");
    } finally {
      await stranger.close();
    }
  } finally {
    await client.close();
  }
});

test("--fact, --plugin, --trusted-key and --ssh-authorized-key: a facts file, agent settings, another trusted caller, root's SSH key", async () => {
  const op = generateSigningKey("user=ops");
  const text = await render("--fact", "country=de", "--fact", "port=8140", "--plugin", "resource.allowed_types=file", "--plugin", "resource.file_paths=/srv/x", "--trusted-key", `user=ops=${op.key.publicKey}`, "--ssh-authorized-key", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHop lab");
  const u = parseYaml(text) as UserData & { ssh_authorized_keys?: string[]; disable_root?: boolean };
  const facts = file(u, "/etc/facter/facts.d/muster.yaml")!;
  assert.equal(facts.permissions, "0644");
  // strings as given: a fact file says what it is told (8140 stays "8140", as Facter reads text facts)
  assert.deepEqual(parseYaml(facts.content), { country: "de", port: "8140" });
  const server = parseYaml(file(u, "/etc/muster/server.yaml")!.content) as { plugins: Record<string, Record<string, string>>; security: { trusted_keys: { name: string; key: string }[] } };
  assert.deepEqual(server.plugins, { resource: { allowed_types: "file", file_paths: "/srv/x" } });
  assert.deepEqual(server.security.trusted_keys.map((k) => k.name), ["provisioner", "user=ops"], "a caller name may hold '='");
  assert.equal(server.security.trusted_keys[1]!.key, op.key.publicKey);
  assert.deepEqual(u.ssh_authorized_keys, ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHop lab"]);
  assert.equal(u.disable_root, false, "the key logs in as root");
  // the server config still loads with them
  const cfgFile = join(tmp.path, "flags-server.yaml");
  writeFileSync(cfgFile, file(u, "/etc/muster/server.yaml")!.content);
  assert.equal(loadServerConfig(cfgFile).plugins.resource?.allowed_types, "file");
});

test("bad flag values: exit 64 with what the flag takes, nothing rendered", async () => {
  for (const [args, why] of [
    [["--fact", "Country=de"], /--fact takes NAME=VALUE/],
    [["--fact", "country="], /--fact takes NAME=VALUE/],
    [["--plugin", "resource=file"], /--plugin takes AGENT.SETTING=VALUE/],
    [["--trusted-key", "ops=not-a-key"], /--trusted-key takes NAME=PUBLIC_KEY/],
    [["--ssh-authorized-key", "hello"], /--ssh-authorized-key takes an OpenSSH public key/],
    [["--fact"], /--fact needs a value/],
  ] as const) {
    const r = await render(...args).then(
      () => assert.fail(`${args.join(" ")} rendered`),
      (e: { code: number; stderr: string; stdout: string }) => e,
    );
    assert.equal(r.code, 64, args.join(" "));
    assert.match(r.stderr, why);
    assert.equal(r.stdout, "");
  }
});

test("each role's user-data gives a daemon's files to the user its unit runs as (one user per daemon)", async () => {
  const { provisionerUserData, nodeUserData } = await import("../../src/config/cloud-init.js");
  const unitUser = (u: string) => /^User=(\S+)$/m.exec(readFileSync(join(repoRoot, "packaging", "systemd", `${u}.service`), "utf8"))![1]!;
  const chgrps = (cmds: string[][]) => cmds.filter((c) => c[0] === "chgrp").map((c) => c[1]);
  const source = { debUrl: "http://127.0.0.1/muster.deb" };
  const prov = provisionerUserData({ source, configText: "x", caText: "c", certText: "c", keyText: "k", signingKeyText: "s" });
  assert.deepEqual(chgrps(prov.runcmd as string[][]), [unitUser("muster-provisioner")]);
  const node = nodeUserData({ source, brokers: ["tls://127.0.0.1:4222"], collective: "muster", provisioningCollective: "provisioning", caText: "c", bootstrapCertText: "c", bootstrapKeyText: "k", provisionerKey: "P", trustedKeys: [], facts: {}, plugins: {} });
  assert.deepEqual(chgrps(node.runcmd as string[][]), [unitUser("muster-server")]);
});
