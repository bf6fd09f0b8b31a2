import { createPrivateKey, X509Certificate } from "node:crypto";
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { stringify as toYaml } from "yaml";
import { MusterError } from "../errors.js";
import { configDir, loadOrCreateSigningKey, signingKeyFile } from "../security/keys.js";

// What `muster client setup` does: the operator's client config and credential in their muster
// config dir, and their signing key. Every file it is given is checked before anything is written.

export interface ClientSetup {
  broker: string[];
  ca: string;
  cert?: string;
  key?: string;
  collective: string;
  force?: boolean;
}

function pem(file: string, what: string): string {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    throw new MusterError("MUSTER_USAGE", `${what} ${file}: ${(e as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : (e as Error).message}`);
  }
  return text;
}

function certificate(file: string, what: string): X509Certificate {
  try {
    return new X509Certificate(pem(file, what));
  } catch (e) {
    if (e instanceof MusterError) throw e;
    throw new MusterError("MUSTER_USAGE", `${what} ${file} is not a PEM certificate: ${(e as Error).message}`);
  }
}

/** Writes the client config, copies the credential and makes the signing key; returns what it did, line by line. */
export function setupClient(o: ClientSetup): string[] {
  for (const b of o.broker) if (!/^(tls|nats):\/\/[^\s/]+:\d+$/.test(b)) throw new MusterError("MUSTER_USAGE", `--broker takes tls://HOST:PORT, got ${JSON.stringify(b)}`);
  const ca = certificate(o.ca, "--ca");
  let subject: string | undefined;
  if (o.cert && o.key) {
    const cert = certificate(o.cert, "--cert");
    let key;
    try {
      key = createPrivateKey(pem(o.key, "--key"));
    } catch (e) {
      if (e instanceof MusterError) throw e;
      throw new MusterError("MUSTER_USAGE", `--key ${o.key} is not a PEM private key: ${(e as Error).message}`);
    }
    if (!cert.checkPrivateKey(key)) throw new MusterError("MUSTER_USAGE", `--key ${o.key} is not the key of --cert ${o.cert}`);
    if (!cert.checkIssued(ca) || !cert.verify(ca.publicKey)) throw new MusterError("MUSTER_USAGE", `--cert ${o.cert} was not signed by --ca ${o.ca}: the brokers map a client certificate to a user only when their CA signed it`);
    // as nats-server's verify_and_map names it (RFC 2253: most specific first)
    subject = cert.subject.split("\n").reverse().join(",");
  }
  const dir = configDir();
  const file = join(dir, "client.yaml");
  if (existsSync(file) && !o.force) throw new MusterError("MUSTER_USAGE", `${file} exists already: --force replaces it`);
  const tls = join(dir, "tls");
  mkdirSync(tls, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  const files = { ca: join(tls, "ca.pem"), ...(o.cert && o.key ? { cert: join(tls, "client.pem"), key: join(tls, "client.key") } : {}) };
  copyFileSync(resolve(o.ca), files.ca);
  if (o.cert && o.key && files.cert && files.key) {
    copyFileSync(resolve(o.cert), files.cert);
    writeFileSync(files.key, readFileSync(o.key), { mode: 0o600 });
    chmodSync(files.key, 0o600);
  }
  writeFileSync(file, toYaml({ brokers: o.broker, collective: o.collective, tls: files }), { mode: 0o600 });
  const had = existsSync(signingKeyFile());
  const key = loadOrCreateSigningKey();
  const shadow = process.env.MUSTER_CONFIG ? ` (MUSTER_CONFIG=${process.env.MUSTER_CONFIG} is set: commands read that one instead)` : existsSync(resolve(".muster", "client.yaml")) ? " (./.muster/client.yaml, a lab's, comes first in this directory)" : "";
  return [
    `wrote ${file}${shadow}: brokers ${o.broker.join(", ")}, collective ${o.collective}`,
    subject ? `  broker credential ${subject} (${files.cert}), CA ${files.ca}` : `  CA ${files.ca}; no client certificate (a broker that maps certificates to users will refuse you)`,
    `signing key: caller ${key.name}, ${signingKeyFile(key.name)}${had ? " (yours already)" : " (made now)"}`,
    `machines obey you once their user-data says: --trusted-key "${key.name}=${key.publicKey}"   (muster key show prints it)`,
    "next: muster doctor",
  ];
}
