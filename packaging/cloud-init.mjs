#!/usr/bin/env node
// Renders cloud-init user-data for a fresh Debian instance of a muster site: by default a node that
// installs muster, writes its bootstrap credential and server config, and waits until the
// provisioner takes it; with --role, the site's other machines (a broker, a Puppet master, a
// provisioner, the console). What goes in each comes from src/config/cloud-init.ts (run `npm run
// build` first), the generator the lab's machines are booted with (`muster lab up --site`), and
// docs/deploy.md shows the command for each role.
//
// Without arguments it prints examples/cloud-init/user-data.yaml (placeholders in CAPITALS), which
// installs from one .deb URL; with --apt-repo and --apt-key the machine adds muster's signed apt
// repository (npm run package writes it: packaging/apt-repo.mjs) and installs from there, so later
// upgrades are `apt-get upgrade`. test/packaging/cloud-init.test.ts holds the example to the
// generator. For a real node:
//
//   node packaging/cloud-init.mjs --apt-repo https://apt.example.net/muster --apt-key build/apt/muster-archive-keyring.asc \
//     --broker tls://nats1.example.net:4222 --broker tls://nats2.example.net:4222 \
//     --ca ca.pem --identity node42.example.net --cert node42-bootstrap.pem --key node42-bootstrap.key \
//     --provisioner-key "$(cat provisioner.pub)" > node42.user-data.yaml
import { readFileSync } from "node:fs";
import { brokerUserData, consoleUserData, masterUserData, nodeUserData, provisionerUserData, renderUserData, SITE_ROLES } from "../dist/src/config/cloud-init.js";

const USAGE = `usage: node packaging/cloud-init.mjs [--role node|broker|master|provisioner|console] [flags]

Every role:
  --identity NAME             the machine's name (its certname, its broker user)
  --deb-url URL | --apt-repo URL --apt-key FILE [--apt-suite NAME]
                              where muster comes from (not for a broker): one .deb, or muster's
                              signed apt repository (npm run package writes build/apt) and the
                              public key that alone signs it
  --ssh-authorized-key KEY    a public key that may log in as root (repeatable)

--role node (the default): a machine that waits to be provisioned
  [--broker URL]... [--ca FILE] [--cert FILE --key FILE]   the broker, its CA, this node's bootstrap credential
  [--provisioner-key PUBLIC_KEY] [--trusted-key NAME=PUBLIC_KEY]...
  [--fact NAME=VALUE]... [--plugin AGENT.SETTING=VALUE]...
  [--collective NAME] [--provisioning-collective NAME]

--role broker: Debian's nats-server as a member of the site's cluster (no muster on it)
  --nats-config FILE          muster broker config --name ... (its nats-server.conf)
  --users FILE                muster broker users --spec ... (who connects)
  --cert FILE --key FILE      the broker's certificate (server and client use) and key
  --ca FILE                   the site CA; --clients-ca FILE: it and every Puppet CA whose nodes connect

--role master: puppetserver with muster's puppetca agent
  --identity NAME --broker URL... --ca FILE --cert FILE --key FILE   (its muster server's broker credential)
  --provisioner-key PUBLIC_KEY [--trusted-key NAME=PUBLIC_KEY]... [--fact NAME=VALUE]...
  [--alt-name IP:ADDRESS|DNS:NAME]...   names and addresses nodes reach it by, in its certificate
  [--registry-url URL --registry-token FILE]   what search_nodes asks
  [--puppet-code URL]         a tarball of environments/..., unpacked into /etc/puppet/code
  [--puppetserver-heap SIZE]  puppetserver's JVM heap, e.g. 768m
  [--puppetserver-java-arg ARG]...   more JVM options (-XX:TieredStopAtLevel=1: a small master starts faster)
  [--puppetdb-url URL]        PuppetDB by the name this master reaches it under
                              (https://puppetdb-eu.example.net:8081): it sends PuppetDB its facts,
                              catalogs and reports, and its CA issues PuppetDB's certificate for that name

--role provisioner: muster-provisioner (two of them share the state; only their ids differ)
  --config FILE               /etc/muster/provisioner.yaml
  --ca FILE --cert FILE --key FILE   its broker credential (CN=provisioner,OU=service,...)
  --signing-key FILE          the provisioners' shared signing key (muster key create provisioner)

--role console: the registry, the web console and the notifier (each its own daemon and user)
  --identity NAME --broker URL... --ca FILE
  --registry-cert FILE --registry-key FILE     the registry's broker credential (CN=registry,OU=service,...)
  --console-cert FILE --console-key FILE       the console's (an admin: CN=console,OU=service,...)
  --notifier-cert FILE --notifier-key FILE     the notifier's muster server's (CN=<identity>,OU=node,...)
  --https-cert FILE --https-key FILE           the console's HTTPS certificate
  --registry-token FILE --web-tokens FILE      the registry's bearer token; the console's tokens (<token> <role> <name>)
  --signing-key FILE          the console's signing key (muster key create console): runall from the console
  --provisioner-key PUBLIC_KEY [--trusted-key NAME=PUBLIC_KEY]...   whom the notifier obeys
  [--notify-recipient URL]... who the notifier tells (webhooks, mailto:)
  [--replicas N]              copies of the registry's bucket (3 on a 3-broker cluster)
  [--puppetdb local]          PuppetDB and its PostgreSQL on this machine too; the registry asks it

--trusted-key: another caller whose signed requests the machine obeys (an operator's key), besides
the provisioner's. --fact: a fact the instance starts with, in /etc/facter/facts.d/muster.yaml
(Facter, muster and every Puppet run read it): the ones the provisioner picks a master by
(master.criteria), a role. --plugin: an agent setting in the server config's plugins section, as
MCollective's plugin.<agent>.<setting> lines (e.g. resource.allowed_types=package,service).`;

