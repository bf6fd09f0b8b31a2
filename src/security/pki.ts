import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { MusterError } from "../errors.js";

// A small certificate authority for the broker's TLS: the lab's and the tests' CA, the
// nats-server certificate and the service credentials (provisioner, admin, bootstrap). It drives
// the openssl CLI: Node can parse X.509 but not issue it, and openssl is what operators would use.
// Keys are ECDSA P-256: quick to make, and every TLS stack here speaks it.

export interface CertFiles {
  cert: string;
  key: string;
}

export interface CA extends CertFiles {
  dir: string;
}

export interface IssueOptions {
  /** File stem: <name>.pem and <name>.key, in the CA's directory unless `dir` says where. */
  name: string;
  /** Where the certificate and key go (default: the CA's directory). */
  dir?: string;
  /** Subject in openssl's form, e.g. "/O=muster/OU=service/CN=provisioner". */
  subject: string;
  dns?: string[];
  ips?: string[];
  /** serverAuth, clientAuth or both (default both). */
  usage?: "server" | "client" | "both";
  days?: number;
}

function openssl(args: string[], cwd: string): void {
  try {
    execFileSync("openssl", args, { cwd, stdio: ["ignore", "ignore", "pipe"] });
  } catch (e) {
    const err = e as NodeJS.ErrnoException & { stderr?: Buffer };
    if (err.code === "ENOENT") throw new MusterError("MUSTER_PKI_FAILED", "openssl is not installed (apt-get install openssl)");
    throw new MusterError("MUSTER_PKI_FAILED", `openssl ${args[0]} failed: ${err.stderr?.toString().trim() ?? err.message}`);
  }
}

/** The CA in `dir` (ca.pem, ca.key), created on first use. Safe to call again: an existing CA is kept. */
export function ensureCA(dir: string, subject = "/O=muster/CN=muster CA", days = 3650): CA {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const ca = { dir, cert: join(dir, "ca.pem"), key: join(dir, "ca.key") };
  if (existsSync(ca.cert) && existsSync(ca.key)) return ca;
  openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key"], dir);
  chmodSync(ca.key, 0o600); // openssl writes keys with the umask's mode
  openssl(["req", "-x509", "-new", "-key", "ca.key", "-sha256", "-days", String(days), "-subj", subject, "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", "ca.pem"], dir);
  return ca;
}

/** A certificate signed by `ca`, kept if it exists already (the same name always means the same identity). */
export function issueCert(ca: CA, o: IssueOptions): CertFiles {
  if (!/^[A-Za-z0-9_.-]+$/.test(o.name)) throw new MusterError("MUSTER_USAGE", `certificate file name ${JSON.stringify(o.name)}: letters, digits, . _ - only`);
  const dir = resolve(o.dir ?? ca.dir);
  const out = { cert: join(dir, `${o.name}.pem`), key: join(dir, `${o.name}.key`) };
  if (existsSync(out.cert) && existsSync(out.key)) return out;
  const usage = o.usage ?? "both";
  const eku = usage === "server" ? "serverAuth" : usage === "client" ? "clientAuth" : "serverAuth,clientAuth";
  const san = [...(o.dns ?? []).map((d) => `DNS:${d}`), ...(o.ips ?? []).map((i) => `IP:${i}`)];
  const ext = [
    "basicConstraints=critical,CA:FALSE",
    "keyUsage=critical,digitalSignature,keyEncipherment",
    `extendedKeyUsage=${eku}`,
    "subjectKeyIdentifier=hash",
    "authorityKeyIdentifier=keyid",
    ...(san.length ? [`subjectAltName=${san.join(",")}`] : []),
  ].join("\n");
  const extFile = join(dir, `${o.name}.ext`);
  const csr = join(dir, `${o.name}.csr`);
  mkdirSync(dir, { recursive: true });
  writeFileSync(extFile, `${ext}\n`);
  try {
    openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", out.key], ca.dir);
    chmodSync(out.key, 0o600);
    openssl(["req", "-new", "-key", out.key, "-subj", o.subject, "-out", csr], ca.dir);
    openssl(["x509", "-req", "-in", csr, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", String(o.days ?? 825), "-sha256", "-extfile", extFile, "-out", out.cert], ca.dir);
  } finally {
    rmSync(extFile, { force: true });
    rmSync(csr, { force: true });
  }
  return out;
}

/**
 * A client certificate signed by the CA in `ca` (its files are only read), returned as PEM text
 * rather than left in the CA's directory: for credentials handed to someone else, e.g. embedded in
 * an instance's cloud-init. A random serial, so nothing is written next to the CA.
 */
export function signClientCertificate(ca: CertFiles, subject: string, o: { days?: number } = {}): { cert: string; key: string } {
  for (const [what, f] of [["CA certificate", ca.cert], ["CA key", ca.key]] as const) {
    if (!existsSync(f)) throw new MusterError("MUSTER_PKI_FAILED", `${what} ${f} does not exist`);
  }
  const work = mkdtempSync(join(tmpdir(), "muster-pki-"));
  try {
    writeFileSync(join(work, "ext"), "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n");
    openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "c.key"], work);
    openssl(["req", "-new", "-key", "c.key", "-subj", subject, "-out", "c.csr"], work);
    const serial = `0x${randomBytes(16).toString("hex")}`;
    openssl(["x509", "-req", "-in", "c.csr", "-CA", resolve(ca.cert), "-CAkey", resolve(ca.key), "-set_serial", serial, "-days", String(o.days ?? 825), "-sha256", "-extfile", "ext", "-out", "c.pem"], work);
    return { cert: readFileSync(join(work, "c.pem"), "utf8"), key: readFileSync(join(work, "c.key"), "utf8") };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
