import { stringify as toYaml } from "yaml";
import { BROKER_PATHS } from "../broker/server-config.js";
import { signingKeyFromPem } from "../protocol/signing.js";
import { nodeServerConfig } from "./node.js";
import { caClientName, CONSOLE_FILES, MASTER_FILES, masterServerConfig, notifierServerConfig, registryConfig, SITE_NODE_KEY, TLS_DIR, webClientConfig, webConfig } from "./site.js";
import { puppetDbCertCommand, puppetDbConfText, PUPPETDB_ROUTES_YAML, PUPPETDB_SERVER_SETTINGS, PUPPETDB_TERMINUS_FILES } from "./puppetdb-site.js";

export { TLS_DIR };

// cloud-init user-data for every machine of a muster site (docs/deploy.md): a node waiting to be
// provisioned, a broker, a Puppet master, a provisioner, the console. Pure: what the operator
// gives (flags of `muster user-data`, files already read) in, the user-data text out. The lab
// boots its machines with exactly this (muster lab up --site), so what the lab runs is what
// docs/deploy.md tells an operator to run; test/packaging/cloud-init*.test.ts hold the two together.

export const SITE_ROLES = ["node", "broker", "master", "provisioner", "console"] as const;
export type SiteRole = (typeof SITE_ROLES)[number];

/** One file cloud-init writes before anything is installed (write_files). */
export interface WriteFile {
  path: string;
  owner: string;
  permissions: string;
  content: string;
}

export interface UserData {
  write_files: WriteFile[];
  disable_root?: boolean;
  ssh_authorized_keys?: string[];
  runcmd: string[][];
}

/** Where the machine gets muster: muster's signed apt repository, or one .deb by URL. */
export type MusterSource = { apt: { repo: string; keyText: string; suite: string } } | { debUrl: string };

/** What every role takes. */
export interface CommonOptions {
  /** The machine's name: its broker user, its Puppet certname, its server identity. */
  identity?: string;
  source: MusterSource;
  sshAuthorizedKeys?: string[];
}

const ROOT = "root:root";
const APT_INSTALL = "DEBIAN_FRONTEND=noninteractive apt-get install -y -o Dpkg::Options::=--force-confold";
const KEYRING = "/etc/apt/keyrings/muster-archive-keyring.asc";

const file = (path: string, permissions: string, content: string, owner = ROOT): WriteFile => ({ path, owner, permissions, content });

/** Files that add muster's apt repository (none for a .deb by URL). */
function sourceFiles(s: MusterSource): WriteFile[] {
  if (!("apt" in s)) return [];
  return [file(KEYRING, "0644", s.apt.keyText), file("/etc/apt/sources.list.d/muster.list", "0644", `deb [signed-by=${KEYRING}] ${s.apt.repo} ${s.apt.suite} main\n`)];
}

/** Commands that install these packages (muster among them) from Debian's mirror and muster's source. */
function installCmds(s: MusterSource, packages: string[]): string[][] {
  if ("apt" in s || !packages.includes("muster")) return [["apt-get", "update"], ["sh", "-c", `${APT_INSTALL} ${packages.join(" ")}`]];
  const others = packages.filter((p) => p !== "muster");
  return [
    ["sh", "-c", `curl -fsSL -o /run/muster.deb ${JSON.stringify(s.debUrl)}`],
    // the .deb's own dependencies, and the role's Debian packages, come from the mirror
    ...(others.length ? [["apt-get", "update"]] : []),
    ["sh", "-c", `${APT_INSTALL} /run/muster.deb${others.length ? ` ${others.join(" ")}` : ""}`],
    ["rm", "-f", "/run/muster.deb"],
  ];
}

function withSsh(u: UserData, keys: string[] | undefined): UserData {
  return keys?.length ? { ...u, disable_root: false, ssh_authorized_keys: keys } : u;
}

// ---------------------------------------------------------------------------------------- node

export interface NodeOptions extends CommonOptions {
  brokers: string[];
  collective: string;
  provisioningCollective: string;
  /** PEM text of the broker's CA, this node's bootstrap certificate and key. */
  caText: string;
  bootstrapCertText: string;
  bootstrapKeyText: string;
  provisionerKey: string;
  trustedKeys: { name: string; key: string }[];
  facts: Record<string, string>;
  plugins: Record<string, Record<string, string>>;
}

