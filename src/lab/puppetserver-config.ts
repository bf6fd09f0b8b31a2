import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { puppetDbConfText, PUPPETDB_ROUTES_YAML, PUPPETDB_SERVER_SETTINGS } from "../config/puppetdb-site.js";

// A lab puppetserver's own tree of configuration, written before its JVM starts (puppetserver.ts
// starts it): puppet.conf, logback, trapperkeeper's conf.d (webserver, jruby-puppet, CA, routes,
// auth), and the code of each environment.

const DEBIAN_AUTH_CONF = "/etc/puppet/puppetserver/conf.d/auth.conf";

export type EnvironmentFiles = {
  /** site.pp text (environments/<env>/manifests/site.pp). */
  manifest: string;
  /** Module name -> files relative to the module root, e.g. {"manifests/init.pp": "class m {}"}. */
  modules?: Record<string, Record<string, string>>;
};

export interface Layout {
  confdir: string;
  codedir: string;
  ssldir: string;
  cadir: string;
  logdir: string;
  rundir: string;
  caCertPath: string;
}

/** Write or replace an environment's site.pp and modules; takes effect on the next catalog. */
export function writeEnvironment(handle: { codedir: string }, name: string, files: EnvironmentFiles): void {
  if (!/^[a-z0-9_]+$/.test(name)) throw new Error(`invalid Puppet environment name: ${name}`);
  const env = join(handle.codedir, "environments", name);
  mkdirSync(join(env, "manifests"), { recursive: true });
  mkdirSync(join(env, "modules"), { recursive: true });
  writeFileSync(join(env, "manifests", "site.pp"), files.manifest);
  for (const [mod, modFiles] of Object.entries(files.modules ?? {})) {
    if (!/^[a-z][a-z0-9_]*$/.test(mod)) throw new Error(`invalid Puppet module name: ${mod}`);
    for (const [rel, text] of Object.entries(modFiles)) {
      const p = resolve(env, "modules", mod, rel);
      if (!p.startsWith(join(env, "modules", mod) + "/")) throw new Error(`module file escapes its module: ${rel}`);
      mkdirSync(dirname(p), { recursive: true });
      writeFileSync(p, text);
    }
  }
}

/**
 * A master sending facts, catalogs and reports to PuppetDB (puppet-terminus-puppetdb), as
 * docs/deploy.md sets the site's masters up (config/puppetdb-site.ts): puppetdb.conf, routes.yaml,
 * and storeconfigs and the puppetdb report processor in puppet.conf. The terminus reads puppetdb.conf at its first use, so
 * PuppetDB may start after the master.
 */
export function puppetDbTerminusFiles(confdir: string, urls: readonly string[]): void {
  writeFileSync(join(confdir, "puppetdb.conf"), puppetDbConfText(urls));
  writeFileSync(join(confdir, "routes.yaml"), PUPPETDB_ROUTES_YAML);
}

