import { Command } from "commander";
import { MusterError } from "../../errors.js";

// `muster ca create` and `muster ca issue`: the site's own CA on the operator's workstation, and
// the certificates the brokers and services present (docs/deploy.md#2-credentials), each an X.509
// v3 certificate with the extensions TLS stacks check: basicConstraints, keyUsage, extendedKeyUsage
// and, for servers, subjectAltName. Subjects follow the broker's users: a service carries OU and O,
// which no Puppet certificate does, so no node can pass for one.

const collect = (v: string, prev: string[] = []) => [...prev, v];

/** What each kind of certificate is: its OU, its extended key usage, whether it names a host. */
export const CERT_KINDS = {
  service: { ou: "service", usage: "client", host: false, what: "a daemon or an operator: CN=<name>,OU=service,O=<org> (provisioner, registry, console, ops)" },
  node: { ou: "node", usage: "client", host: false, what: "a site machine's muster server (a master, the notifier): CN=<identity>,OU=node,O=<org>" },
  broker: { ou: "broker", usage: "both", host: true, what: "a broker: clients connect to it and members to each other (server and client use), its name in subjectAltName" },
  https: { ou: "console", usage: "server", host: true, what: "the console's HTTPS: its name in subjectAltName" },
} as const;
type Kind = keyof typeof CERT_KINDS;

const NAME = /^[A-Za-z0-9][A-Za-z0-9._=@-]{0,63}$/;

const days = (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > 36500) throw new MusterError("MUSTER_USAGE", "--days takes a whole number of days from 1 to 36500");
  return n;
};

export function caCommand(): Command {
  const ca = new Command("ca").description("The site's CA: make it, and issue the brokers' and services' certificates (X.509 v3, with the extensions TLS checks)");
  ca.addCommand(
    new Command("create")
      .description("Make the site's CA in a directory: ca.pem (the certificate everyone is given) and ca.key (0600: keep it on this workstation)")
      .requiredOption("--dir <dir>", "where (made 0700)")
      .option("--org <name>", "O= of the CA and of every certificate it issues (the broker users' O=)", "example")
      .option("--days <n>", "validity in days", days, 3650)
      .addHelpText(
        "after",
        `
An existing CA in the directory is kept, never replaced: every certificate it issued stays valid.

Example:
  muster ca create --dir ca --org example        ca/ca.pem, ca/ca.key`,
      )
      .action(async (o: { dir: string; org: string; days: number }) => {
        const { existsSync } = await import("node:fs");
        const { join } = await import("node:path");
        const { ensureCA } = await import("../../security/pki.js");
        if (!/^[A-Za-z0-9 ._-]{1,64}$/.test(o.org)) throw new MusterError("MUSTER_USAGE", `--org ${JSON.stringify(o.org)}: letters, digits, space . _ - only`);
        const had = existsSync(join(o.dir, "ca.pem")) && existsSync(join(o.dir, "ca.key"));
        const made = ensureCA(o.dir, `/O=${o.org}/CN=${o.org} muster CA`, o.days);
        process.stdout.write(`${had ? "kept the CA there" : "made"}: ${made.cert}, ${made.key}\n`);
      }),
  );
  ca.addCommand(
    new Command("issue")
      .description("Issue a certificate and key from the site's CA: <out>/<name>.pem and <name>.key (0600)")
      .argument("<kind>", `what it is for: ${Object.keys(CERT_KINDS).join(", ")}`)
      .argument("<name>", "its CN: the service's name, or the machine's host name")
      .requiredOption("--ca-dir <dir>", "the CA's directory (muster ca create --dir)")
      .option("--out <dir>", "where to write them", ".")
      .option("--dns <name>", "another DNS name in subjectAltName (broker, https; repeatable)", collect)
      .option("--ip <address>", "an address in subjectAltName (broker, https; repeatable)", collect)
      .option("--days <n>", "validity in days", days, 825)
      .addHelpText(
        "after",
        `
Kinds:
${Object.entries(CERT_KINDS)
  .map(([k, v]) => `  ${k.padEnd(8)} ${v.what}`)
  .join("\n")}

Each is X.509 v3: basicConstraints CA:FALSE, keyUsage digitalSignature and keyEncipherment,
extendedKeyUsage serverAuth and/or clientAuth, subjectAltName for hosts. O= is the CA's. A
certificate that exists under that name is kept, not replaced.

Examples:
  muster ca issue broker nats1.example.net --ca-dir ca --out creds
  muster ca issue service provisioner --ca-dir ca --out creds
  muster ca issue node puppet-eu.example.net --ca-dir ca --out creds
  muster ca issue https console.example.net --ca-dir ca --out creds`,
      )
      .action(async (kind: string, name: string, o: { caDir: string; out: string; dns?: string[]; ip?: string[]; days: number }) => {
        const { X509Certificate } = await import("node:crypto");
        const { existsSync, readFileSync } = await import("node:fs");
        const { isIP } = await import("node:net");
        const { join } = await import("node:path");
        const { issueCert } = await import("../../security/pki.js");
        if (!Object.hasOwn(CERT_KINDS, kind)) throw new MusterError("MUSTER_USAGE", `the kind is one of ${Object.keys(CERT_KINDS).join(", ")}, not ${JSON.stringify(kind)}`);
        const k = CERT_KINDS[kind as Kind];
        if (!NAME.test(name)) throw new MusterError("MUSTER_USAGE", `name ${JSON.stringify(name)}: letters, digits, . _ = @ - (a host name or a service's name)`);
        if (!k.host && (o.dns?.length || o.ip?.length)) throw new MusterError("MUSTER_USAGE", `--dns and --ip name a host: ${kind} certificates carry none`);
        for (const a of o.ip ?? []) if (!isIP(a)) throw new MusterError("MUSTER_USAGE", `--ip ${JSON.stringify(a)} is not an address`);
        for (const d of o.dns ?? []) if (!/^[A-Za-z0-9*][A-Za-z0-9.-]*$/.test(d)) throw new MusterError("MUSTER_USAGE", `--dns ${JSON.stringify(d)} is not a host name`);
        const caFiles = { dir: o.caDir, cert: join(o.caDir, "ca.pem"), key: join(o.caDir, "ca.key") };
        if (!existsSync(caFiles.cert) || !existsSync(caFiles.key)) throw new MusterError("MUSTER_PKI_FAILED", `no CA in ${o.caDir} (ca.pem and ca.key): muster ca create --dir ${o.caDir} makes one`);
        const org = /^O=(.*)$/m.exec(new X509Certificate(readFileSync(caFiles.cert)).subject)?.[1] ?? "muster";
        const existed = existsSync(join(o.out, `${name}.pem`)) && existsSync(join(o.out, `${name}.key`));
        const made = issueCert(caFiles, { name, dir: o.out, subject: `/O=${org}/OU=${k.ou}/CN=${name}`, usage: k.usage, days: o.days, ...(k.host ? { dns: [name, ...(o.dns ?? [])], ips: o.ip ?? [] } : {}) });
        const user = `CN=${name},OU=${k.ou},O=${org}`;
        process.stdout.write(`${existed ? "kept" : "issued"} ${made.cert} and ${made.key}: ${user}${k.host ? `, names ${[name, ...(o.dns ?? []), ...(o.ip ?? [])].join(", ")}` : ""}\n`);
      }),
  );
  return ca;
}
