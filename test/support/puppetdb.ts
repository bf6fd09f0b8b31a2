import { execFile, spawn, type ChildProcess } from "node:child_process";
import { chownSync, closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { bootstrapNamespaces, compiledClojure, readBootstrap } from "../../src/lab/clojure-aot.js";
import { freePort } from "../../src/lab/ports.js";
import { stopChild, watchdog } from "../../src/lab/processes.js";
import { PuppetDb } from "../../src/puppetdb/http.js";

// A real PuppetDB of Debian's packaging (/usr/share/puppetdb/puppetdb.jar) on a free loopback
// port, with a PostgreSQL cluster of its own in a temp dir (initdb, then postgres on another free
// port): nothing of the machine's own PostgreSQL or /etc/puppetdb is used or touched. Both are
// stopped by stop(), and by a watchdog if this process dies first.
//
// PuppetDB's JVM is slow to start: Debian's jar carries its Clojure as source, compiled at every
// start (about a minute on a busy 2-core machine). So the first start compiles it ahead of time,
// once per installed jar, into the user's cache (src/lab/clojure-aot.ts; about 35 s), and every
// start after that loads the compiled classes first: about 11 s (docs/bench.md#puppetdb). The same code either way.
// Test files still share one PuppetDB per file.

const JAR = "/usr/share/puppetdb/puppetdb.jar";
const BOOTSTRAP = "/etc/puppetdb/bootstrap.cfg";
const AUTH_CONF = "/etc/puppetdb/conf.d/auth.conf";

// The namespaces PuppetDB's services load: its entry point and the services of Debian's bootstrap.cfg.
const NAMESPACES = bootstrapNamespaces("puppetlabs.puppetdb.core", readBootstrap([BOOTSTRAP]));

/** PostgreSQL's server binaries: the newest major version installed. */
function pgBin(): string {
  const root = "/usr/lib/postgresql";
  const versions = existsSync(root) ? readdirSync(root).filter((v) => /^\d+$/.test(v) && existsSync(join(root, v, "bin", "postgres"))) : [];
  if (!versions.length) throw new Error("PostgreSQL is not installed (/usr/lib/postgresql/<version>/bin/postgres): apt-get install postgresql (scripts/setup.sh)");
  return join(root, versions.sort((a, b) => Number(b) - Number(a))[0]!, "bin");
}

/** initdb and postgres refuse to run as root: as root they run as the postgres user (setpriv execs, so the child is postgres itself). */
function asDbUser(argv: string[]): string[] {
  if (process.getuid?.() !== 0) return argv;
  return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", ...argv];
}

function run(argv: string[], what: string): Promise<string> {
  return new Promise((resolve, reject) =>
    execFile(argv[0]!, argv.slice(1), { timeout: 120_000 }, (err, stdout, stderr) => (err ? reject(new Error(`${what} failed: ${err.message}\n${stderr}`)) : resolve(stdout))),
  );
}

function tail(file: string, bytes = 4000): string {
  try {
    return readFileSync(file, "utf8").slice(-bytes);
  } catch {
    return "(no log)";
  }
}

export interface PostgresHandle {
  host: string;
  port: number;
  dir: string;
  /** Run SQL as the superuser (psql), in `database` (default postgres). */
  sql(text: string, database?: string): Promise<string>;
  stop(): Promise<void>;
}

/** A PostgreSQL cluster of its own (trust authentication on loopback, fsync off: it holds test data only). */
export async function startPostgres(o: { host?: string } = {}): Promise<PostgresHandle> {
  const host = o.host ?? "127.0.0.1";
  const bin = pgBin();
  const dir = mkdtempSync(join(tmpdir(), "muster-postgres-"));
  const data = join(dir, "data");
  if (process.getuid?.() === 0) chownSync(dir, Number((await run(["id", "-u", "postgres"], "id postgres")).trim()), Number((await run(["id", "-g", "postgres"], "id postgres")).trim()));
  await run(asDbUser([join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"]), "initdb");
  const port = await freePort(host);
  const log = join(dir, "postgres.log");
  const out = openSync(log, "a");
  const argv = asDbUser([join(bin, "postgres"), "-D", data, "-h", host, "-p", String(port), "-k", dir, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]);
  let child: ChildProcess;
  try {
    child = spawn(argv[0]!, argv.slice(1), { stdio: ["ignore", out, out] });
  } finally {
    closeSync(out);
  }
  const unwatch = watchdog(child.pid ?? -1);
  const psql = join(bin, "psql");
  const sql = (text: string, database = "postgres") => run([psql, "-h", host, "-p", String(port), "-U", "postgres", "-d", database, "-v", "ON_ERROR_STOP=1", "-qAt", "-c", text], "psql");
  const stop = async () => {
    await stopChild(child, "SIGINT", 20_000); // fast shutdown: clients are cut off
    unwatch();
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      const why = tail(log);
      await stop();
      throw new Error(`postgres exited at start:\n${why}`);
    }
    try {
      await sql("select 1");
      break;
    } catch (e) {
      if (Date.now() > deadline) {
        await stop();
        throw new Error(`postgres on ${host}:${port} did not accept connections within 60 s: ${(e as Error).message}\n${tail(log)}`);
      }
      await new Promise((r) => setTimeout(r, 200)); // polling a port: postgres offers no readiness event to a non-systemd parent
    }
  }
  return { host, port, dir, sql, stop };
}

export interface StartPuppetDbOptions {
  host?: string;
  /**
   * Serve TLS too (the port puppet-terminus-puppetdb and muster's registry use off loopback), set up
   * as a site's is: `configure` gets PuppetDB's config directory and its ports before the JVM
   * starts, and runs the site's script there (config/puppetdb-site.ts puppetDbTlsScript).
   */
  tls?: { configure(etc: string, ports: { host: string; plain: number; ssl: number }): Promise<void> };
  /** The TLS port (default: a free one): a master's puppetdb.conf may name it before PuppetDB starts. */
  sslPort?: number;
  /** JVM heap (default 256m). */
  heap?: string;
  /** C1 only (default): the JVM starts sooner and a test's few queries do not need C2; a bench measures with both. */
  quickJit?: boolean;
  /** More [database] settings (node-ttl, gc-interval, ...). */
  database?: Record<string, string>;
  readyTimeoutMs?: number;
  /** false: the jar's Clojure compiled at start, as Debian's unit runs it (a bench compares); default: compiled ahead of time once. */
  aot?: boolean;
}

export interface PuppetDbHandle {
  host: string;
  /** Plain HTTP, unauthenticated (loopback only). */
  port: number;
  url: string;
  /** The TLS port and its URL, when tls was given. */
  sslPort?: number;
  sslUrl?: string;
  dir: string;
  pid: number;
  postgres: PostgresHandle;
  /** Milliseconds from the JVM's spawn until PuppetDB answered as running (its Clojure compiled already). */
  startMs: number;
  logfile: string;
  /** A client on the plain port. */
  db: PuppetDb;
  /** The JVM's resident memory now, in KiB. */
  rssKb(): number;
  /** Wait until PuppetDB has processed every command it queued (its command queue is empty). */
  settled(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

function httpGet(host: string, port: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host, port, path, timeout: 5000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", reject);
    req.end();
  });
}

/** A PuppetDB with its own PostgreSQL; stop() stops both. */
export async function startPuppetDb(o: StartPuppetDbOptions = {}): Promise<PuppetDbHandle> {
  if (!existsSync(JAR)) throw new Error(`PuppetDB is not installed (${JAR} missing): apt-get install puppetdb (scripts/setup.sh)`);
  const host = o.host ?? "127.0.0.1";
  const classes = o.aot === false ? undefined : await compiledClojure("puppetdb", JAR, NAMESPACES);
  const postgres = await startPostgres({ host });
  const password = "muster-test-puppetdb";
  const dir = mkdtempSync(join(tmpdir(), "muster-puppetdb-"));
  let child: ChildProcess | undefined;
  let unwatch = () => undefined as void;
  const stop = async () => {
    if (child) await stopChild(child, "SIGTERM", 20_000);
    unwatch();
    await postgres.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await postgres.sql(`create role puppetdb login password '${password}'`);
    await postgres.sql("create database puppetdb owner puppetdb encoding 'UTF8' template template0");
    await postgres.sql("create extension pg_trgm", "puppetdb");
    const port = await freePort(host);
    const sslPort = o.tls ? (o.sslPort ?? (await freePort(host))) : undefined;
    for (const d of ["conf.d", "var", "log", "tmp"]) mkdirSync(join(dir, d));
    const logfile = join(dir, "log", "puppetdb.log");
    writeFileSync(join(dir, "conf.d", "config.ini"), `[global]\nvardir = ${join(dir, "var")}\nlogging-config = ${join(dir, "logback.xml")}\n\n[command-processing]\nthreads = 2\n`);
    const database = { subname: `//${host}:${postgres.port}/puppetdb`, username: "puppetdb", password, ...o.database };
    writeFileSync(join(dir, "conf.d", "database.ini"), `[database]\n${Object.entries(database).map(([k, v]) => `${k} = ${v}`).join("\n")}\n`);
    writeFileSync(join(dir, "conf.d", "jetty.ini"), `[jetty]\nhost = ${host}\nport = ${port}\n`);
    writeFileSync(join(dir, "conf.d", "auth.conf"), readFileSync(AUTH_CONF, "utf8"));
    if (o.tls && sslPort) await o.tls.configure(dir, { host, plain: port, ssl: sslPort });
    writeFileSync(
      join(dir, "logback.xml"),
      `<configuration>\n  <appender name="F1" class="ch.qos.logback.core.FileAppender">\n    <file>${logfile}</file>\n    <encoder><pattern>%d %-5p [%c{2}] %m%n</pattern></encoder>\n  </appender>\n  <root level="info"><appender-ref ref="F1"/></root>\n</configuration>\n`,
    );
    const stdout = join(dir, "log", "stdout.log");
    const out = openSync(stdout, "a");
    const started = Date.now();
    try {
      child = spawn(
        "java",
        [`-Xmx${o.heap ?? "256m"}`, ...(o.quickJit === false ? [] : ["-XX:TieredStopAtLevel=1"]), `-Djava.io.tmpdir=${join(dir, "tmp")}`, "-cp", classes ? `${classes}:${JAR}` : JAR, "clojure.main", "-m", "puppetlabs.puppetdb.core", "services", "--config", join(dir, "conf.d"), "--bootstrap-config", BOOTSTRAP],
        { cwd: dir, stdio: ["ignore", out, out] },
      );
    } finally {
      closeSync(out);
    }
    unwatch = watchdog(child.pid ?? -1);
    const deadline = Date.now() + (o.readyTimeoutMs ?? 300_000);
    let last = "not started";
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`PuppetDB exited at start (${child.signalCode ?? child.exitCode}):\n${tail(stdout)}\n${tail(logfile)}`);
      try {
        const r = await httpGet(host, port, "/status/v1/simple");
        if (r.status === 200 && r.body.trim() === "running") break;
        last = `status ${r.status}: ${r.body.trim().slice(0, 100)}`;
      } catch (e) {
        last = (e as Error).message;
      }
      if (Date.now() > deadline) throw new Error(`PuppetDB on ${host}:${port} not running after ${o.readyTimeoutMs ?? 300_000} ms (${last}):\n${tail(logfile)}`);
      await new Promise((r) => setTimeout(r, 500)); // polling its status endpoint: PuppetDB offers no readiness event
    }
    const startMs = Date.now() - started;
    const pid = child.pid!;
    const db = new PuppetDb({ url: `http://${host}:${port}` });
    const settled = async (timeoutMs = 120_000) => {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const r = await httpGet(host, port, "/status/v1/services/puppetdb-status");
        const depth = (JSON.parse(r.body) as { status?: { queue_depth?: number } }).status?.queue_depth;
        if (depth === 0) return;
        if (Date.now() > until) throw new Error(`PuppetDB still has ${depth} command(s) queued after ${timeoutMs} ms`);
        await new Promise((res) => setTimeout(res, 100)); // its queue depth is a status field, not an event
      }
    };
    const rssKb = () => {
      try {
        return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0);
      } catch {
        return 0;
      }
    };
    return { host, port, url: `http://${host}:${port}`, ...(sslPort ? { sslPort, sslUrl: `https://${host}:${sslPort}` } : {}), dir, pid, postgres, startMs, logfile, db, rssKb, settled, stop };
  } catch (e) {
    await stop().catch(() => undefined);
    throw e;
  }
}