export function nodeUserData(o: NodeOptions): UserData {
  const server = nodeServerConfig({
    identity: o.identity,
    brokers: o.brokers,
    collectives: [o.collective],
    ca: `${TLS_DIR}/ca.pem`,
    bootstrap: { cert: `${TLS_DIR}/bootstrap.pem`, key: `${TLS_DIR}/bootstrap.key` },
    provisioning: { collective: o.provisioningCollective, callers: ["provisioner"] },
    ...(Object.keys(o.plugins).length ? { plugins: o.plugins } : {}),
    security: { trusted_keys: [{ name: "provisioner", key: o.provisionerKey }, ...o.trustedKeys] },
    // The package runs the server as the muster user; what needs root goes through the helper.
    privilegedHelper: "/run/muster/privileged.sock",
  });
  return withSsh(
    {
      // Written before the package is installed: dpkg keeps them (--force-confold) as the operator's.
      write_files: [
        file("/etc/muster/server.yaml", "0640", toYaml(server)),
        file(`${TLS_DIR}/ca.pem`, "0644", o.caText),
        // This node's own bootstrap credential: it reaches only its own provisioning subjects.
        file(`${TLS_DIR}/bootstrap.pem`, "0644", o.bootstrapCertText),
        file(`${TLS_DIR}/bootstrap.key`, "0600", o.bootstrapKeyText),
        ...factsFile(o.facts),
        ...sourceFiles(o.source),
      ],
      runcmd: [
        ...installCmds(o.source, ["muster"]),
        // The server runs as muster: its config and bootstrap key become readable by that group only
        // now that the package made it (write_files ran before the group existed).
        ["chgrp", "muster", "/etc/muster/server.yaml", `${TLS_DIR}/bootstrap.key`],
        ["chmod", "0640", `${TLS_DIR}/bootstrap.key`],
        ["systemctl", "enable", "--now", "muster-privileged.socket", "muster-server.service"],
      ],
    },
    o.sshAuthorizedKeys,
  );
}

/** Facts the machine starts with: Facter, muster and every Puppet run read this file. */
function factsFile(facts: Record<string, string>): WriteFile[] {
  if (!Object.keys(facts).length) return [];
  // A value that reads as a number or boolean stays a string: a fact file says what it is given.
  return [file("/etc/facter/facts.d/muster.yaml", "0644", toYaml(facts, { defaultStringType: "QUOTE_DOUBLE", defaultKeyType: "PLAIN" }))];
}

// -------------------------------------------------------------------------------------- broker

export interface BrokerOptions extends Omit<CommonOptions, "source"> {
  /** nats-server.conf as `muster broker config` printed it, and the users `muster broker users` printed. */
  natsConfigText: string;
  usersText: string;
  /** The broker's certificate and key (server and client use), the site CA, and who may connect. */
  certText: string;
  keyText: string;
  caText: string;
  clientsCaText: string;
}

/**
 * Debian's policy-rc.d: while it exists, a package's maintainer scripts start no service. nats-server's
 * postinst would start it before the user-data gives the nats user its key, and its first start would
 * fail on a key it cannot read: the service starts once, when everything it reads is in place.
 */
const NO_START = { path: "/usr/sbin/policy-rc.d", text: "#!/bin/sh\n# muster's user-data: no service starts while packages install (removed once they are)\nexit 101\n" };

/** A broker machine: Debian's nats-server with muster's config; muster itself is not installed. */
export function brokerUserData(o: BrokerOptions): UserData {
  const p = BROKER_PATHS;
  return withSsh(
    {
      write_files: [
        file(NO_START.path, "0755", NO_START.text),
        // Debian's unit reads this file; written first, dpkg keeps it (--force-confold)
        file(p.config, "0644", o.natsConfigText),
        file(p.users, "0644", o.usersText),
        file(p.cert, "0644", o.certText),
        file(p.key, "0600", o.keyText),
        file(p.ca, "0644", o.caText),
        file(p.clientsCa, "0644", o.clientsCaText),
      ],
      runcmd: [
        ["apt-get", "update"],
        ["sh", "-c", `${APT_INSTALL} nats-server`],
        ["rm", "-f", NO_START.path],
        // the nats user exists now: its key, and JetStream's store, become its own
        ["chgrp", "nats", p.key],
        ["chmod", "0640", p.key],
        ["install", "-d", "-o", "nats", "-g", "nats", "-m", "0750", p.store.replace(/\/[^/]+$/, ""), p.store],
        // its first start, with everything it reads in place
        ["systemctl", "enable", "--now", "nats-server.service"],
      ],
    },
    o.sshAuthorizedKeys,
  );
}

