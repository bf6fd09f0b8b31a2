import { TLS_DIR } from "./site.js";

// PuppetDB on a site (docs/deploy.md#10-puppetdb), as text for the machines: what a master adds so
// puppet-terminus-puppetdb sends PuppetDB its facts, catalogs and reports, and the script that
// gives Debian's PuppetDB its TLS port. Pure; the lab renders and runs exactly these, and so does
// an operator following the doc.
//
// Each master has a Puppet CA of its own and trusts only it (its localcacert). So PuppetDB holds one
// certificate per master, each issued by that master's CA for a name of its own
// (puppetdb-<region>.example.net), all in one keystore: Jetty picks the one the master asked for by
// name (SNI), and each master checks it against its own CA. PuppetDB accepts the masters' client
// certificates (their CAs in its truststore), and of those only the names in its allowlist.

/** Where a master's terminus settings live (Debian's confdir). */
export const PUPPETDB_TERMINUS_FILES = { conf: "/etc/puppet/puppetdb.conf", routes: "/etc/puppet/routes.yaml" } as const;

/** Where a master keeps the certificate its CA issued for PuppetDB, for the operator to carry over. */
export const PUPPETDB_CERT_FILES = { cert: `${TLS_DIR}/puppetdb.pem`, key: `${TLS_DIR}/puppetdb.key` } as const;

/**
 * The shell (for `sh -c`, as root, on a master once its CA exists) that issues PuppetDB a server
 * certificate for `name` from the master's CA, offline: a P-256 key, subjectAltName and serverAuth,
 * a random serial (never one of the CA's own), into PUPPETDB_CERT_FILES.
 */
export function puppetDbCertCommand(name: string): string {
  if (!/^[A-Za-z0-9.-]+$/.test(name)) throw new Error(`not a host name: ${JSON.stringify(name)}`);
  return [
    "set -e",
    "umask 077",
    "ca=$(puppet config print cadir --section server)",
    "d=$(mktemp -d)",
    `printf 'basicConstraints=critical,CA:FALSE\\nkeyUsage=critical,digitalSignature,keyEncipherment\\nextendedKeyUsage=serverAuth\\nsubjectAltName=DNS:%s\\n' ${name} > "$d/ext"`,
    `openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=${name} -keyout ${PUPPETDB_CERT_FILES.key} -out "$d/csr" 2>/dev/null`,
    `openssl x509 -req -in "$d/csr" -CA "$ca/ca_crt.pem" -CAkey "$ca/ca_key.pem" -set_serial "0x$(openssl rand -hex 16)" -days 1825 -sha256 -extfile "$d/ext" -out ${PUPPETDB_CERT_FILES.cert} 2>/dev/null`,
    `chmod 0644 ${PUPPETDB_CERT_FILES.cert}`,
    'rm -rf "$d"',
  ].join("; ");
}

/** PuppetDB's ports: TLS for the masters, plain HTTP on loopback for the registry on its machine. */
export const PUPPETDB_PORTS = { ssl: 8081, plain: 8080 } as const;

/**
 * puppetdb.conf: where the terminus sends. A PuppetDB that cannot be reached does not fail the
 * fleet's Puppet runs (soft_write_failure): its data catches up at each node's next run.
 */
export function puppetDbConfText(urls: readonly string[], o: { softWriteFailure?: boolean } = {}): string {
  return `[main]\nserver_urls = ${urls.join(",")}\n${o.softWriteFailure === false ? "" : "soft_write_failure = true\n"}`;
}

/** routes.yaml: the master stores the facts it receives in PuppetDB (and keeps a local copy). */
export const PUPPETDB_ROUTES_YAML = "---\nserver:\n  facts:\n    terminus: puppetdb\n    cache: yaml\n";

/** puppet.conf settings ([server]) that send catalogs (storeconfigs) and reports to PuppetDB. */
export const PUPPETDB_SERVER_SETTINGS: readonly [string, string][] = [
  ["storeconfigs", "true"],
  ["storeconfigs_backend", "puppetdb"],
  ["reports", "store,puppetdb"],
];

