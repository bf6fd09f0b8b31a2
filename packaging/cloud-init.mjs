#!/usr/bin/env node
// Renders cloud-init user-data for a fresh Debian instance that installs muster, writes its
// bootstrap credential and server config, and starts `muster server`, so the provisioner takes it
// with nobody at the keyboard. The server config comes from the same generator as the lab's nodes
// (src/config/node.ts; run `npm run build` first).
//
// Without arguments it prints examples/cloud-init/user-data.yaml (placeholders in CAPITALS), which
// installs from one .deb URL; with --apt-repo and --apt-key the node adds muster's signed apt
// repository (npm run package writes it: packaging/apt-repo.mjs) and installs from there, so later
// upgrades are `apt-get upgrade`. test/packaging/cloud-init.test.ts holds the example to the
// generator. The package runs the server as the muster user, with its privileged helper
// (docs/decisions/privileged-helper.md). For a real machine:
//
//   node packaging/cloud-init.mjs --apt-repo https://apt.example.net/muster --apt-key build/apt/muster-archive-keyring.asc \
//     (or --deb-url https://apt.example.net/muster_0.1.0_amd64.deb) \
//     --broker tls://nats1.example.net:4222 --broker tls://nats2.example.net:4222 \
//     --ca ca.pem --identity node42.example.net --cert node42-bootstrap.pem --key node42-bootstrap.key \
//     --provisioner-key "$(cat provisioner.pub)" > node42.user-data.yaml
import { readFileSync } from "node:fs";
import { stringify as toYaml } from "yaml";
import { nodeServerConfig } from "../dist/src/config/node.js";

const USAGE = `usage: node packaging/cloud-init.mjs [--deb-url URL | --apt-repo URL --apt-key FILE [--apt-suite NAME]]
       [--broker URL]... [--ca FILE] [--cert FILE --key FILE]
       [--identity NAME] [--provisioner-key PUBLIC_KEY] [--trusted-key NAME=PUBLIC_KEY]...
       [--fact NAME=VALUE]... [--plugin AGENT.SETTING=VALUE]... [--ssh-authorized-key KEY]...
       [--collective NAME] [--provisioning-collective NAME]
--identity: the node's name when it is not the instance's host name (a per-node bootstrap
credential names it; so does the Puppet certificate the node will get).
--trusted-key: another caller whose signed requests the node obeys (an operator's key), besides
the provisioner's.
--fact: a fact the instance starts with, in /etc/facter/facts.d/muster.yaml (Facter, muster and
every Puppet run read it): the ones the provisioner picks a master by (master.criteria), a role.
--plugin: an agent setting in the server config's plugins section, as MCollective's
plugin.<agent>.<setting> lines (e.g. resource.allowed_types=package,service).
--ssh-authorized-key: a public key that may log in as root over SSH.
--apt-repo: the URL the apt repository of \`npm run package\` (build/apt) is served at; --apt-key: its
public key (build/apt/muster-archive-keyring.asc), which alone signs what the node installs.`;

const REPEATED = ["broker", "trusted-key", "fact", "plugin", "ssh-authorized-key"];
const o = { broker: [], "trusted-key": [], fact: [], plugin: [], "ssh-authorized-key": [], collective: "muster", "provisioning-collective": "provisioning", "apt-suite": "stable" };
const usage = (why) => {
  process.stderr.write(`${why}\n${USAGE}\n`);
  process.exit(64);
};
const argv = process.argv.slice(2);
if (argv.includes("--help") || argv.includes("-h")) {
  process.stdout.write(`${USAGE}\n`);
  process.exit(0);
}
for (let i = 0; i < argv.length; i += 2) {
  const k = argv[i].replace(/^--/, "");
  const v = argv[i + 1];
  if (!["deb-url", "apt-repo", "apt-key", "apt-suite", "ca", "cert", "key", "identity", "provisioner-key", "collective", "provisioning-collective", ...REPEATED].includes(k) || v === undefined) {
    usage(v === undefined ? `${argv[i]} needs a value` : `unknown argument ${argv[i]}`);
  }
  if (REPEATED.includes(k)) o[k].push(v);
  else o[k] = v;
}
if (!o.cert !== !o.key) usage("--cert and --key go together: the node's bootstrap certificate and its key");
if (o["deb-url"] && o["apt-repo"]) usage("--deb-url and --apt-repo are two ways to install: give one");
if (!o["apt-repo"] !== !o["apt-key"]) usage("--apt-repo and --apt-key go together: the repository and the public key that signs it");
/** NAME=VALUE pairs of a repeated flag, in order; a name given twice keeps its last value. */
const pairs = (flag, nameRe, what) =>
  Object.fromEntries(
    o[flag].map((p) => {
      const at = p.indexOf("=");
      const [name, value] = [p.slice(0, at), p.slice(at + 1)];
      if (at < 1 || !nameRe.test(name) || value === "") usage(`--${flag} takes ${what}, got ${JSON.stringify(p)}`);
      return [name, value];
    }),
  );