// -------------------------------------------------------------------------------------- master

export interface MasterOptions extends CommonOptions {
  identity: string;
  brokers: string[];
  collective: string;
  caText: string;
  /** The master's muster server's own broker credential (the site CA's, not its Puppet key). */
  certText: string;
  keyText: string;
  provisionerKey: string;
  trustedKeys: { name: string; key: string }[];
  facts: Record<string, string>;
  /** More names and addresses the master's certificate carries (IP:10.0.0.5, DNS:puppet): nodes reach it by address. */
  altNames: string[];
  /** The registry search_nodes asks, and its bearer token. */
  registry?: { url: string; tokenText: string };
  /** A tarball of the Puppet code (environments/...), unpacked into /etc/puppet/code. */
  puppetCodeUrl?: string;
  /** puppetserver's JVM heap (-Xms and -Xmx), e.g. 768m. */
  heap?: string;
  /** More JVM options for puppetserver (e.g. -XX:TieredStopAtLevel=1: a small master starts faster). */
  javaArgs?: string[];
  /** Its muster server's node key (PEM), made by the operator so it can be enrolled before the machine boots. */
  nodeKeyText?: string;
  /**
   * PuppetDB, by the name this master reaches it under (https://puppetdb-eu.example.net:8081): the
   * master sends it facts, catalogs and reports, and its CA issues PuppetDB a certificate for that
   * name, which the operator carries to PuppetDB (docs/deploy.md#10-puppetdb).
   */
  puppetdbUrl?: string;
}

/** A node key the operator made (SITE_NODE_KEY, the muster user's to read), and what installs it. */
function siteNodeKey(text: string | undefined): { files: WriteFile[]; chgrp: string[]; chmod: string[] } {
  return text !== undefined ? { files: [file(SITE_NODE_KEY, "0600", text)], chgrp: [SITE_NODE_KEY], chmod: [SITE_NODE_KEY] } : { files: [], chgrp: [], chmod: [] };
}

