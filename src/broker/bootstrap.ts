import { chmodSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { signClientCertificate, type CertFiles } from "../security/pki.js";
import { BOOTSTRAP_ORG, bootstrapUser } from "./auth.js";

// One bootstrap credential per node (docs/security.md#bootstrap-credentials): the certificate a
// node not yet provisioned connects with. Its subject names the node, so the broker user it maps to
// (auth.ts bootstrapUser) reaches that node's provisioning subject and no other. Called by
// `muster broker bootstrap-credential`, the lab for each node it boots, and cloud tooling that
// writes one into each instance's user data.

import { BOOTSTRAP_DAYS } from "./bootstrap-defaults.js";

export { BOOTSTRAP_DAYS };

export interface BootstrapCredential {
  identity: string;
  /** The broker user it maps to (list it in the broker spec as `bootstrap: [{identity}]`). */
  user: string;
  /** PEM: the client certificate, its private key, and the CA that verifies the broker. */
  cert: string;
  key: string;
  ca: string;
}

export interface BootstrapOptions {
  /** O= of the subject; the broker spec's `bootstrap_org` (default "muster"). */
  org?: string;
  /** Which issue of this node's credential (default 1); a rotation issues the next. */
  generation?: number;
  days?: number;
}

/**
 * Issue node `identity`'s bootstrap credential, signed by the CA in `ca` (files, only read). Pure
 * apart from openssl: nothing is written; the caller puts the PEM where the node will find it.
 */
export function issueBootstrapCredential(ca: CertFiles, identity: string, o: BootstrapOptions = {}): BootstrapCredential {
  const { user, subject } = bootstrapUser(identity, o.org ?? BOOTSTRAP_ORG, o.generation ?? 1);
  const signed = signClientCertificate(ca, subject, { days: o.days ?? BOOTSTRAP_DAYS });
  return { identity, user, ...signed, ca: readFileSync(ca.cert, "utf8") };
}

/** Write a credential as <dir>/bootstrap.pem, bootstrap.key (0600) and ca.pem: the files `provisioning: {cert, key}` names. */
export function writeBootstrapCredential(c: BootstrapCredential, dir: string): { cert: string; key: string; ca: string } {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const out = { cert: join(dir, "bootstrap.pem"), key: join(dir, "bootstrap.key"), ca: join(dir, "ca.pem") };
  writeFileSync(out.key, c.key, { mode: 0o600 });
  chmodSync(out.key, 0o600); // an existing file keeps its mode otherwise
  writeFileSync(out.cert, c.cert);
  writeFileSync(out.ca, c.ca);
  return out;
}
