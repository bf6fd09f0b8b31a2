import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { BrokerAuthSpec } from "../../broker/auth.js";
import { ensureCA, issueCert, type CA } from "../../security/pki.js";
import { createSigningKey } from "../../security/keys.js";
import { siteMachines, type SiteMachine } from "./roles.js";

// What the operator makes on the workstation before any site machine boots (docs/deploy.md#2-credentials):
// the site CA, every daemon's broker credential, the brokers' certificates, the console's HTTPS
// certificate, the provisioners' shared signing key and the console's, and who may connect
// (the broker spec). Made once in <lab>/site/ and kept across restarts of the lab.

export const SITE_ORG = "muster";

/** The broker user of a service credential: a subject no Puppet certificate can carry (OU and O). */
export const serviceUser = (name: string) => `CN=${name},OU=service,O=${SITE_ORG}`;
/** The broker user of a site machine's muster server (a master, the notifier): a node-like user of the site CA. */
export const siteNodeUser = (identity: string) => `CN=${identity},OU=node,O=${SITE_ORG}`;

export interface Credential {
  cert: string;
  key: string;
}

export interface SiteCredentials {
  dir: string;
  ca: CA;
  /** Per broker machine: its certificate (server and client use), names and addresses in it. */
  brokers: Record<string, Credential>;
  /** Per master: its muster server's broker credential. */
  masters: Record<string, Credential>;
  provisioner: Credential;
  registry: Credential;
  /** The console's broker credential (an admin), its notifier's, and its HTTPS certificate. */
  console: Credential;
  notifier: Credential;
  https: Credential;
  /** The operator on this workstation (admin). */
  admin: Credential;
  /** Signing keys (PEM files and their public halves) of the provisioners and the console. */
  keys: { provisioner: { file: string; publicKey: string }; console: { file: string; publicKey: string } };
  /**
   * The node keys of the site's own muster servers (the masters', the notifier's), by identity:
   * made here before the machines boot, so the key directory names them before they answer.
   */
  nodeKeys: Record<string, { file: string; pub: string; publicKey: string }>;
}

/** A signing key made once in `dir` (muster key create NAME --dir DIR) and read back afterwards. */
function keyOnce(dir: string, name: string): { file: string; pub: string; publicKey: string } {
  const file = join(dir, `${name}.pem`);
  const pub = join(dir, `${name}.pub`);
  if (existsSync(file)) return { file, pub, publicKey: readFileSync(pub, "utf8").trim() };
  const made = createSigningKey(name, dir);
  return { file: made.file, pub: made.pub, publicKey: made.key.publicKey };
}

/** Make (or find) every credential of the site in `<dir>`. */
export function siteCredentials(dir: string): SiteCredentials {
  const ca = ensureCA(join(dir, "ca"), "/O=muster/CN=muster site CA");
  // issueCert keeps a certificate that exists: the same name is always the same identity
  const client = (name: string, subject: string) => issueCert(ca, { name, subject, usage: "client" });
  const brokers: Record<string, Credential> = {};
  const masters: Record<string, Credential> = {};
  let console_: SiteMachine | undefined;
  for (const m of siteMachines()) {
    if (m.role === "broker") {
      // members connect to each other with it too; the operator's relay reaches it on hostAlias.
      // nats.js checks a server it reaches by IP address (the relays) under the name "localhost":
      // the workstation's side of the lab needs that name too (the host lab's broker has it).
      brokers[m.identity] = issueCert(ca, { name: m.identity, subject: `/O=${SITE_ORG}/OU=broker/CN=${m.identity}`, dns: [m.identity, "localhost"], ips: [m.address, m.hostAlias], usage: "both" });
    } else if (m.role === "master") masters[m.identity] = client(`${m.identity}-muster`, `/O=${SITE_ORG}/OU=node/CN=${m.identity}`);
    else if (m.role === "console") console_ = m;
  }
  const c = console_!;
  return {
    dir,
    ca,
    brokers,
    masters,
    provisioner: client("provisioner", `/O=${SITE_ORG}/OU=service/CN=provisioner`),
    registry: client("registry", `/O=${SITE_ORG}/OU=service/CN=registry`),
    console: client("console", `/O=${SITE_ORG}/OU=service/CN=console`),
    notifier: client(`${c.identity}-notifier`, `/O=${SITE_ORG}/OU=node/CN=${c.identity}`),
    https: issueCert(ca, { name: `${c.identity}-https`, subject: `/O=${SITE_ORG}/OU=console/CN=${c.identity}`, dns: [c.identity], ips: [c.address, c.hostAlias], usage: "server" }),
    admin: client("admin", `/O=${SITE_ORG}/OU=service/CN=admin`),
    keys: { provisioner: keyOnce(join(dir, "keys"), "provisioner"), console: keyOnce(join(dir, "keys"), "console") },
    nodeKeys: Object.fromEntries(siteMachines().filter((m) => m.role === "master" || m.role === "console").map((m) => [m.identity, keyOnce(join(dir, "keys"), m.identity)])),
  };
}

/**
 * Who connects to the site's brokers (`muster broker users --spec`): the nodes by their Puppet
 * certname and their own bootstrap credentials, the masters' and the notifier's muster servers,
 * the provisioners, the registry, the console and the operator.
 */
export function siteBrokerSpec(nodes: string[], collective: string, provisioningCollective: string): BrokerAuthSpec {
  const masters = siteMachines().filter((m) => m.role === "master");
  const consoleMachine = siteMachines().find((m) => m.role === "console")!;
  return {
    collectives: [collective],
    provisioning_collective: provisioningCollective,
    nodes: [
      ...nodes.map((identity) => ({ identity })),
      ...masters.map((m) => ({ identity: m.identity, users: [siteNodeUser(m.identity)] })),
      { identity: consoleMachine.identity, users: [siteNodeUser(consoleMachine.identity)], notifier: true },
    ],
    bootstrap: nodes.map((identity) => ({ identity })),
    provisioners: [serviceUser("provisioner")],
    admins: [serviceUser("admin"), serviceUser("console")],
    registries: [serviceUser("registry")],
  };
}