// flag -> the roles that take it ("*": every role)
const FLAGS = {
  role: "*",
  identity: "*",
  "deb-url": ["node", "master", "provisioner", "console"],
  "apt-repo": ["node", "master", "provisioner", "console"],
  "apt-key": ["node", "master", "provisioner", "console"],
  "apt-suite": ["node", "master", "provisioner", "console"],
  "ssh-authorized-key": "*",
  broker: ["node", "master", "console"],
  ca: "*",
  cert: ["node", "broker", "master", "provisioner"],
  key: ["node", "broker", "master", "provisioner"],
  "provisioner-key": ["node", "master", "console"],
  "trusted-key": ["node", "master", "console"],
  fact: ["node", "master"],
  plugin: ["node"],
  collective: ["node", "master", "console"],
  "provisioning-collective": ["node"],
  "nats-config": ["broker"],
  users: ["broker"],
  "clients-ca": ["broker"],
  "alt-name": ["master"],
  "registry-url": ["master"],
  "registry-token": ["master", "console"],
  "puppet-code": ["master"],
  "puppetserver-heap": ["master"],
  "puppetserver-java-arg": ["master"],
  config: ["provisioner"],
  "signing-key": ["provisioner", "console"],
  "registry-cert": ["console"],
  "registry-key": ["console"],
  "console-cert": ["console"],
  "console-key": ["console"],
  "notifier-cert": ["console"],
  "notifier-key": ["console"],
  "https-cert": ["console"],
  "https-key": ["console"],
  "web-tokens": ["console"],
  "notify-recipient": ["console"],
  replicas: ["console"],
  "puppetdb-url": ["master"],
  puppetdb: ["console"],
};
const REPEATED = ["broker", "trusted-key", "fact", "plugin", "ssh-authorized-key", "alt-name", "notify-recipient", "puppetserver-java-arg"];
const o = { broker: [], "trusted-key": [], fact: [], plugin: [], "ssh-authorized-key": [], "alt-name": [], "notify-recipient": [], "puppetserver-java-arg": [], collective: "muster", "provisioning-collective": "provisioning", "apt-suite": "stable", role: "node" };
const usage = (why) => {
  process.stderr.write(`${why}\n${USAGE}\n`);
  process.exit(64);
};
const argv = process.argv.slice(2);
if (argv.includes("--help") || argv.includes("-h")) {
  process.stdout.write(`${USAGE}\n`);
  process.exit(0);
}
const given = new Set();
for (let i = 0; i < argv.length; i += 2) {
  const k = argv[i].replace(/^--/, "");
  const v = argv[i + 1];
  if (!argv[i].startsWith("--") || !Object.hasOwn(FLAGS, k) || v === undefined) usage(v === undefined && Object.hasOwn(FLAGS, k) ? `${argv[i]} needs a value` : `unknown argument ${argv[i]}`);
  given.add(k);
  if (REPEATED.includes(k)) o[k].push(v);
  else o[k] = v;
}
const role = o.role;
if (!SITE_ROLES.includes(role)) usage(`--role takes ${SITE_ROLES.join(", ")}, not ${JSON.stringify(role)}`);
for (const k of given) if (FLAGS[k] !== "*" && !FLAGS[k].includes(role)) usage(`--${k} is not for --role ${role} (it goes with ${FLAGS[k].map((r) => `--role ${r}`).join(", ")})`);
const need = (...flags) => {
  const missing = flags.filter((f) => !given.has(f));
  if (missing.length) usage(`--role ${role} needs ${missing.map((f) => `--${f}`).join(", ")}`);
};
if (role === "node" && !o.cert !== !o.key) usage("--cert and --key go together: the node's bootstrap certificate and its key");
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
const trustedKeys = o["trusted-key"].map((p) => {
  const m = /^([A-Za-z0-9][A-Za-z0-9_.@=-]*)=([A-Za-z0-9+/]{43}=)$/.exec(p);
  if (!m) usage(`--trusted-key takes NAME=PUBLIC_KEY (the caller name its requests are signed as, and its ed25519 public key in base64, as in <name>.pub), got ${JSON.stringify(p)}`);
  return { name: m[1], key: m[2] };
});
for (const k of o["ssh-authorized-key"]) if (!/^(ssh|ecdsa|sk)-[a-z0-9@.-]+ [A-Za-z0-9+/=]+( .*)?$/.test(k)) usage(`--ssh-authorized-key takes an OpenSSH public key line, got ${JSON.stringify(k.slice(0, 40))}`);
for (const a of o["alt-name"]) if (!/^(IP:[0-9A-Fa-f:.]+|DNS:[A-Za-z0-9.-]+)$/.test(a)) usage(`--alt-name takes IP:ADDRESS or DNS:NAME, got ${JSON.stringify(a)}`);
for (const a of o["puppetserver-java-arg"]) if (!/^-[A-Za-z0-9:+=._-]+$/.test(a)) usage(`--puppetserver-java-arg takes one JVM option such as -XX:TieredStopAtLevel=1, got ${JSON.stringify(a)}`);
if (o["puppetserver-heap"] && !/^\d+[mg]$/.test(o["puppetserver-heap"])) usage(`--puppetserver-heap takes a JVM size such as 768m or 2g, got ${JSON.stringify(o["puppetserver-heap"])}`);
if (o["puppetdb-url"] && !/^https:\/\/[A-Za-z0-9.-]+:\d+$/.test(o["puppetdb-url"])) usage(`--puppetdb-url takes https://NAME:PORT (the name PuppetDB's certificate from this master's CA carries), got ${JSON.stringify(o["puppetdb-url"])}`);
if (o.puppetdb !== undefined && o.puppetdb !== "local") usage(`--puppetdb takes local (PuppetDB on this machine), got ${JSON.stringify(o.puppetdb)}`);