/** What a node is, for PuppetDB: its facts and the classes of its catalog. */
export interface PuppetDbNode {
  identity: string;
  facts: Record<string, unknown>;
  classes?: string[];
  /** producer_timestamp of its facts and catalog (default now): an old one lets PuppetDB expire the node. */
  at?: Date;
}

/** A Puppet class's catalog resource, as puppetserver compiles it. */
function classResource(name: string): Record<string, unknown> {
  const title = name
    .split("::")
    .map((s) => s.charAt(0).toUpperCase() + s.slice(1))
    .join("::");
  return { type: "Class", title, exported: false, tags: ["class", name, ...name.split("::")], parameters: {} };
}

/**
 * A node's facts and catalog through PuppetDB's command API (what a master's puppet-terminus-puppetdb
 * sends after compiling), each answered once PuppetDB processed it.
 */
export async function storeNode(db: PuppetDb, n: PuppetDbNode): Promise<void> {
  const at = (n.at ?? new Date()).toISOString();
  const facts = await db.command("replace facts", 5, n.identity, { certname: n.identity, environment: "production", producer_timestamp: at, producer: "muster-test", values: n.facts }, { waitSeconds: 60 });
  const uuid = () => crypto.randomUUID();
  const catalog = await db.command(
    "replace catalog",
    9,
    n.identity,
    { certname: n.identity, version: "1", environment: "production", transaction_uuid: uuid(), catalog_uuid: uuid(), producer_timestamp: at, producer: "muster-test", code_id: null, job_id: null, resources: (n.classes ?? []).map(classResource), edges: [] },
    { waitSeconds: 60 },
  );
  if (!facts.processed || !catalog.processed) throw new Error(`PuppetDB did not process ${n.identity}'s facts and catalog within 60 s`);
}

