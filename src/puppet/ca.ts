import { readFileSync } from "node:fs";
import { request } from "node:https";
import { join } from "node:path";
import { MusterError } from "../errors.js";
import { certMatchesCsr, extensionString, normaliseFingerprint, parseCsr, PP_AUTH_ARC, PP_CLI_AUTH_OID, type ParsedCsr } from "./csr.js";
import { NODE_KEY_CSR_OID } from "../protocol/node-keys.js";

// A client for one puppetserver's CA, over its HTTP API (/puppet-ca/v1). It authenticates with
// a certificate that auth.conf admits to certificate_status (the master's own certificate
// carries pp_cli_auth). Why the API and not `puppetserver ca`: docs/decisions/puppet-ca.md.
//
// sign() signs only what the node itself asked for: the pending CSR's SHA-256 fingerprint must
// equal the one the node reported, its CN must be the certname, and it may ask for no
// authorization extension and no alternative name other than DNS names. We read the CSR
// ourselves (raw PEM, parsed here) rather than trusting the CA's summary of it, and after
// signing we check the issued certificate carries the CSR's key (else revoke and clean).

export interface CertificateAuthoritySettings {
  /** https://host:port of the puppetserver running the CA. */
  url: string;
  /** The name its certificate must carry, when the URL reaches it by another (https://127.0.0.1:8140 on the master itself). */
  servername?: string;
  /** CA certificate (PEM file) to verify the server. */
  caCertPath: string;
  /** Client certificate and key allowed to use certificate_status. */
  certPath: string;
  keyPath: string;
  /** Per-request timeout; default 30 s. */
  timeoutMs?: number;
}

export type CertState = "requested" | "signed" | "revoked";

export interface CertInfo {
  name: string;
  state: CertState;
  /** SHA-256, `AA:BB:...` */
  fingerprint: string;
  dnsAltNames: string[];
  subjectAltNames: string[];
  /** Authorization extensions the CSR/cert carries (pp_cli_auth, pp_authorization, ...). */
  extensions: Record<string, string>;
  notBefore?: string;
  notAfter?: string;
  serialNumber?: number;
}

export interface CertList {
  requests: CertInfo[];
  signed: CertInfo[];
  revoked: CertInfo[];
}

export type SignRefusal =
  | "no_request"
  | "already_signed"
  | "revoked"
  | "fingerprint_mismatch"
  | "name_mismatch"
  | "authorization_extension"
  | "alt_name"
  | "key_mismatch"
  | "node_key_mismatch"
  | "ca_rejected";

/** The CA refused (or we refused) to sign; `reason` says which check failed. */
export class SignRefusedError extends MusterError {
  readonly reason: SignRefusal;
  readonly certname: string;
  constructor(reason: SignRefusal, certname: string, message: string) {
    super("MUSTER_CA_ERROR", message);
    this.name = "SignRefusedError";
    this.reason = reason;
    this.certname = certname;
  }
}

/** Settings from a master's ssldir: its CA cert and its own (pp_cli_auth) cert and key. */
export function caSettingsFromSsldir(url: string, ssldir: string, certname: string): CertificateAuthoritySettings {
  return {
    url,
    caCertPath: join(ssldir, "certs", "ca.pem"),
    certPath: join(ssldir, "certs", `${certname}.pem`),
    keyPath: join(ssldir, "private_keys", `${certname}.pem`),
  };
}

export class CertificateAuthority {
  private readonly base: URL;
  constructor(readonly settings: CertificateAuthoritySettings) {
    this.base = new URL(settings.url);
    if (this.base.protocol !== "https:") throw new MusterError("MUSTER_CA_ERROR", `CA url must be https: ${settings.url}`);
  }

  async list(): Promise<CertList> {
    const r = await this.call("GET", "/puppet-ca/v1/certificate_statuses/any_key");
    if (r.status !== 200) throw this.httpError("list certificates", r);
    const all = parseJson(r.body, "certificate_statuses");
    if (!Array.isArray(all)) throw new MusterError("MUSTER_CA_ERROR", "the CA returned a non-list for certificate_statuses");
    const out: CertList = { requests: [], signed: [], revoked: [] };
    for (const raw of all) {
      const c = toCertInfo(raw);
      if (c.state === "requested") out.requests.push(c);
      else if (c.state === "signed") out.signed.push(c);
      else out.revoked.push(c);
    }
    for (const l of [out.requests, out.signed, out.revoked]) l.sort((a, b) => a.name.localeCompare(b.name));
    return out;
  }