const read = (f, placeholder) => (f ? readFileSync(f, "utf8") : `${placeholder}\n`);
const source = o["apt-repo"] ? { apt: { repo: o["apt-repo"], keyText: readFileSync(o["apt-key"], "utf8"), suite: o["apt-suite"] } } : { debUrl: o["deb-url"] ?? "https://APT.EXAMPLE.NET/muster_VERSION_amd64.deb" };
const brokers = o.broker.length ? o.broker : ["tls://NATS1.EXAMPLE.NET:4222", "tls://NATS2.EXAMPLE.NET:4222", "tls://NATS3.EXAMPLE.NET:4222"];
const common = { identity: o.identity, source, sshAuthorizedKeys: o["ssh-authorized-key"] };

let userData;
if (role === "node") {
  userData = nodeUserData({
    ...common,
    brokers,
    collective: o.collective,
    provisioningCollective: o["provisioning-collective"],
    caText: read(o.ca, "THE BROKER'S CA CERTIFICATE (PEM)"),
    bootstrapCertText: read(o.cert, "THIS NODE'S BOOTSTRAP CERTIFICATE (PEM)"),
    bootstrapKeyText: read(o.key, "THIS NODE'S BOOTSTRAP KEY (PEM)"),
    provisionerKey: o["provisioner-key"] ?? "PROVISIONER_PUBLIC_KEY",
    trustedKeys,
    facts,
    plugins,
  });
} else if (role === "broker") {
  need("identity", "nats-config", "users", "cert", "key", "ca", "clients-ca");
  userData = brokerUserData({ identity: o.identity, sshAuthorizedKeys: o["ssh-authorized-key"], natsConfigText: read(o["nats-config"]), usersText: read(o.users), certText: read(o.cert), keyText: read(o.key), caText: read(o.ca), clientsCaText: read(o["clients-ca"]) });
} else if (role === "master") {
  need("identity", "broker", "ca", "cert", "key", "provisioner-key");
  if (!o["registry-url"] !== !o["registry-token"]) usage("--registry-url and --registry-token go together: where search_nodes asks, and its bearer token");
  userData = masterUserData({
    ...common,
    identity: o.identity,
    brokers,
    collective: o.collective,
    caText: read(o.ca),
    certText: read(o.cert),
    keyText: read(o.key),
    provisionerKey: o["provisioner-key"],
    trustedKeys,
    facts,
    altNames: o["alt-name"],
    ...(o["registry-url"] ? { registry: { url: o["registry-url"], tokenText: read(o["registry-token"]) } } : {}),
    ...(o["puppet-code"] ? { puppetCodeUrl: o["puppet-code"] } : {}),
    ...(o["puppetserver-heap"] ? { heap: o["puppetserver-heap"] } : {}),
    ...(o["puppetserver-java-arg"].length ? { javaArgs: o["puppetserver-java-arg"] } : {}),
    ...(o["puppetdb-url"] ? { puppetdbUrl: o["puppetdb-url"] } : {}),
  });
} else if (role === "console") {
  need("identity", "broker", "ca", "registry-cert", "registry-key", "console-cert", "console-key", "notifier-cert", "notifier-key", "https-cert", "https-key", "registry-token", "web-tokens", "signing-key", "provisioner-key");
  if (o.replicas !== undefined && !/^[1-5]$/.test(o.replicas)) usage(`--replicas takes 1 to 5, got ${JSON.stringify(o.replicas)}`);
  const pair = (name) => ({ certText: read(o[`${name}-cert`]), keyText: read(o[`${name}-key`]) });
  userData = consoleUserData({
    ...common,
    identity: o.identity,
    brokers,
    collective: o.collective,
    caText: read(o.ca),
    registry: pair("registry"),
    console: pair("console"),
    notifier: pair("notifier"),
    https: pair("https"),
    registryTokenText: read(o["registry-token"]),
    webTokensText: read(o["web-tokens"]),
    signingKeyText: read(o["signing-key"]),
    provisionerKey: o["provisioner-key"],
    trustedKeys,
    recipients: o["notify-recipient"],
    replicas: Number(o.replicas ?? 1),
    puppetdb: o.puppetdb === "local",
  });
} else {
  need("config", "ca", "cert", "key", "signing-key");
  userData = provisionerUserData({ ...common, configText: read(o.config), caText: read(o.ca), certText: read(o.cert), keyText: read(o.key), signingKeyText: read(o["signing-key"]) });
}
process.stdout.write(renderUserData(role, userData));
