import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:https";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { bootstrapNamespaces, compiledClojure, readBootstrap } from "./clojure-aot.js";
import { freePort } from "./ports.js";
import { isAlive, stopChild } from "./processes.js";
import { writeEnvironment, writePuppetserverConfig, type EnvironmentFiles } from "./puppetserver-config.js";

export { writeEnvironment, type EnvironmentFiles } from "./puppetserver-config.js";

// A real Debian puppetserver (7.x) run outside systemd, with every directory of its own:
//
//   <dir>/conf.d/        trapperkeeper config (webserver, jruby-puppet, auth, ca, global)
//   <dir>/logback.xml    logs to stdout and <dir>/log/puppetserver.log
//   <dir>/puppet/        puppet confdir: puppet.conf (certname, ssldir, cadir, dns_alt_names, autosign off)
//   <dir>/code/          codedir: environments/<name>/{manifests/site.pp, modules/...}
//   <dir>/ssl, ca, var, run, log
//
// puppetserver-config.ts writes that tree. We start the JVM the way /usr/share/puppetserver/cli/apps/foreground does, but without
// `runuser puppet` and with our own --config dir; the bootstrap service list is Debian's
// (/etc/puppet/puppetserver/services.d). The CA is created on first start by the CA service.
// Measured here (2 cores, -Xmx768m, one JRuby, 2048-bit keys): about 30 s from spawn to serving
// on an idle machine; 2-6 times that beside the suite's other JVMs.

const INSTALL_DIR = "/usr/share/puppetserver";
const JAR = join(INSTALL_DIR, "puppetserver.jar");
const BOOTSTRAP_DIR = "/etc/puppet/puppetserver/services.d";
// A deadline that catches a hung JVM, not a measure: two labs and PuppetDB starting at once on 2
// cores (the suite) kept one from serving for over 180 s
const READY_TIMEOUT_MS = 480_000;

export interface StartPuppetserverOptions {
  /** Loopback address to bind (127.0.0.0/8). */
  host: string;
  /** Directory to hold everything; a new temp dir when omitted (and removed on stop). */
  dir?: string;
  /** The master's certname; default "puppet". */
  certname?: string;
  environments?: Record<string, EnvironmentFiles>;
  /** Leave the server running after this process exits (writes <dir>/puppetserver.pid). */
  detached?: boolean;
  /** JVM heap options; default ["-Xms256m", "-Xmx768m"]. */
  heap?: string[];
  /** Extra JVM options, after the defaults. */
  javaArgs?: string[];
  /** Deadline for the server to answer /status/v1/simple; default 480 s (READY_TIMEOUT_MS). */
  readyTimeoutMs?: number;
  /** More addresses agents reach the master on (the lab machines' relay), named in its certificate. */
  altIps?: string[];
  /** The port to listen on (default: a free one); the lab picks it early to relay it. */
  port?: number;
  /** Give up waiting for it to answer: stop it and reject (the lab's start was abandoned). */
  signal?: AbortSignal;
  /** PuppetDB's URLs: the master sends it facts, catalogs and reports (puppet-terminus-puppetdb). */
  puppetdb?: string[];
  /** false: the jar's Clojure compiled at start, as Debian's unit runs it; default: compiled ahead of time once (clojure-aot.ts). */
  aot?: boolean;
}

export interface PuppetserverHandle {
  host: string;
  port: number;
  /** https://<host>:<port> */
  url: string;
  certname: string;
  dir: string;
  /** Puppet confdir of the master (holds puppet.conf). */
  confdir: string;
  cadir: string;
  codedir: string;
  ssldir: string;
  /** The CA certificate (PEM file) agents and clients trust. */
  caCertPath: string;
  /** The master's own certificate and key (it carries pp_cli_auth, so it may use the CA API). */
  hostCertPath: string;
  hostKeyPath: string;
  pid: number;
  pidfile: string;
  logfile: string;
  /** Milliseconds from spawn until the server answered. */
  startMs: number;
  stop(): Promise<void>;
}