export function masterUserData(o: MasterOptions): UserData {
  const client = caClientName(o.identity);
  const heap = o.heap ? [["sed", "-i", "-E", `s/-Xms[0-9]+[kmgKMG]? -Xmx[0-9]+[kmgKMG]?/-Xms${o.heap} -Xmx${o.heap}/`, "/etc/default/puppetserver"]] : [];
  const java = o.javaArgs?.length ? [["sed", "-i", "-E", `s/^JAVA_ARGS="/JAVA_ARGS="${o.javaArgs.join(" ")} /`, "/etc/default/puppetserver"]] : [];
  const code = o.puppetCodeUrl ? [["sh", "-c", `curl -fsSL ${JSON.stringify(o.puppetCodeUrl)} | tar -xz -C /etc/puppet/code`]] : [];
  const registry = o.registry
    ? [file(MASTER_FILES.searchNodes, "0644", toYaml({ registry_url: o.registry.url, token_file: MASTER_FILES.registryToken, timeout: 10 })), file(MASTER_FILES.registryToken, "0600", o.registry.tokenText)]
    : [];
  const nodeKey = siteNodeKey(o.nodeKeyText);
  const pdbName = o.puppetdbUrl ? new URL(o.puppetdbUrl).hostname : undefined;
  const puppetdb = o.puppetdbUrl ? [file(PUPPETDB_TERMINUS_FILES.conf, "0644", puppetDbConfText([o.puppetdbUrl])), file(PUPPETDB_TERMINUS_FILES.routes, "0644", PUPPETDB_ROUTES_YAML)] : [];
  const puppetdbSettings = o.puppetdbUrl ? PUPPETDB_SERVER_SETTINGS.map(([k, v]) => ["puppet", "config", "set", "--section", "server", k, v]) : [];
  // PuppetDB's certificate, for the name this master reaches it by, from this master's CA, offline
  // like muster's own (puppetserver's online `ca generate` would need the CA reachable by name)
  const puppetdbCert = pdbName ? [["sh", "-c", puppetDbCertCommand(pdbName)]] : [];
  return withSsh(
    {
      write_files: [
        file("/etc/muster/server.yaml", "0640", toYaml(masterServerConfig({ ...o, nodeKey: o.nodeKeyText !== undefined }))),
        // its puppetca agent serves the CA only while puppetserver does: started after it (Debian's
        // unit is active once the server answers), stopped with it, so the fleet never sees a master
        // whose CA does not answer, and the provisioner waits for it instead (docs/provisioner.md)
        file("/etc/systemd/system/muster-server.service.d/10-puppetserver.conf", "0644", "[Unit]\nAfter=puppetserver.service\nBindsTo=puppetserver.service\n"),
        file(`${TLS_DIR}/ca.pem`, "0644", o.caText),
        file(`${TLS_DIR}/master.pem`, "0644", o.certText),
        file(`${TLS_DIR}/master.key`, "0600", o.keyText),
        ...nodeKey.files,
        ...factsFile(o.facts),
        ...registry,
        ...puppetdb,
        ...sourceFiles(o.source),
      ],
      runcmd: [
        ...installCmds(o.source, ["puppetserver", ...(o.puppetdbUrl ? ["puppet-terminus-puppetdb"] : []), "muster"]),
        ...heap,
        ...java,
        // Its certname is its identity, whatever host name the cloud gave the machine (Puppet's
        // default is the host's full name, and a short one would name its certificate): puppetserver
        // reads it at every start
        ["puppet", "config", "set", "--section", "main", "certname", o.identity],
        // The CA and the master's certificate (offline, before puppetserver first starts), then a
        // certificate of muster's own for the CA API: pp_cli_auth, which auth.conf admits
        ["puppetserver", "ca", "setup", "--certname", o.identity, "--subject-alt-names", ["puppet", o.identity, ...o.altNames].join(",")],
        ["puppetserver", "ca", "generate", "--certname", client, "--ca-client", "--force"],
        ["install", "-m", "0640", "-g", "muster", `${MASTER_FILES.ssldir}/certs/${client}.pem`, MASTER_FILES.caClientCert],
        ["install", "-m", "0640", "-g", "muster", `${MASTER_FILES.ssldir}/private_keys/${client}.pem`, MASTER_FILES.caClientKey],
        ["install", "-m", "0644", `${MASTER_FILES.ssldir}/certs/ca.pem`, MASTER_FILES.puppetCa],
        ...puppetdbCert,
        // Debian ships an empty codedir: the production environment and the base modulepath
        ["mkdir", "-p", "/etc/puppet/code/environments/production", "/etc/puppet/code/modules"],
        ...code,
        // search_nodes, shipped in the package, in every environment's modulepath
        ["ln", "-sfn", "/usr/lib/muster/app/puppet/modules/muster", "/etc/puppet/code/modules/muster"],
        ...(o.registry ? [["chgrp", "puppet", MASTER_FILES.registryToken], ["chmod", "0640", MASTER_FILES.registryToken]] : []),
        ["chgrp", "muster", "/etc/muster/server.yaml", `${TLS_DIR}/master.key`, ...nodeKey.chgrp],
        ["chmod", "0640", `${TLS_DIR}/master.key`, ...nodeKey.chmod],
        ...puppetdbSettings,
        ["systemctl", "enable", "--now", "puppetserver.service", "muster-server.service"],
      ],
    },
    o.sshAuthorizedKeys,
  );
}

// --------------------------------------------------------------------------------- provisioner

export interface ProvisionerOptions extends CommonOptions {
  /** /etc/muster/provisioner.yaml: the same on every provisioner (each keeps its own id, provisioner@<host>). */
  configText: string;
  caText: string;
  certText: string;
  keyText: string;
  /** The provisioners' shared signing key (PEM): nodes trust its public half. */
  signingKeyText: string;
}

export const PROVISIONER_FILES = {
  config: "/etc/muster/provisioner.yaml",
  signingKey: "/var/lib/muster/provisioner/keys/provisioner.pem",
} as const;