  /** The named certificate or request, or undefined when the CA knows nothing of it. */
  async status(certname: string): Promise<CertInfo | undefined> {
    checkName(certname);
    const r = await this.call("GET", `/puppet-ca/v1/certificate_status/${certname}`);
    if (r.status === 404) return undefined;
    if (r.status !== 200) throw this.httpError(`get the status of ${certname}`, r);
    return toCertInfo(parseJson(r.body, "certificate_status"));
  }

  /** The pending CSR's PEM, or undefined. */
  async csrPem(certname: string): Promise<string | undefined> {
    checkName(certname);
    const r = await this.call("GET", `/puppet-ca/v1/certificate_request/${certname}`);
    if (r.status === 404) return undefined;
    if (r.status !== 200) throw this.httpError(`fetch the CSR of ${certname}`, r);
    return r.body;
  }

  /** The signed certificate's PEM, or undefined. */
  async certPem(certname: string): Promise<string | undefined> {
    checkName(certname);
    const r = await this.call("GET", `/puppet-ca/v1/certificate/${certname}`);
    if (r.status === 404) return undefined;
    if (r.status !== 200) throw this.httpError(`fetch the certificate of ${certname}`, r);
    return r.body;
  }

  /**
   * Check the pending CSR against what the node reported, without signing. Throws
   * SignRefusedError naming the failed check; returns the parsed CSR when all pass.
   */
  async vet(certname: string, expectedFingerprint: string, nodeKey?: string): Promise<ParsedCsr> {
    checkName(certname);
    const st = await this.status(certname);
    if (!st) throw new SignRefusedError("no_request", certname, `no certificate request is pending for ${certname}`);
    if (st.state === "signed") throw new SignRefusedError("already_signed", certname, `${certname} already has a signed certificate (${st.fingerprint}); clean it first to re-issue`);
    if (st.state === "revoked") throw new SignRefusedError("revoked", certname, `${certname} has a revoked certificate; clean it first`);
    const pem = await this.csrPem(certname);
    if (!pem) throw new SignRefusedError("no_request", certname, `no certificate request is pending for ${certname}`);
    let csr: ParsedCsr;
    try {
      csr = parseCsr(pem);
    } catch (e) {
      throw new SignRefusedError("ca_rejected", certname, `the pending CSR for ${certname} cannot be parsed: ${(e as Error).message}`);
    }
    const expected = normaliseFingerprint(expectedFingerprint);
    if (csr.fingerprint !== expected) {
      throw new SignRefusedError(
        "fingerprint_mismatch",
        certname,
        `the pending CSR for ${certname} has fingerprint ${csr.fingerprint}, but the node reported ${expected}: not signing a request the node did not make`,
      );
    }
    if (st.fingerprint && normaliseFingerprint(st.fingerprint) !== csr.fingerprint) {
      throw new SignRefusedError("fingerprint_mismatch", certname, `the CA reports fingerprint ${st.fingerprint} for ${certname} but serves a CSR with ${csr.fingerprint}`);
    }
    if (csr.commonName !== certname) {
      throw new SignRefusedError("name_mismatch", certname, `the pending CSR for ${certname} names ${JSON.stringify(csr.commonName)} in its subject`);
    }
    const auth = csr.extensions.filter((e) => e.oid.startsWith(PP_AUTH_ARC));
    if (auth.length || Object.keys(st.extensions).length) {
      const names = [...auth.map((e) => (e.oid === PP_CLI_AUTH_OID ? "pp_cli_auth" : e.oid)), ...Object.keys(st.extensions)];
      throw new SignRefusedError(
        "authorization_extension",
        certname,
        `the CSR for ${certname} requests authorization extension(s) ${[...new Set(names)].join(", ")}, which would grant CA or other privileges: refusing to sign`,
      );
    }
    if (nodeKey !== undefined) {
      // The certificate goes to the holder of the key the provisioner pinned, or to no one.
      const ext = csr.extensions.find((e) => e.oid === NODE_KEY_CSR_OID);
      const inCsr = ext && extensionString(ext);
      if (inCsr !== nodeKey) {
        throw new SignRefusedError(
          "node_key_mismatch",
          certname,
          inCsr === undefined
            ? `the CSR for ${certname} does not name the node's key (extension ${NODE_KEY_CSR_OID}), but ${nodeKey} is pinned for it: refusing to sign`
            : `the CSR for ${certname} names node key ${inCsr}, but ${nodeKey} is pinned for it: refusing to sign`,
        );
      }
    }
    const nonDns = csr.altNames.filter((a) => a.type !== "DNS");
    if (nonDns.length) {
      throw new SignRefusedError("alt_name", certname, `the CSR for ${certname} requests non-DNS alternative names (${nonDns.map((a) => `${a.type}:${a.value}`).join(", ")}): refusing to sign`);
    }
    return csr;
  }