const plugins = {};
for (const [name, value] of Object.entries(pairs("plugin", /^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$/, "AGENT.SETTING=VALUE (e.g. resource.allowed_types=file)"))) {
  const [agent, setting] = name.split(".");
  (plugins[agent] ??= {})[setting] = value;
}
const facts = pairs("fact", /^[a-z][a-z0-9_]*$/, "NAME=VALUE with a lower-case fact name (a-z, 0-9, _)");
// NAME=KEY where KEY is an ed25519 public key in base64 (44 characters, ending in "="): the caller
// name itself may hold "=" (a user's default caller name is user=<login>).
const trusted = Object.fromEntries(
  o["trusted-key"].map((p) => {
    const m = /^([A-Za-z0-9][A-Za-z0-9_.@=-]*)=([A-Za-z0-9+/]{43}=)$/.exec(p);
    if (!m) usage(`--trusted-key takes NAME=PUBLIC_KEY (the caller name its requests are signed as, and its ed25519 public key in base64, as in <name>.pub), got ${JSON.stringify(p)}`);
    return [m[1], m[2]];
  }),
);
for (const k of o["ssh-authorized-key"]) if (!/^(ssh|ecdsa|sk)-[a-z0-9@.-]+ [A-Za-z0-9+/=]+( .*)?$/.test(k)) usage(`--ssh-authorized-key takes an OpenSSH public key line, got ${JSON.stringify(k.slice(0, 40))}`);

const pem = (file, what) => (file ? readFileSync(file, "utf8") : `${what}\n`);
const TLS = "/etc/muster/tls";
const server = nodeServerConfig({
  identity: o.identity,
  brokers: o.broker.length ? o.broker : ["tls://NATS1.EXAMPLE.NET:4222", "tls://NATS2.EXAMPLE.NET:4222", "tls://NATS3.EXAMPLE.NET:4222"],
  collectives: [o.collective],
  ca: `${TLS}/ca.pem`,
  bootstrap: { cert: `${TLS}/bootstrap.pem`, key: `${TLS}/bootstrap.key` },
  provisioning: { collective: o["provisioning-collective"], callers: ["provisioner"] },
  ...(Object.keys(plugins).length ? { plugins } : {}),
  security: { trusted_keys: [{ name: "provisioner", key: o["provisioner-key"] ?? "PROVISIONER_PUBLIC_KEY" }, ...Object.entries(trusted).map(([name, key]) => ({ name, key }))] },
  // The package runs the server as the muster user; what needs root goes through the helper.
  privilegedHelper: "/run/muster/privileged.sock",
});
// A value that reads as a number or boolean stays a string: a fact file says what it is given.
const factsYaml = Object.keys(facts).length ? toYaml(facts, { defaultStringType: "QUOTE_DOUBLE", defaultKeyType: "PLAIN" }) : undefined;

// Two ways to get the package: one .deb by URL, or muster's signed apt repository (then upgrades
// are apt-get's). Either way dpkg keeps the files written before it (--force-confold).
const KEYRING = "/etc/apt/keyrings/muster-archive-keyring.asc";
const install = "DEBIAN_FRONTEND=noninteractive apt-get install -y -o Dpkg::Options::=--force-confold";
const aptFiles = o["apt-repo"]
  ? [
      { path: KEYRING, owner: "root:root", permissions: "0644", content: readFileSync(o["apt-key"], "utf8") },
      { path: "/etc/apt/sources.list.d/muster.list", owner: "root:root", permissions: "0644", content: `deb [signed-by=${KEYRING}] ${o["apt-repo"]} ${o["apt-suite"]} main\n` },
    ]
  : [];
const installCmds = o["apt-repo"]
  ? [
      ["apt-get", "update"],
      ["sh", "-c", `${install} muster`],
    ]
  : [
      ["sh", "-c", `curl -fsSL -o /run/muster.deb ${JSON.stringify(o["deb-url"] ?? "https://APT.EXAMPLE.NET/muster_VERSION_amd64.deb")}`],
      ["sh", "-c", `${install} /run/muster.deb`],
      ["rm", "-f", "/run/muster.deb"],
    ];

const userData = {
  // Written before the package is installed: dpkg keeps them (--force-confold) as the operator's.
  write_files: [
    { path: "/etc/muster/server.yaml", owner: "root:root", permissions: "0640", content: toYaml(server) },
    { path: `${TLS}/ca.pem`, owner: "root:root", permissions: "0644", content: pem(o.ca, "THE BROKER'S CA CERTIFICATE (PEM)") },
    // This node's own bootstrap credential: it reaches only its own provisioning subjects.
    { path: `${TLS}/bootstrap.pem`, owner: "root:root", permissions: "0644", content: pem(o.cert, "THIS NODE'S BOOTSTRAP CERTIFICATE (PEM)") },
    { path: `${TLS}/bootstrap.key`, owner: "root:root", permissions: "0600", content: pem(o.key, "THIS NODE'S BOOTSTRAP KEY (PEM)") },
    ...(factsYaml ? [{ path: "/etc/facter/facts.d/muster.yaml", owner: "root:root", permissions: "0644", content: factsYaml }] : []),
    ...aptFiles,
  ],
  ...(o["ssh-authorized-key"].length ? { disable_root: false, ssh_authorized_keys: o["ssh-authorized-key"] } : {}),
  runcmd: [
    ...installCmds,
    // The server runs as muster: its config and bootstrap key become readable by that group only
    // now that the package made it (write_files ran before the group existed).
    ["chgrp", "muster", "/etc/muster/server.yaml", `${TLS}/bootstrap.key`],
    ["chmod", "0640", `${TLS}/bootstrap.key`],
    ["systemctl", "enable", "--now", "muster-privileged.socket", "muster-server.service"],
  ],
};

process.stdout.write(
  `#cloud-config
# muster: a fresh Debian machine that waits to be provisioned (docs/deploy.md#nodes).
# Rendered by packaging/cloud-init.mjs from the generator the lab's nodes use (src/config/node.ts);
# re-render rather than edit. CAPITALS are placeholders: the render command fills them.
${toYaml(userData, { lineWidth: 0 })}`,
);