/** A run's report through PuppetDB's command API, as a master's puppetdb report processor sends it. */
export async function storeReport(db: PuppetDb, certname: string, r: { status: "changed" | "unchanged" | "failed"; at?: Date; resources?: { total: number; changed: number; failed: number }; failed?: { type: string; title: string; message: string }[] }): Promise<void> {
  const at = (r.at ?? new Date()).toISOString();
  const res = r.resources ?? { total: 10, changed: r.status === "changed" ? 1 : 0, failed: r.status === "failed" ? 1 : 0 };
  const resources = (r.failed ?? []).map((f) => ({
    skipped: false,
    timestamp: at,
    resource_type: f.type,
    resource_title: f.title,
    file: null,
    line: null,
    containment_path: ["Stage[main]", "Main", `${f.type}[${f.title}]`],
    corrective_change: false,
    events: [{ status: "failure", timestamp: at, property: "returns", new_value: "0", old_value: "notrun", message: f.message, corrective_change: false, name: null }],
  }));
  const metrics = [...Object.entries(res).map(([name, value]) => ({ category: "resources", name, value })), { category: "time", name: "total", value: 2.5 }];
  const payload = { certname, environment: "production", puppet_version: "7", report_format: 10, configuration_version: "1", start_time: at, end_time: at, producer_timestamp: at, producer: "muster-test", corrective_change: false, noop: false, noop_pending: false, status: r.status, transaction_uuid: crypto.randomUUID(), catalog_uuid: crypto.randomUUID(), code_id: null, job_id: null, cached_catalog_status: "not_used", type: "agent", resources, metrics, logs: [] };
  const done = await db.command("store report", 8, certname, payload, { waitSeconds: 60 });
  if (!done.processed) throw new Error(`PuppetDB did not process ${certname}'s report within 60 s`);
}
