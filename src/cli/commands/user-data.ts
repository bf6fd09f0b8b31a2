import { Command } from "commander";
import { readFileSync } from "node:fs";
import { MusterError } from "../../errors.js";

// `muster user-data [--role R] [flags]`: cloud-init user-data for a fresh Debian machine of a muster
// site: by default a node that installs muster, writes its bootstrap credential and server config,
// and waits until the provisioner takes it; with --role, the site's other machines (a broker, a
// Puppet master, a provisioner, the console). It ships in the package, so an operator's
// workstation renders a site with no checkout. What goes in each comes from src/config/cloud-init.ts,
// the generator the lab's machines boot with (`muster lab up --site`); docs/deploy.md shows the
// command for each role.
//
// Without arguments it prints examples/cloud-init/user-data.yaml (placeholders in CAPITALS), which
// installs from one .deb URL; with --apt-repo and --apt-key the machine adds muster's signed apt
// repository and installs from there, so later upgrades are `apt-get upgrade`.

const USAGE = `
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
  [--node-key FILE]           its muster server's node key (muster key create NAME): replies signed
                              with it verify once muster key enroll put it in the key directory
  [--alt-name IP:ADDRESS|DNS:NAME]...   names and addresses nodes reach it by, in its certificate
  [--registry-url URL --registry-token FILE]   what search_nodes asks
  [--puppet-code URL]         a tarball of environments/..., unpacked into /etc/puppet/code
  [--puppetserver-heap SIZE]  puppetserver's JVM heap, e.g. 768m
  [--puppetserver-java-arg ARG]...   more JVM options (-XX:TieredStopAtLevel=1: a small master starts faster)
  [--puppetdb-url URL]        PuppetDB by the name this master reaches it under
                              (https://puppetdb-eu.example.net:8081): it sends PuppetDB its facts,
                              catalogs and reports, and its CA issues PuppetDB a certificate for that name

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
  [--node-key FILE]           the notifier's node key (muster key create NAME), as for a master
  [--notify-recipient URL]... who the notifier tells (webhooks, mailto:)
  [--replicas N]              copies of the registry's bucket (3 on a 3-broker cluster)
  [--puppetdb local]          PuppetDB and its PostgreSQL on this machine too; the registry asks it
  [--puppetdb-java-arg ARG]...   more JVM options for PuppetDB (-XX:TieredStopAtLevel=1: it starts
                              on about 0.6 of the CPU)

--trusted-key: another caller whose signed requests the machine obeys (an operator's key: muster
key show prints yours as NAME=PUBLIC_KEY), besides the provisioner's. --fact: a fact the instance
starts with, in /etc/facter/facts.d/muster.yaml (Facter, muster and every Puppet run read it): the
ones the provisioner picks a master by (master.criteria), a role. --plugin: an agent setting in the
server config's plugins section, as MCollective's plugin.<agent>.<setting> lines (e.g.
resource.allowed_types=package,service).

Examples (docs/deploy.md has one for every role):
  muster user-data > user-data.yaml           the example, placeholders in CAPITALS
  muster user-data --apt-repo https://apt.example.net/muster --apt-key muster-archive-keyring.asc \\
    --broker tls://nats1.example.net:4222 --ca ca.pem --identity node42.example.net \\
    --cert creds/node42.example.net/bootstrap.pem --key creds/node42.example.net/bootstrap.key \\
    --provisioner-key "$(cat keys/provisioner.pub)" --trusted-key "$(muster key show)" > node42.user-data.yaml`;

type Role = "node" | "broker" | "master" | "provisioner" | "console";
const ROLES: Role[] = ["node", "broker", "master", "provisioner", "console"];

// flag -> the roles that take it ("*": every role)
const FLAGS: Record<string, "*" | Role[]> = {
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
  "node-key": ["master", "console"],
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
  "puppetdb-java-arg": ["console"],
};
const REPEATED = ["broker", "trusted-key", "fact", "plugin", "ssh-authorized-key", "alt-name", "notify-recipient", "puppetserver-java-arg", "puppetdb-java-arg"] as const;

