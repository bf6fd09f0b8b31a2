import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { TlsSettings } from "../broker/connect.js";
import { generateSigningKey, signingKeyFromPem, type SigningKey } from "../protocol/signing.js";
import { ensureCA, issueCert, type CA } from "../security/pki.js";
import { tokenEntries, type Role } from "../web/auth.js";
import { LAB_COLLECTIVE, LAB_PROVISIONER_CALLER } from "./names.js";

// The lab's secrets, each made once and kept across restarts of the lab: its CA and the
// certificates it issues (the broker's, the lab's own service users', each muster server's), the
// client-CA bundle the broker trusts, the provisioner's signing key, the registry's bearer token
// and the console's login tokens. Each node's bootstrap credential is issued as it boots (nodes.ts,
// machines/boot.ts).

export interface LabPki {
  ca: CA;
  nats: { cert: string; key: string };
  admin: TlsSettings;
  provisioner: TlsSettings;
  registry: TlsSettings;
}

/**
 * The lab CA, the broker's certificate and the service credentials. `brokerIps`: more addresses the
 * broker is reached on (the machines' relay).
 */
export function labPki(dir: string, brokerIps: string[] = []): LabPki {
  const ca = ensureCA(join(dir, "pki"), "/O=muster/CN=muster lab CA");
  const svc = (name: string) => ({ ca: ca.cert, ...issueCert(ca, { name, subject: `/O=muster/OU=service/CN=${name}`, usage: "client" }) });
  return {
    ca,
    nats: issueCert(ca, { name: "nats", subject: "/O=muster/OU=broker/CN=nats.lab", ips: ["127.0.0.1", ...brokerIps], dns: ["localhost"], usage: "server" }),
    admin: svc("admin"),
    provisioner: svc("provisioner"),
    registry: svc("registry"),
  };
}

/** A muster server's client certificate (OU=node): a lab service's, whose broker user is its identity. */
export function serverTls(pki: LabPki, identity: string): TlsSettings {
  return { ca: pki.ca.cert, ...issueCert(pki.ca, { name: identity, subject: `/O=muster/OU=node/CN=${identity}`, usage: "client" }) };
}

/** The client-CA bundle the broker verifies client certificates with. */
export const clientCaBundle = (dir: string) => join(dir, "pki", "clients-ca.pem");

/**
 * Write the bundle: the lab CA and, once the masters are up, their Puppet CAs (a provisioned node
 * connects with its Puppet certificate). The broker reads it again on reload.
 */
export function writeClientCaBundle(dir: string, caFiles: string[]): string {
  const file = clientCaBundle(dir);
  writeFileSync(file, caFiles.map((f) => readFileSync(f, "utf8").trim()).join("\n") + "\n");
  return file;
}

/** The provisioner's signing key for the lab (created once), and the environment that makes a muster process use it. */
export function provisionerKey(dir: string): { key: SigningKey; env: Record<string, string> } {
  const home = join(dir, "provisioner-home");
  const file = join(home, "keys", `${LAB_PROVISIONER_CALLER}.pem`);
  let key: SigningKey;
  if (existsSync(file)) key = signingKeyFromPem(LAB_PROVISIONER_CALLER, readFileSync(file, "utf8"));
  else {
    mkdirSync(join(home, "keys"), { recursive: true, mode: 0o700 });
    const made = generateSigningKey(LAB_PROVISIONER_CALLER);
    writeFileSync(file, made.pem, { mode: 0o600 });
    chmodSync(file, 0o600);
    key = made.key;
  }
  return { key, env: { MUSTER_CONFIG_DIR: home, MUSTER_CALLER: LAB_PROVISIONER_CALLER } };
}

/** A secret file of the lab's, made once (0600 in a 0700 directory) and kept across restarts of the lab. */
function secretOnce(file: string, make: () => string): string {
  if (!existsSync(file)) {
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    writeFileSync(file, make(), { mode: 0o600 });
  }
  return file;
}

/** The lab registry's bearer token. */
export const registryToken = (dir: string) => secretOnce(join(dir, "registry", "token"), () => `${randomBytes(32).toString("hex")}\n`);

/** The console's tokens: an operator and a viewer. */
export const webTokens = (dir: string) => {
  const token = () => randomBytes(24).toString("hex");
  return secretOnce(join(dir, "web", "tokens"), () => `# muster web tokens: <token> <role> <name>\n${token()} operator lab-operator\n${token()} viewer lab-viewer\n`);
};

/** The token of the first line with this role in a tokens file (what `lab up` tells the operator to paste). */
export function labWebToken(tokensFile: string, role: Role): string | undefined {
  try {
    return tokenEntries(readFileSync(tokensFile, "utf8"), tokensFile).find((e) => e.role === role)?.token;
  } catch {
    return undefined; // no file (or not a tokens file): no token to show
  }
}

/**
 * The lab's own services (its masters' puppetca servers, the notifier) enrolled in the key
 * directory, as docs/deploy.md has an operator enroll a site's: their replies then verify (muster
 * doctor's "replies verified"), and a provisioner that requires it trusts the masters. The lab
 * started them, so it reads each one's node key where its server made it (security/keys.ts).
 */
export async function enrollLabServices(broker: string, tls: TlsSettings, identities: readonly string[]): Promise<string[]> {
  const [{ MusterClient }, { enrollNodeKey }, { defaultCallerName, defaultNodeKeyFile }] = await Promise.all([import("../client/client.js"), import("../fleet/stores.js"), import("../security/keys.js")]);
  const keys = identities.filter((id) => existsSync(defaultNodeKeyFile(id))).map((id) => ({ id, pubkey: signingKeyFromPem(id, readFileSync(defaultNodeKeyFile(id), "utf8")).publicKey }));
  if (!keys.length) return [];
  const client = await MusterClient.connect({ brokers: [broker], collective: LAB_COLLECTIVE, tls, name: "muster-lab-enroll" });
  try {
    for (const k of keys) {
      const plan = await enrollNodeKey(client, { identity: k.id, pubkey: k.pubkey, by: defaultCallerName() });
      if (plan.act === "refuse") throw new Error(`enrolling ${k.id}: ${plan.why}`);
    }
  } finally {
    await client.close();
  }
  return keys.map((k) => k.id);
}
