import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { MusterError, RpcError } from "../../errors.js";
import { Status } from "../../protocol/status.js";
import { CertificateAuthority, readIniSection, SignRefusedError, type CertInfo } from "../../puppet/index.js";

// Settings of the puppetca agent (`plugins.puppetca`, passed as ctx.config). Every key optional:
//
//   confdir   "/etc/puppet"             the master's Puppet confdir; its puppet.conf ([main], then
//                                       [server]) supplies certname, ssldir, server and serverport
//   url       https://<server>:<port>   the CA's base URL (server defaults to certname, port to 8140)
//   servername                          the name the CA's certificate must carry when url reaches it
//                                       by another (https://127.0.0.1:8140 on the master itself)
//   ssldir    from puppet.conf, else "/var/lib/puppet/ssl"
//   certname  from puppet.conf, else ctx.identity: the client certificate used for the CA API
//             (the master's own; it carries pp_cli_auth, which auth.conf requires)
//   cacert, cert, key   explicit PEM paths, overriding the ssldir-derived ones
//   timeout   30        seconds per CA request

export function caFor(config: Record<string, unknown>, identity: string): CertificateAuthority {
  const get = (k: string): string | undefined => {
    const v = config[k];
    if (v === undefined || v === null || v === "") return undefined;
    if (typeof v !== "string" && typeof v !== "number") throw new RpcError(Status.UnknownError, `plugins.puppetca.${k} must be a string`);
    return String(v);
  };
  const confdir = get("confdir") ?? "/etc/puppet";
  const confPath = join(confdir, "puppet.conf");
  let conf: Record<string, string> = {};
  if (existsSync(confPath)) {
    const text = readFileSync(confPath, "utf8");
    conf = { ...readIniSection(text, "main"), ...readIniSection(text, "server"), ...readIniSection(text, "master") };
  }
  const certname = get("certname") ?? conf.certname ?? identity;
  const ssldir = get("ssldir") ?? conf.ssldir ?? "/var/lib/puppet/ssl";
  const url = get("url") ?? `https://${conf.server ?? certname}:${conf.serverport ?? conf.masterport ?? "8140"}`;
  const timeout = Number(get("timeout") ?? 30);
  const servername = get("servername");
  return new CertificateAuthority({
    url,
    ...(servername ? { servername } : {}),
    caCertPath: get("cacert") ?? join(ssldir, "certs", "ca.pem"),
    certPath: get("cert") ?? join(ssldir, "certs", `${certname}.pem`),
    keyPath: get("key") ?? join(ssldir, "private_keys", `${certname}.pem`),
    timeoutMs: Number.isFinite(timeout) && timeout > 0 ? timeout * 1000 : 30_000,
  });
}

export function certReply(name: string, c: CertInfo | undefined): Record<string, unknown> {
  return {
    certname: name,
    state: c?.state ?? "unknown",
    fingerprint: c?.fingerprint || null,
    dns_alt_names: c?.dnsAltNames ?? [],
    subject_alt_names: c?.subjectAltNames ?? [],
    extensions: c?.extensions ?? {},
    not_after: c?.notAfter ?? null,
  };
}

/** CA failures become Aborted replies; refusals carry the reason. */
export function caRpcError(e: unknown): RpcError {
  if (e instanceof RpcError) return e;
  if (e instanceof SignRefusedError) return new RpcError(Status.Aborted, e.message, { certname: e.certname, reason: e.reason });
  if (e instanceof MusterError) return new RpcError(Status.Aborted, e.message, { code: e.code });
  return new RpcError(Status.UnknownError, e instanceof Error ? e.message : String(e));
}

export interface PuppetcaDeps {
  /** `plugins.puppetca` settings; ctx.config overlays them per request. */
  config?: Record<string, unknown>;
}