const usage = (why: string): never => {
  throw new MusterError("MUSTER_USAGE", `${why} (muster user-data --help lists every role's flags)`);
};

/** The flags as given: single ones by name, repeated ones as lists; which were given at all. */
export function parseUserDataFlags(argv: string[]): { role: Role; one: Record<string, string>; many: Record<(typeof REPEATED)[number], string[]>; given: Set<string> } {
  const one: Record<string, string> = { collective: "muster", "provisioning-collective": "provisioning", "apt-suite": "stable", role: "node" };
  const many = Object.fromEntries(REPEATED.map((k) => [k, [] as string[]])) as Record<(typeof REPEATED)[number], string[]>;
  const given = new Set<string>();
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i]!.replace(/^--/, "");
    const v = argv[i + 1];
    if (!argv[i]!.startsWith("--") || !Object.hasOwn(FLAGS, k)) usage(`unknown argument ${argv[i]}`);
    if (v === undefined) usage(`${argv[i]} needs a value`);
    given.add(k);
    if ((REPEATED as readonly string[]).includes(k)) many[k as (typeof REPEATED)[number]].push(v!);
    else one[k] = v!;
  }
  const role = one.role as Role;
  if (!ROLES.includes(role)) usage(`--role takes ${ROLES.join(", ")}, not ${JSON.stringify(role)}`);
  for (const k of given) {
    const roles = FLAGS[k]!;
    if (roles !== "*" && !roles.includes(role)) usage(`--${k} is not for --role ${role} (it goes with ${roles.map((r) => `--role ${r}`).join(", ")})`);
  }
  return { role, one, many, given };
}