  /** Sign the pending CSR of `certname` if it passes vet(). Returns the issued certificate's info. */
  async sign(certname: string, expectedFingerprint: string, nodeKey?: string): Promise<CertInfo> {
    const csr = await this.vet(certname, expectedFingerprint, nodeKey);
    const r = await this.call("PUT", `/puppet-ca/v1/certificate_status/${certname}`, JSON.stringify({ desired_state: "signed" }));
    if (r.status === 404) throw new SignRefusedError("no_request", certname, `the CSR for ${certname} disappeared before it was signed`);
    if (r.status === 409 || r.status === 400) throw new SignRefusedError("ca_rejected", certname, `the CA refused to sign ${certname}: ${r.body.trim()}`);
    if (r.status < 200 || r.status > 299) throw this.httpError(`sign ${certname}`, r);
    // The CSR could in principle have been replaced between vet() and the PUT: the issued
    // certificate must carry the key we vetted.
    const certPem = await this.certPem(certname);
    if (!certPem || !certMatchesCsr(certPem, csr)) {
      await this.clean(certname).catch(() => undefined);
      throw new SignRefusedError("key_mismatch", certname, `the certificate issued to ${certname} does not carry the vetted CSR's key; it was revoked and cleaned`);
    }
    const st = await this.status(certname);
    if (!st) throw new MusterError("MUSTER_CA_ERROR", `${certname} was signed but the CA no longer reports it`);
    return st;
  }

  /**
   * Revoke the signed certificate of `certname` (its serial goes on the CA's CRL; the CA keeps
   * listing it as revoked). Idempotent: an unknown name, an already revoked certificate or a mere
   * pending request is reported with revoked=false, not as an error.
   */
  async revoke(certname: string): Promise<{ certname: string; revoked: boolean; previousState?: CertState; serial?: number }> {
    const st = await this.status(certname);
    if (!st || st.state !== "signed") return { certname, revoked: false, previousState: st?.state, serial: st?.serialNumber };
    const r = await this.call("PUT", `/puppet-ca/v1/certificate_status/${certname}`, JSON.stringify({ desired_state: "revoked" }));
    if (r.status === 404) return { certname, revoked: false }; // cleaned by someone else meanwhile
    if (r.status < 200 || r.status > 299) throw this.httpError(`revoke ${certname}`, r);
    return { certname, revoked: true, previousState: st.state, serial: st.serialNumber };
  }

  /**
   * Revoke and delete everything the CA holds for `certname` (a signed certificate, a pending
   * request). Cleaning a name the CA does not know is not an error. `revoked` says whether a
   * signed certificate was revoked here (its serial is on the CRL from now on).
   */
  async clean(certname: string): Promise<{ certname: string; cleaned: boolean; revoked: boolean; previousState?: CertState }> {
    const st = await this.status(certname);
    if (!st) return { certname, cleaned: false, revoked: false };
    if (st.state === "signed") {
      const r = await this.call("PUT", "/puppet-ca/v1/clean", JSON.stringify({ certnames: [certname] }));
      if (r.status < 200 || r.status > 299) throw this.httpError(`clean ${certname}`, r);
    }
    // Pending requests and revoked leftovers: certificate_status DELETE removes them.
    if (await this.status(certname)) {
      const r = await this.call("DELETE", `/puppet-ca/v1/certificate_status/${certname}`);
      if (r.status !== 204 && r.status !== 200 && r.status !== 404) throw this.httpError(`delete ${certname}`, r);
    }
    return { certname, cleaned: true, revoked: st.state === "signed", previousState: st.state };
  }