export function provisionerUserData(o: ProvisionerOptions): UserData {
  return withSsh(
    {
      write_files: [
        file(PROVISIONER_FILES.config, "0640", o.configText),
        file(`${TLS_DIR}/ca.pem`, "0644", o.caText),
        file(`${TLS_DIR}/provisioner.pem`, "0644", o.certText),
        file(`${TLS_DIR}/provisioner.key`, "0600", o.keyText),
        // the unit's StateDirectory; systemd gives it (and this key) to the daemon's user at start
        file(PROVISIONER_FILES.signingKey, "0600", o.signingKeyText),
        ...sourceFiles(o.source),
      ],
      runcmd: [
        ...installCmds(o.source, ["muster"]),
        // the provisioner runs as a user of its own (docs/decisions/privileged-helper.md): its config and key are that group's
        ["chgrp", "muster-provisioner", PROVISIONER_FILES.config, `${TLS_DIR}/provisioner.key`],
        ["chmod", "0640", `${TLS_DIR}/provisioner.key`],
        ["systemctl", "enable", "--now", "muster-provisioner.service"],
      ],
    },
    o.sshAuthorizedKeys,
  );
}

// ------------------------------------------------------------------------------------- console

export interface ConsoleOptions extends CommonOptions {
  identity: string;
  brokers: string[];
  collective: string;
  caText: string;
  /** Broker credentials: the registry's, the console's (an admin) and the notifier's. */
  registry: { certText: string; keyText: string };
  console: { certText: string; keyText: string };
  notifier: { certText: string; keyText: string };
  /** The console's HTTPS certificate and key. */
  https: { certText: string; keyText: string };
  registryTokenText: string;
  webTokensText: string;
  /**
   * The console's signing key (PEM): runall from the console signs as `console`, which nodes
   * trust; the notifier on this machine trusts its public half, so the console's alerts are obeyed.
   */
  signingKeyText: string;
  provisionerKey: string;
  trustedKeys: { name: string; key: string }[];
  /** Who the notifier tells (webhooks, mailto:) besides what a request names. */
  recipients: string[];
  /** Copies of the registry's bucket (3 on a 3-member cluster). */
  replicas: number;
  /** The notifier's node key (PEM), made by the operator so it can be enrolled before the machine boots. */
  nodeKeyText?: string;
  /** PuppetDB on this machine too (Debian's package, its PostgreSQL): the registry asks it on loopback. */
  puppetdb?: boolean;
  /** More JVM options for that PuppetDB, in /etc/default/puppetdb (-XX:TieredStopAtLevel=1: it starts on about 0.6 of the CPU). */
  puppetdbJavaArgs?: string[];
}

/**
 * The public half of the console's signing key, which its notifier trusts: without it the
 * notifier ignores the console's discovery and its alerts reach nobody (issue 36). A placeholder
 * (the example user-data) stays a placeholder.
 */
function consolePublicKey(pem: string): string {
  if (!pem.includes("PRIVATE KEY")) return "CONSOLE_PUBLIC_KEY";
  return signingKeyFromPem("console", pem).publicKey;
}

/** JVM options added to PuppetDB's JAVA_ARGS (Debian's /etc/default/puppetdb), before its first start. */
const puppetDbJava = (args: string[] | undefined): string[][] => (args?.length ? [["sed", "-i", "-E", `s/^JAVA_ARGS="/JAVA_ARGS="${args.join(" ")} /`, "/etc/default/puppetdb"]] : []);

