import { createHash, createPublicKey, X509Certificate } from "node:crypto";
import { isIP } from "node:net";

// Just enough DER (X.690) to read a PKCS#10 certificate request: subject CN, public key, and
// the requested extensions (subjectAltName, Puppet's authorization extensions). We parse the
// CSR ourselves rather than trusting what the CA says about it.

/** Puppet's reserved authorization extension; a CSR asking for it must never be signed. */
export const PP_CLI_AUTH_OID = "1.3.6.1.4.1.34380.1.3.39";
/** Puppet's authorization extension arc (pp_authorization, pp_auth_role, pp_cli_auth, ...). */
export const PP_AUTH_ARC = "1.3.6.1.4.1.34380.1.3.";
const OID_SUBJECT_ALT_NAME = "2.5.29.17";
const OID_EXTENSION_REQUEST = "1.2.840.113549.1.9.14";
const OID_COMMON_NAME = "2.5.4.3";

export interface AltName {
  /** "DNS", "IP", "email", "URI", "dirName", "otherName", "registeredID" or "x400"/"ediParty". */
  type: string;
  value: string;
}

export interface CsrExtension {
  oid: string;
  critical: boolean;
  /** The extnValue OCTET STRING content (DER of the extension's own value). */
  value: Buffer;
}

export interface ParsedCsr {
  commonName: string | undefined;
  /** SubjectPublicKeyInfo DER, to compare with an issued certificate's key. */
  publicKeyDer: Buffer;
  extensions: CsrExtension[];
  altNames: AltName[];
  /** SHA-256 of the CSR's DER, upper-case hex pairs joined by ':' (Puppet's format). */
  fingerprint: string;
}

/** Puppet-style fingerprint: `AA:BB:...` over the given bytes. */
export function fingerprintOf(der: Buffer, algorithm: "sha256" | "sha1" | "sha512" = "sha256"): string {
  return createHash(algorithm).update(der).digest("hex").toUpperCase().match(/../g)!.join(":");
}

/** Normalise a fingerprint as users write it (any case, with or without ':', optional "SHA256" prefix). */
export function normaliseFingerprint(fp: string): string {
  const hex = fp.trim().replace(/^\(?sha-?256\)?\s*:?\s*/i, "").replace(/[:\s]/g, "").toUpperCase();
  if (!/^[0-9A-F]{64}$/.test(hex)) return fp.trim().toUpperCase();
  return hex.match(/../g)!.join(":");
}

/**
 * The string value of a CSR extension as Puppet writes extension_requests (a DER UTF8String, or
 * another string type); undefined when the bytes are not a single DER string.
 */
export function extensionString(ext: CsrExtension): string | undefined {
  try {
    const t = readOne(ext.value, 0);
    if (![0x0c, 0x13, 0x16].includes(t.tag) || t.end !== ext.value.length) return undefined;
    return t.content.toString("utf8");
  } catch {
    return undefined;
  }
}

/** DER bytes of the first PEM block with the given label. */
export function pemToDer(pem: string, label: string): Buffer {
  const re = new RegExp(`-----BEGIN ${label}-----([\\s\\S]+?)-----END ${label}-----`);
  const m = re.exec(pem);
  if (!m?.[1]) throw new Error(`no ${label} PEM block found`);
  return Buffer.from(m[1].replace(/\s+/g, ""), "base64");
}

export function csrFingerprint(pem: string): string {
  return fingerprintOf(pemToDer(pem, "CERTIFICATE REQUEST"));
}

export function parseCsr(pem: string): ParsedCsr {
  const der = pemToDer(pem, "CERTIFICATE REQUEST");
  const csr = readOne(der, 0);
  expectTag(csr, 0x30, "CertificationRequest");
  const [info] = children(csr);
  if (!info) throw new Error("CSR has no CertificationRequestInfo");
  expectTag(info, 0x30, "CertificationRequestInfo");
  const [version, subject, spki, attrs] = children(info);
  if (!version || !subject || !spki) throw new Error("CSR info is truncated");
  expectTag(subject, 0x30, "subject");
  expectTag(spki, 0x30, "subjectPublicKeyInfo");

  let commonName: string | undefined;
  for (const rdn of children(subject)) {
    for (const atv of children(rdn)) {
      const [oid, value] = children(atv);
      if (oid && value && decodeOid(oid.content) === OID_COMMON_NAME) commonName = value.content.toString("utf8");
    }
  }

  const extensions: CsrExtension[] = [];
  if (attrs && attrs.tag === 0xa0) {
    for (const attr of children(attrs)) {
      const [oid, values] = children(attr);
      if (!oid || !values || decodeOid(oid.content) !== OID_EXTENSION_REQUEST) continue;
      for (const exts of children(values)) {
        for (const ext of children(exts)) {
          const parts = children(ext);
          const extOid = parts[0];
          if (!extOid) continue;
          const critical = parts.length === 3 && parts[1]?.tag === 0x01 && parts[1].content[0] !== 0;
          const value = parts[parts.length - 1];
          if (!value || value.tag !== 0x04) throw new Error("CSR extension without an OCTET STRING value");
          extensions.push({ oid: decodeOid(extOid.content), critical, value: value.content });
        }
      }
    }
  }

  const altNames: AltName[] = [];
  for (const ext of extensions.filter((e) => e.oid === OID_SUBJECT_ALT_NAME)) {
    for (const gn of children(readOne(ext.value, 0))) altNames.push(generalName(gn));
  }
  return { commonName, publicKeyDer: spki.raw, extensions, altNames, fingerprint: fingerprintOf(der) };
}