  private httpError(what: string, r: { status: number; body: string }): MusterError {
    const hint = r.status === 403 ? " (the client certificate is not allowed by the master's auth.conf: it needs pp_cli_auth, as the master's own certificate has)" : "";
    return new MusterError("MUSTER_CA_ERROR", `cannot ${what}: the CA answered HTTP ${r.status}${hint}: ${r.body.trim().slice(0, 500)}`);
  }

  private call(method: string, path: string, body?: string): Promise<{ status: number; body: string }> {
    let tls: { ca: Buffer; cert: Buffer; key: Buffer };
    try {
      tls = { ca: readFileSync(this.settings.caCertPath), cert: readFileSync(this.settings.certPath), key: readFileSync(this.settings.keyPath) };
    } catch (e) {
      throw new MusterError("MUSTER_CA_ERROR", `cannot read the CA client credentials: ${(e as Error).message}`, { cause: e });
    }
    return new Promise((resolve, reject) => {
      const req = request(
        {
          host: this.base.hostname,
          port: this.base.port || 8140,
          // the certificate is checked against this name rather than the URL's host, and the request
          // names it too: puppetserver (Jetty) refuses a Host header that does not match the SNI
          ...(this.settings.servername ? { servername: this.settings.servername } : {}),
          path,
          method,
          ...tls,
          agent: false,
          timeout: this.settings.timeoutMs ?? 30_000,
          headers: { Accept: "application/json", ...(this.settings.servername ? { Host: `${this.settings.servername}:${this.base.port || 8140}` } : {}), ...(body !== undefined ? { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) } : {}) },
        },
        (res) => {
          let text = "";
          res.setEncoding("utf8");
          res.on("data", (c: string) => {
            text += c;
            if (text.length > 16 * 1024 * 1024) req.destroy(new Error("response too large"));
          });
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }));
          res.on("error", reject);
        },
      );
      req.on("timeout", () => req.destroy(new Error(`no answer in ${this.settings.timeoutMs ?? 30_000} ms`)));
      req.on("error", (e) => reject(new MusterError("MUSTER_CA_ERROR", `cannot reach the CA at ${this.settings.url}: ${e.message}`, { cause: e })));
      req.end(body);
    });
  }
}

function checkName(certname: string): void {
  if (!/^[a-z0-9._-]+$/i.test(certname) || certname.startsWith(".")) throw new MusterError("MUSTER_CA_ERROR", `invalid certname ${JSON.stringify(certname)}`);
}

function parseJson(text: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new MusterError("MUSTER_CA_ERROR", `the CA returned invalid JSON for ${what}: ${text.slice(0, 200)}`);
  }
}

function toCertInfo(raw: unknown): CertInfo {
  const o = (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
  const fps = (typeof o.fingerprints === "object" && o.fingerprints !== null ? o.fingerprints : {}) as Record<string, unknown>;
  const strings = (v: unknown) => (Array.isArray(v) ? v.map(String) : []);
  const ext: Record<string, string> = {};
  if (typeof o.authorization_extensions === "object" && o.authorization_extensions !== null) {
    for (const [k, v] of Object.entries(o.authorization_extensions)) ext[k] = String(v);
  }
  const state = String(o.state);
  const info: CertInfo = {
    name: String(o.name ?? ""),
    state: state === "signed" || state === "revoked" ? state : "requested",
    fingerprint: String(fps.SHA256 ?? o.fingerprint ?? ""),
    dnsAltNames: strings(o.dns_alt_names),
    subjectAltNames: strings(o.subject_alt_names),
    extensions: ext,
  };
  if (typeof o.not_before === "string") info.notBefore = o.not_before;
  if (typeof o.not_after === "string") info.notAfter = o.not_after;
  if (typeof o.serial_number === "number") info.serialNumber = o.serial_number;
  return info;
}