export interface PuppetDbTlsOptions {
  /**
   * The name each master reaches PuppetDB by (its SNI name): the certificate that master's CA issued
   * for it is <incoming>/<name>.pem with its key <name>.key. The masters' CAs are <incoming>/ca-*.pem.
   */
  names: string[];
  /** The client certificates' names PuppetDB lets in (certificate-allowlist). */
  allow: string[];
  /** PuppetDB's config directory (default /etc/puppetdb) and its ports. */
  etc?: string;
  plain?: { host: string; port: number };
  ssl?: { host: string; port: number };
  /** Restart Debian's unit at the end and wait until PuppetDB serves (default), only ask for it ("no-block"), or not. */
  restart?: boolean | "no-block";
}

/** Where the operator copies the masters' files on PuppetDB's machine before running the script. */
export const PUPPETDB_INCOMING = "/etc/puppetdb/ssl-incoming";

const q = (s: string) => (/^[A-Za-z0-9_./:=@%+,-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);

/**
 * A shell script (`sh -s` on PuppetDB's machine, as root) that makes PuppetDB's keystore (every
 * master's certificate for it), its truststore (the masters' CAs), its allowlist and jetty.ini from
 * the files in <etc>/ssl-incoming, then restarts it. Run again with other files, it replaces them.
 */
export function puppetDbTlsScript(o: PuppetDbTlsOptions): string {
  const etc = o.etc ?? "/etc/puppetdb";
  const plain = o.plain ?? { host: "127.0.0.1", port: PUPPETDB_PORTS.plain };
  const ssl = o.ssl ?? { host: "0.0.0.0", port: PUPPETDB_PORTS.ssl };
  const lines = [
    "set -eu",
    "umask 077",
    `etc=${q(etc)}`,
    'in="$etc/ssl-incoming" ssl="$etc/ssl"',
    'install -d -m 0750 "$ssl"',
    // a fresh password each time: the stores are PuppetDB's user's alone anyway
    "pw=$(openssl rand -hex 16)",
    'rm -f "$ssl"/*.new "$in"/*.p12',
    `for name in ${o.names.map(q).join(" ")}; do`,
    '  openssl pkcs12 -export -in "$in/$name.pem" -inkey "$in/$name.key" -name "$name" -out "$in/$name.p12" -passout "pass:$pw"',
    '  keytool -importkeystore -noprompt -srckeystore "$in/$name.p12" -srcstoretype PKCS12 -srcstorepass "$pw" -destkeystore "$ssl/keystore.p12.new" -deststoretype PKCS12 -deststorepass "$pw" >/dev/null',
    "done",
    'for ca in "$in"/ca-*.pem; do',
    '  keytool -importcert -noprompt -alias "$(basename "$ca" .pem)" -file "$ca" -keystore "$ssl/truststore.p12.new" -storetype PKCS12 -storepass "$pw" >/dev/null',
    "done",
    'rm -f "$in"/*.p12',
    'mv "$ssl/keystore.p12.new" "$ssl/keystore.p12"',
    'mv "$ssl/truststore.p12.new" "$ssl/truststore.p12"',
    `printf '%s\\n' ${o.allow.map(q).join(" ")} > "$etc/certificate-allowlist"`,
    'cat > "$etc/conf.d/jetty.ini" <<EOF',
    "[jetty]",
    "# plain HTTP, unauthenticated: loopback only (the registry on this machine)",
    `host = ${plain.host}`,
    `port = ${plain.port}`,
    "# TLS for the masters: one certificate per master's CA, picked by the name it asks for (SNI)",
    `ssl-host = ${ssl.host}`,
    `ssl-port = ${ssl.port}`,
    "keystore = $ssl/keystore.p12",
    "key-password = $pw",
    "truststore = $ssl/truststore.p12",
    "trust-password = $pw",
    "EOF",
    `printf '[puppetdb]\\ncertificate-allowlist = %s\\n' "$etc/certificate-allowlist" > "$etc/conf.d/allowlist.ini"`,
    // PuppetDB's user reads what it serves with; nobody else
    'chmod 0644 "$etc/conf.d/allowlist.ini"',
    'if getent group puppetdb >/dev/null; then chgrp -R puppetdb "$ssl" "$etc/conf.d/jetty.ini" "$etc/certificate-allowlist"; chmod 0640 "$ssl"/*.p12 "$etc/conf.d/jetty.ini" "$etc/certificate-allowlist"; fi',
  ];
  if (o.restart !== false) lines.push(`systemctl ${o.restart === "no-block" ? "--no-block " : ""}restart puppetdb.service`);
  return `${lines.join("\n")}\n`;
}