/** Start a real puppetserver on a free port of `host`. Always pair with stop() unless detached. */
export async function startPuppetserver(opts: StartPuppetserverOptions): Promise<PuppetserverHandle> {
  if (!/^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(opts.host)) throw new Error(`puppetserver host must be a 127.0.0.0/8 address, got ${opts.host}`);
  if (!existsSync(JAR)) throw new Error(`puppetserver is not installed (${JAR} missing): apt-get install puppetserver`);
  const ownDir = opts.dir === undefined;
  const dir = resolve(opts.dir ?? mkdtempSync(join(tmpdir(), "muster-puppetserver-")));
  const host = opts.host;
  const certname = opts.certname ?? "puppet";
  const port = opts.port ?? (await freePort(host));
  const layout = writePuppetserverConfig(dir, host, port, certname, opts.altIps ?? [], opts.puppetdb);
  for (const [name, files] of Object.entries(opts.environments ?? { production: { manifest: "" } })) {
    writeEnvironment(layout, name, files);
  }
  if (!existsSync(join(layout.codedir, "environments", "production"))) writeEnvironment(layout, "production", { manifest: "" });

  // the same code, its Clojure loaded as classes compiled once: a start on about 0.6 of the CPU (docs/bench.md, "JVM starts")
  const classes = opts.aot === false ? undefined : await compiledClojure("puppetserver", JAR, bootstrapNamespaces("puppetlabs.trapperkeeper.main", readBootstrap(bootstrapFiles())));
  const java = [
    ...(opts.heap ?? ["-Xms256m", "-Xmx768m"]),
    // JRuby starts noticeably faster with C1 only; a test master compiles few catalogs.
    "-XX:TieredStopAtLevel=1",
    "-Djruby.logger.class=com.puppetlabs.jruby_utils.jruby.Slf4jLogger",
    "-Dlogappender=STDOUT",
    "-Djruby.lib=/usr/share/jruby/lib",
    "-XX:+CrashOnOutOfMemoryError",
    `-XX:ErrorFile=${join(layout.logdir, "puppetserver_err_pid%p.log")}`,
    `-Djava.io.tmpdir=${join(dir, "tmp")}`,
    ...(opts.javaArgs ?? []),
    ...(classes ? ["-cp", `${classes}:${JAR}`, "puppetlabs.trapperkeeper.main"] : ["-jar", JAR]),
    "--config",
    join(dir, "conf.d"),
    "--bootstrap-config",
    BOOTSTRAP_DIR,
  ];
  const logfile = join(layout.logdir, "stdout.log");
  const out = openSync(logfile, "a");
  const started = Date.now();
  let child: ChildProcess;
  try {
    // Own process group either way, so stop() can signal the JVM without touching us.
    child = spawn("java", java, { cwd: INSTALL_DIR, detached: true, stdio: ["ignore", out, out] });
  } finally {
    closeSync(out);
  }
  const spawnError = new Promise<never>((_, reject) =>
    child.once("error", (e) => reject(new Error(`cannot run java for puppetserver (apt-get install puppetserver): ${e.message}`))),
  );
  const exited = new Promise<never>((_, reject) =>
    child.once("exit", (code, sig) => reject(new Error(`puppetserver exited early (${sig ?? code}); log tail:\n${tail(logfile)}`))),
  );
  spawnError.catch(() => undefined);
  exited.catch(() => undefined);
  const pid = await Promise.race([
    new Promise<number>((r) => child.once("spawn", () => r(child.pid ?? -1))),
    spawnError,
  ]);
  const pidfile = join(layout.rundir, "puppetserver.pid");
  writeFileSync(pidfile, `${pid}\n`);

  let watchdog: ChildProcess | undefined;
  if (opts.detached) {
    child.unref();
  } else {
    // If this process dies without calling stop() (a crash, a test runner's SIGKILL), the
    // watchdog takes the JVM down with it.
    watchdog = spawn(
      "/bin/sh",
      ["-c", 'while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done; kill -TERM "$2" 2>/dev/null; sleep 15; kill -KILL "$2" 2>/dev/null', "watchdog", String(process.pid), String(pid)],
      { detached: true, stdio: "ignore" },
    );
    watchdog.unref();
    process.once("exit", killNow);
  }
  function killNow(): void {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      /* already gone */
    }
  }

  let stopped = false;
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    process.removeListener("exit", killNow);
    // SIGKILL after 20 s; stopChild holds the event loop until the exit arrives (a detached JVM is unref'd)
    if (isAlive(pid)) await stopChild(child, "SIGTERM", 20_000);
    if (watchdog?.pid !== undefined) {
      try {
        process.kill(-watchdog.pid, "SIGKILL");
      } catch {
        /* already gone */
      }
    }
    rmSync(pidfile, { force: true });
    if (ownDir) rmSync(dir, { recursive: true, force: true });
  };

  const abandoned = new Promise<never>((_, reject) => {
    const abort = () => reject(new Error(`puppetserver on ${host}:${port}: no longer waited for (${String(opts.signal?.reason ?? "aborted")})`));
    if (opts.signal?.aborted) abort();
    else opts.signal?.addEventListener("abort", abort, { once: true });
  });
  abandoned.catch(() => undefined);
  let settled = false; // the wait below ends with the race, whoever wins it
  try {
    await Promise.race([waitReady(host, port, layout.caCertPath, opts.readyTimeoutMs ?? READY_TIMEOUT_MS, logfile, () => settled), exited, spawnError, abandoned]);
  } catch (e) {
    settled = true;
    await stop().catch(() => undefined);
    throw e;
  } finally {
    settled = true;
  }
  return {
    host,
    port,
    url: `https://${host}:${port}`,
    certname,
    dir,
    confdir: layout.confdir,
    cadir: layout.cadir,
    codedir: layout.codedir,
    ssldir: layout.ssldir,
    caCertPath: layout.caCertPath,
    hostCertPath: join(layout.ssldir, "certs", `${certname}.pem`),
    hostKeyPath: join(layout.ssldir, "private_keys", `${certname}.pem`),
    pid,
    pidfile,
    logfile,
    startMs: Date.now() - started,
    stop,
  };
}