/** The console machine: the registry, the web console and the notifier, each its own daemon and user. */
export function consoleUserData(o: ConsoleOptions): UserData {
  const cfg = { brokers: o.brokers, collective: o.collective };
  const key = (name: string, c: { certText: string; keyText: string }) => [file(`${TLS_DIR}/${name}.pem`, "0644", c.certText), file(`${TLS_DIR}/${name}.key`, "0600", c.keyText)];
  const nodeKey = siteNodeKey(o.nodeKeyText);
  return withSsh(
    {
      write_files: [
        file(CONSOLE_FILES.registryConfig, "0640", toYaml(registryConfig({ ...cfg, replicas: o.replicas, puppetdb: o.puppetdb }))),
        file(CONSOLE_FILES.webConfig, "0640", toYaml(webConfig({ ...cfg, replicas: o.replicas }))),
        file("/etc/muster/server.yaml", "0640", toYaml(notifierServerConfig({ ...cfg, identity: o.identity, provisionerKey: o.provisionerKey, consoleKey: consolePublicKey(o.signingKeyText), trustedKeys: o.trustedKeys, recipients: o.recipients, nodeKey: o.nodeKeyText !== undefined }))),
        file(`${TLS_DIR}/ca.pem`, "0644", o.caText),
        ...key("registry", o.registry),
        ...key("console", o.console),
        ...key("notifier", o.notifier),
        ...key("web-https", o.https),
        ...nodeKey.files,
        file(CONSOLE_FILES.registryToken, "0600", o.registryTokenText),
        file(CONSOLE_FILES.webRegistryToken, "0600", o.registryTokenText),
        file(CONSOLE_FILES.webTokens, "0600", o.webTokensText),
        // the unit's StateDirectory (MUSTER_CONFIG_DIR): systemd gives it to muster-web at start
        file(CONSOLE_FILES.webClientConfig, "0600", toYaml(webClientConfig(cfg))),
        file(CONSOLE_FILES.webSigningKey, "0600", o.signingKeyText),
        ...sourceFiles(o.source),
      ],
      runcmd: [
        ...installCmds(o.source, ["muster"]),
        // PostgreSQL first, running, so PuppetDB's package makes its database there (dbconfig-common:
        // the role, the database, pg_trgm, a read-only role); PuppetDB then serves on loopback, and
        // its TLS port once the operator gave it the masters' certificates (docs/deploy.md#10-puppetdb)
        // (masked while it installs: it starts once, with its TLS, rather than twice)
        ...(o.puppetdb ? [["sh", "-c", `${APT_INSTALL} postgresql`], ["systemctl", "mask", "puppetdb.service"], ["sh", "-c", `${APT_INSTALL} puppetdb`], ...puppetDbJava(o.puppetdbJavaArgs), ["systemctl", "unmask", "puppetdb.service"], ["systemctl", "enable", "postgresql.service", "puppetdb.service"]] : []),
        // each daemon reads its own files, and no other's: the package made their users
        ["chgrp", "muster-registry", CONSOLE_FILES.registryConfig, CONSOLE_FILES.registryToken, `${TLS_DIR}/registry.key`],
        ["chgrp", "muster-web", CONSOLE_FILES.webConfig, CONSOLE_FILES.webTokens, CONSOLE_FILES.webRegistryToken, `${TLS_DIR}/console.key`, `${TLS_DIR}/web-https.key`],
        ["chgrp", "muster", "/etc/muster/server.yaml", `${TLS_DIR}/notifier.key`, ...nodeKey.chgrp],
        ["chmod", "0640", CONSOLE_FILES.registryToken, CONSOLE_FILES.webTokens, CONSOLE_FILES.webRegistryToken, `${TLS_DIR}/registry.key`, `${TLS_DIR}/console.key`, `${TLS_DIR}/web-https.key`, `${TLS_DIR}/notifier.key`, ...nodeKey.chmod],
        ["systemctl", "enable", "--now", "muster-registry.service", "muster-web.service", "muster-server.service"],
      ],
    },
    o.sshAuthorizedKeys,
  );
}

// ------------------------------------------------------------------------------------- render

const HEADERS: Record<SiteRole, string> = {
  node: "a fresh Debian machine that waits to be provisioned (docs/deploy.md#7-nodes)",
  broker: "a broker of the site's nats-server cluster (docs/deploy.md#3-the-broker)",
  master: "a Puppet master with muster's puppetca agent (docs/deploy.md#4-puppet-masters)",
  provisioner: "a provisioner (docs/deploy.md#5-provisioners-two-for-ha)",
  console: "the registry and the web console (docs/deploy.md#6-the-registry-and-the-console), with PuppetDB where asked (#10-puppetdb)",
};

/** The user-data text: `#cloud-config`, a header saying what the machine becomes, the YAML. */
export function renderUserData(role: SiteRole, u: UserData): string {
  const origin =
    role === "node"
      ? "# Rendered by `muster user-data` from the generator the lab's nodes use (src/config/node.ts);"
      : "# Rendered by `muster user-data` (src/config/cloud-init.ts), as the lab's site machines are;";
  return `#cloud-config
# muster: ${HEADERS[role]}.
${origin}
# re-render rather than edit. CAPITALS are placeholders: the render command fills them.
${toYaml(u, { lineWidth: 0 })}`;
}