export function writePuppetserverConfig(dir: string, host: string, port: number, certname: string, altIps: string[], puppetdb?: readonly string[]): Layout {
  const d = (...p: string[]) => join(dir, ...p);
  const l: Layout = {
    confdir: d("puppet"),
    codedir: d("code"),
    ssldir: d("ssl"),
    cadir: d("ca"),
    logdir: d("log"),
    rundir: d("run"),
    caCertPath: d("ssl", "certs", "ca.pem"),
  };
  for (const p of [d("conf.d"), d("tmp"), d("var"), l.confdir, l.codedir, l.logdir, l.rundir, join(l.codedir, "environments")]) mkdirSync(p, { recursive: true });

  writeFileSync(
    join(l.confdir, "puppet.conf"),
    [
      "# written by muster (src/lab/puppetserver.ts)",
      "[main]",
      `certname = ${certname}`,
      `server = ${host}`,
      `serverport = ${port}`,
      `ssldir = ${l.ssldir}`,
      `vardir = ${d("var")}`,
      `logdir = ${l.logdir}`,
      `rundir = ${l.rundir}`,
      `codedir = ${l.codedir}`,
      // A lab CA's and master's keys: 4096 bits (Puppet's default) took 15 of a 53 s start on an
      // idle 2-core machine, and several times that with other JVMs starting beside it
      "keylength = 2048",
      "",
      "[server]",
      `cadir = ${l.cadir}`,
      "autosign = false",
      // Agents reach the master by IP, so its certificate must name the IP.
      `dns_alt_names = ${[certname, "localhost", ...[host, ...altIps].map((ip) => `IP:${ip}`)].join(",")}`,
      "environment_timeout = 0",
      ...(puppetdb ? PUPPETDB_SERVER_SETTINGS.map(([k, v]) => `${k} = ${v}`) : ["reports = store"]),
      "",
    ].join("\n"),
  );
  if (puppetdb) puppetDbTerminusFiles(l.confdir, puppetdb);
  writeFileSync(join(l.confdir, "hiera.yaml"), "---\nversion: 5\nhierarchy: []\n");

  writeFileSync(
    d("logback.xml"),
    `<configuration>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{yyyy-MM-dd'T'HH:mm:ss.SSSXXX} %-5p [%t] [%c{2}] %m%n</pattern></encoder>
  </appender>
  <appender name="F1" class="ch.qos.logback.core.FileAppender">
    <file>${join(l.logdir, "puppetserver.log")}</file>
    <append>true</append>
    <encoder><pattern>%d{yyyy-MM-dd'T'HH:mm:ss.SSSXXX} %-5p [%t] [%c{2}] %m%n</pattern></encoder>
  </appender>
  <logger name="org.eclipse.jetty" level="WARN"/>
  <logger name="org.apache.http" level="WARN"/>
  <logger name="jruby" level="info"/>
  <root level="info">
    <appender-ref ref="STDOUT"/>
    <appender-ref ref="F1"/>
  </root>
</configuration>
`,
  );

  const conf = (name: string, text: string) => writeFileSync(d("conf.d", name), text);
  conf("global.conf", `global: {\n  logging-config: ${JSON.stringify(d("logback.xml"))}\n}\n`);
  conf(
    "webserver.conf",
    `webserver: {\n  client-auth: want\n  ssl-host: ${JSON.stringify(host)}\n  ssl-port: ${port}\n  shutdown-timeout-seconds: 2\n}\n`,
  );
  conf(
    "puppetserver.conf",
    `jruby-puppet: {
  ruby-load-path: [/usr/lib/puppetserver/ruby/vendor_ruby]
  gem-home: /var/lib/puppetserver/jruby-gems
  gem-path: [\${jruby-puppet.gem-home}, "/usr/lib/puppetserver/vendored-jruby-gems"]
  server-conf-dir: ${JSON.stringify(l.confdir)}
  server-code-dir: ${JSON.stringify(l.codedir)}
  server-var-dir: ${JSON.stringify(d("var"))}
  server-run-dir: ${JSON.stringify(l.rundir)}
  server-log-dir: ${JSON.stringify(l.logdir)}
  max-active-instances: 1
}
http-client: {}
profiler: { enabled: false }
# never phone home for update checks: only loopback traffic is allowed
product: { check-for-updates: false }
`,
  );
  conf("ca.conf", "certificate-authority: {\n  allow-subject-alt-names: false\n  allow-authorization-extensions: false\n}\n");
  conf(
    "web-routes.conf",
    `web-router-service: {
  "puppetlabs.services.ca.certificate-authority-service/certificate-authority-service": "/puppet-ca"
  "puppetlabs.services.master.master-service/master-service": "/puppet"
  "puppetlabs.services.legacy-routes.legacy-routes-service/legacy-routes-service": ""
  "puppetlabs.services.puppet-admin.puppet-admin-service/puppet-admin-service": "/puppet-admin-api"
  "puppetlabs.trapperkeeper.services.status.status-service/status-service": "/status"
  "puppetlabs.trapperkeeper.services.metrics.metrics-service/metrics-webservice": "/metrics"
}
`,
  );
  conf("metrics.conf", `metrics: {\n  server-id: ${JSON.stringify(certname)}\n  registries: { puppetserver: { reporters: { jmx: { enabled: false } } } }\n}\n`);
  // Debian's auth.conf as shipped: the CA endpoints need a client certificate carrying
  // pp_cli_auth, which the master's own certificate gets when the CA bootstraps itself.
  conf("auth.conf", existsSync(DEBIAN_AUTH_CONF) ? readFileSync(DEBIAN_AUTH_CONF, "utf8") : MINIMAL_AUTH_CONF);
  return l;
}

const MINIMAL_AUTH_CONF = `authorization: {
  version: 1
  rules: [
    { match-request: { path: "^/puppet/v3/catalog/([^/]+)$", type: regex, method: [get, post] }, allow: "$1", sort-order: 500, name: "catalog" },
    { match-request: { path: "^/puppet/v3/node/([^/]+)$", type: regex, method: get }, allow: "$1", sort-order: 500, name: "node" },
    { match-request: { path: "^/puppet/v3/report/([^/]+)$", type: regex, method: put }, allow: "$1", sort-order: 500, name: "report" },
    { match-request: { path: "^/puppet/v3/facts/([^/]+)$", type: regex, method: put }, allow: "$1", sort-order: 500, name: "facts" },
    { match-request: { path: "/puppet/v3/file_", type: path }, allow: "*", sort-order: 500, name: "files" },
    { match-request: { path: "/puppet/v3/environments", type: path, method: get }, allow: "*", sort-order: 500, name: "environments" },
    { match-request: { path: "/puppet-ca/v1/certificate/", type: path, method: get }, allow-unauthenticated: true, sort-order: 500, name: "certificate" },
    { match-request: { path: "/puppet-ca/v1/certificate_revocation_list/ca", type: path, method: get }, allow-unauthenticated: true, sort-order: 500, name: "crl" },
    { match-request: { path: "/puppet-ca/v1/certificate_request", type: path, method: [get, put] }, allow-unauthenticated: true, sort-order: 500, name: "csr" },
    { match-request: { path: "/puppet-ca/v1/certificate_status", type: path }, allow: { extensions: { pp_cli_auth: "true" } }, sort-order: 500, name: "cert status" },
    { match-request: { path: "/puppet-ca/v1/clean", type: path, method: put }, allow: { extensions: { pp_cli_auth: "true" } }, sort-order: 500, name: "clean" },
    { match-request: { path: "/status/v1/simple", type: path, method: get }, allow-unauthenticated: true, sort-order: 500, name: "status" },
    { match-request: { path: "/", type: path }, deny: "*", sort-order: 999, name: "deny all" }
  ]
}
`;