/** True when the certificate (PEM) carries the same public key as the CSR. */
export function certMatchesCsr(certPem: string, csr: ParsedCsr): boolean {
  const cert = new X509Certificate(certPem);
  const certKey = cert.publicKey.export({ type: "spki", format: "der" });
  const csrKey = createPublicKey({ key: csr.publicKeyDer, format: "der", type: "spki" }).export({ type: "spki", format: "der" });
  return Buffer.compare(certKey, csrKey) === 0;
}

// ---- DER ----

interface Tlv {
  tag: number;
  content: Buffer;
  /** The whole element, header included. */
  raw: Buffer;
  end: number;
}

function readOne(buf: Buffer, offset: number): Tlv {
  if (offset + 2 > buf.length) throw new Error("DER: truncated header");
  const tag = buf[offset]!;
  if ((tag & 0x1f) === 0x1f) throw new Error("DER: high tag numbers are not supported");
  let len = buf[offset + 1]!;
  let p = offset + 2;
  if (len & 0x80) {
    const n = len & 0x7f;
    if (n === 0 || n > 4 || p + n > buf.length) throw new Error("DER: bad length");
    len = 0;
    for (let i = 0; i < n; i++) len = len * 256 + buf[p + i]!;
    p += n;
  }
  if (p + len > buf.length) throw new Error("DER: element overruns its container");
  return { tag, content: buf.subarray(p, p + len), raw: buf.subarray(offset, p + len), end: p + len };
}

function children(t: Tlv): Tlv[] {
  const out: Tlv[] = [];
  let p = 0;
  while (p < t.content.length) {
    const c = readOne(t.content, p);
    out.push(c);
    p = c.end;
  }
  return out;
}

function expectTag(t: Tlv, tag: number, what: string): void {
  if (t.tag !== tag) throw new Error(`DER: ${what} has tag 0x${t.tag.toString(16)}, expected 0x${tag.toString(16)}`);
}

function decodeOid(b: Buffer): string {
  if (b.length === 0) throw new Error("DER: empty OID");
  const first = b[0]!;
  const parts: number[] = [Math.min(2, Math.floor(first / 40)), first >= 80 ? first - 80 : first % 40];
  let v = 0;
  for (let i = 1; i < b.length; i++) {
    v = v * 128 + (b[i]! & 0x7f);
    if (!(b[i]! & 0x80)) {
      parts.push(v);
      v = 0;
    }
  }
  return parts.join(".");
}

function generalName(gn: Tlv): AltName {
  const n = gn.tag & 0x1f;
  switch (n) {
    case 1:
      return { type: "email", value: gn.content.toString("utf8") };
    case 2:
      return { type: "DNS", value: gn.content.toString("utf8") };
    case 6:
      return { type: "URI", value: gn.content.toString("utf8") };
    case 7:
      return { type: "IP", value: ipString(gn.content) };
    case 0:
      return { type: "otherName", value: gn.content.toString("hex") };
    case 4:
      return { type: "dirName", value: gn.content.toString("hex") };
    case 8:
      return { type: "registeredID", value: decodeOid(gn.content) };
    default:
      return { type: n === 3 ? "x400" : "ediParty", value: gn.content.toString("hex") };
  }
}

function ipString(b: Buffer): string {
  if (b.length === 4) return [...b].join(".");
  if (b.length === 16) {
    const s = (b.toString("hex").match(/..../g) ?? []).join(":");
    return isIP(s) ? s : b.toString("hex");
  }
  return b.toString("hex");
}