/** The user-data text for these flags (files named by flags are read here). */
export async function renderUserDataFromFlags(argv: string[]): Promise<string> {
  const { role, one: o, many, given } = parseUserDataFlags(argv);
  const need = (...flags: string[]) => {
    const missing = flags.filter((f) => !given.has(f));
    if (missing.length) usage(`--role ${role} needs ${missing.map((f) => `--${f}`).join(", ")}`);
  };
  if (role === "node" && !o.cert !== !o.key) usage("--cert and --key go together: the node's bootstrap certificate and its key");
  if (o["deb-url"] && o["apt-repo"]) usage("--deb-url and --apt-repo are two ways to install: give one");
  if (!o["apt-repo"] !== !o["apt-key"]) usage("--apt-repo and --apt-key go together: the repository and the public key that signs it");

  /** NAME=VALUE pairs of a repeated flag, in order; a name given twice keeps its last value. */
  const pairs = (flag: "plugin" | "fact", nameRe: RegExp, what: string) =>
    Object.fromEntries(
      many[flag].map((p) => {
        const at = p.indexOf("=");
        const [name, value] = [p.slice(0, at), p.slice(at + 1)];
        if (at < 1 || !nameRe.test(name) || value === "") usage(`--${flag} takes ${what}, got ${JSON.stringify(p)}`);
        return [name, value];
      }),
    );
  const plugins: Record<string, Record<string, string>> = {};
  for (const [name, value] of Object.entries(pairs("plugin", /^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$/, "AGENT.SETTING=VALUE (e.g. resource.allowed_types=file)"))) {
    const [agent, setting] = name.split(".") as [string, string];
    (plugins[agent] ??= {})[setting] = value;
  }
  const facts = pairs("fact", /^[a-z][a-z0-9_]*$/, "NAME=VALUE with a lower-case fact name (a-z, 0-9, _)");
  // NAME=KEY where KEY is an ed25519 public key in base64 (44 characters, ending in "="): the caller
  // name itself may hold "=" (a user's default caller name is user=<login>).
  const trustedKeys = many["trusted-key"].map((p) => {
    const m = /^([A-Za-z0-9][A-Za-z0-9_.@=-]*)=([A-Za-z0-9+/]{43}=)$/.exec(p);
    if (!m) return usage(`--trusted-key takes NAME=PUBLIC_KEY (the caller name its requests are signed as, and its ed25519 public key in base64, as muster key show prints), got ${JSON.stringify(p)}`);
    return { name: m[1]!, key: m[2]! };
  });
  for (const k of many["ssh-authorized-key"]) if (!/^(ssh|ecdsa|sk)-[a-z0-9@.-]+ [A-Za-z0-9+/=]+( .*)?$/.test(k)) usage(`--ssh-authorized-key takes an OpenSSH public key line, got ${JSON.stringify(k.slice(0, 40))}`);
  for (const a of many["alt-name"]) if (!/^(IP:[0-9A-Fa-f:.]+|DNS:[A-Za-z0-9.-]+)$/.test(a)) usage(`--alt-name takes IP:ADDRESS or DNS:NAME, got ${JSON.stringify(a)}`);
  for (const flag of ["puppetserver-java-arg", "puppetdb-java-arg"] as const) for (const a of many[flag]) if (!/^-[A-Za-z0-9:+=._-]+$/.test(a)) usage(`--${flag} takes one JVM option such as -XX:TieredStopAtLevel=1, got ${JSON.stringify(a)}`);
  if (o["puppetserver-heap"] && !/^\d+[mg]$/.test(o["puppetserver-heap"])) usage(`--puppetserver-heap takes a JVM size such as 768m or 2g, got ${JSON.stringify(o["puppetserver-heap"])}`);
  if (o["puppetdb-url"] && !/^https:\/\/[A-Za-z0-9.-]+:\d+$/.test(o["puppetdb-url"])) usage(`--puppetdb-url takes https://NAME:PORT (the name PuppetDB's certificate from this master's CA carries), got ${JSON.stringify(o["puppetdb-url"])}`);
  if (o.puppetdb !== undefined && o.puppetdb !== "local") usage(`--puppetdb takes local (PuppetDB on this machine), got ${JSON.stringify(o.puppetdb)}`);
  if (many["puppetdb-java-arg"].length && o.puppetdb !== "local") usage("--puppetdb-java-arg needs --puppetdb local: it sets the JVM options of the PuppetDB on this machine");
  if (o.identity !== undefined && !/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(o.identity)) usage(`--identity takes a host name (letters, digits, . _ -), got ${JSON.stringify(o.identity)}`);

  const readFile = (flag: string, f: string): string => {
    try {
      return readFileSync(f, "utf8");
    } catch (e) {
      return usage(`--${flag} ${f}: ${(e as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : (e as Error).message}`);
    }
  };
  /** A file flag's text, or the placeholder the example shows when it was not given. */
  const read = (flag: string, placeholder = "") => (o[flag] ? readFile(flag, o[flag]) : `${placeholder}\n`);
  const { brokerUserData, consoleUserData, masterUserData, nodeUserData, provisionerUserData, renderUserData } = await import("../../config/cloud-init.js");
  const source = o["apt-repo"] ? { apt: { repo: o["apt-repo"], keyText: read("apt-key"), suite: o["apt-suite"]! } } : { debUrl: o["deb-url"] ?? "https://APT.EXAMPLE.NET/muster_VERSION_amd64.deb" };
  const brokers = many.broker.length ? many.broker : ["tls://NATS1.EXAMPLE.NET:4222", "tls://NATS2.EXAMPLE.NET:4222", "tls://NATS3.EXAMPLE.NET:4222"];
  const common = { identity: o.identity, source, sshAuthorizedKeys: many["ssh-authorized-key"] };
  const nodeKey = o["node-key"] ? { nodeKeyText: read("node-key") } : {};

  switch (role) {
    case "node":
      return renderUserData(
        role,
        nodeUserData({
          ...common,
          brokers,
          collective: o.collective!,
          provisioningCollective: o["provisioning-collective"]!,
          caText: read("ca", "THE BROKER'S CA CERTIFICATE (PEM)"),
          bootstrapCertText: read("cert", "THIS NODE'S BOOTSTRAP CERTIFICATE (PEM)"),
          bootstrapKeyText: read("key", "THIS NODE'S BOOTSTRAP KEY (PEM)"),
          provisionerKey: o["provisioner-key"] ?? "PROVISIONER_PUBLIC_KEY",
          trustedKeys,
          facts,
          plugins,
        }),
      );
    case "broker":
      need("identity", "nats-config", "users", "cert", "key", "ca", "clients-ca");
      return renderUserData(role, brokerUserData({ identity: o.identity, sshAuthorizedKeys: many["ssh-authorized-key"], natsConfigText: read("nats-config"), usersText: read("users"), certText: read("cert"), keyText: read("key"), caText: read("ca"), clientsCaText: read("clients-ca") }));
    case "master":
      need("identity", "broker", "ca", "cert", "key", "provisioner-key");
      if (!o["registry-url"] !== !o["registry-token"]) usage("--registry-url and --registry-token go together: where search_nodes asks, and its bearer token");
      return renderUserData(
        role,
        masterUserData({
          ...common,
          identity: o.identity!,
          brokers,
          collective: o.collective!,
          caText: read("ca"),
          certText: read("cert"),
          keyText: read("key"),
          provisionerKey: o["provisioner-key"]!,
          trustedKeys,
          facts,
          altNames: many["alt-name"],
          ...nodeKey,
          ...(o["registry-url"] ? { registry: { url: o["registry-url"], tokenText: read("registry-token") } } : {}),
          ...(o["puppet-code"] ? { puppetCodeUrl: o["puppet-code"] } : {}),
          ...(o["puppetserver-heap"] ? { heap: o["puppetserver-heap"] } : {}),
          ...(many["puppetserver-java-arg"].length ? { javaArgs: many["puppetserver-java-arg"] } : {}),
          ...(o["puppetdb-url"] ? { puppetdbUrl: o["puppetdb-url"] } : {}),
        }),
      );
    case "console": {
      need("identity", "broker", "ca", "registry-cert", "registry-key", "console-cert", "console-key", "notifier-cert", "notifier-key", "https-cert", "https-key", "registry-token", "web-tokens", "signing-key", "provisioner-key");
      if (o.replicas !== undefined && !/^[1-5]$/.test(o.replicas)) usage(`--replicas takes 1 to 5, got ${JSON.stringify(o.replicas)}`);
      const pair = (name: string) => ({ certText: read(`${name}-cert`), keyText: read(`${name}-key`) });
      return renderUserData(
        role,
        consoleUserData({
          ...common,
          identity: o.identity!,
          brokers,
          collective: o.collective!,
          caText: read("ca"),
          registry: pair("registry"),
          console: pair("console"),
          notifier: pair("notifier"),
          https: pair("https"),
          registryTokenText: read("registry-token"),
          webTokensText: read("web-tokens"),
          signingKeyText: read("signing-key"),
          provisionerKey: o["provisioner-key"]!,
          trustedKeys,
          ...nodeKey,
          recipients: many["notify-recipient"],
          replicas: Number(o.replicas ?? 1),
          puppetdb: o.puppetdb === "local",
          ...(many["puppetdb-java-arg"].length ? { puppetdbJavaArgs: many["puppetdb-java-arg"] } : {}),
        }),
      );
    }
    case "provisioner":
      need("config", "ca", "cert", "key", "signing-key");
      return renderUserData(role, provisionerUserData({ ...common, configText: read("config"), caText: read("ca"), certText: read("cert"), keyText: read("key"), signingKeyText: read("signing-key") }));
  }
}

export function userDataCommand(): Command {
  return new Command("user-data")
    .description("Print cloud-init user-data for a machine of the site: a node waiting to be provisioned (default), or --role broker|master|provisioner|console")
    .usage("[--role ROLE] [flags]")
    .argument("[flags...]", "the role's flags, below")
    .allowUnknownOption()
    .allowExcessArguments()
    .addHelpText("after", USAGE)
    .action(async (_flags: string[], _o: unknown, cmd: Command) => {
      process.stdout.write(await renderUserDataFromFlags(cmd.args));
    });
}