function bootstrapFiles(): string[] {
  try {
    return readdirSync(BOOTSTRAP_DIR).filter((f) => f.endsWith(".cfg")).map((f) => join(BOOTSTRAP_DIR, f));
  } catch {
    return [];
  }
}

/** Stop a detached puppetserver by its directory (reads <dir>/run/puppetserver.pid). */
export async function stopDetachedPuppetserver(dir: string, timeoutMs = 20_000): Promise<boolean> {
  const pidfile = join(dir, "run", "puppetserver.pid");
  if (!existsSync(pidfile)) return false;
  const pid = Number(readFileSync(pidfile, "utf8").trim());
  rmSync(pidfile, { force: true });
  if (!Number.isInteger(pid) || pid <= 0 || !isAlive(pid)) return false;
  process.kill(pid, "SIGTERM");
  const deadline = Date.now() + timeoutMs;
  while (isAlive(pid) && Date.now() < deadline) await sleep(200); // no exit event for a non-child
  if (isAlive(pid)) process.kill(pid, "SIGKILL");
  return true;
}

async function waitReady(host: string, port: number, caCertPath: string, timeoutMs: number, logfile: string, over: () => boolean): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "not started";
  for (;;) {
    if (over()) return;
    if (existsSync(caCertPath)) {
      try {
        const body = await httpsGet(host, port, "/status/v1/simple", readFileSync(caCertPath));
        if (body.trim() === "running") return;
        last = `status: ${body.trim()}`;
      } catch (e) {
        last = (e as Error).message;
      }
    }
    if (Date.now() > deadline) throw new Error(`puppetserver on ${host}:${port} not ready after ${timeoutMs} ms (${last}); log tail:\n${tail(logfile)}`);
    await sleep(500); // polling an HTTP endpoint: the server offers no readiness event
  }
}

function httpsGet(host: string, port: number, path: string, ca: Buffer): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    const req = request({ host, port, path, method: "GET", ca, timeout: 5000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (body += c));
      res.on("end", () => (res.statusCode === 200 ? resolvePromise(body) : reject(new Error(`HTTP ${res.statusCode}: ${body.slice(0, 200)}`))));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", reject);
    req.end();
  });
}

function tail(file: string, bytes = 4000): string {
  try {
    const t = readFileSync(file, "utf8");
    return t.slice(-bytes);
  } catch {
    return "(no log)";
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
