import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createConnection } from "node:net";
import { freePort } from "./ports.js";
import { stopChild, watchdog } from "./processes.js";

export interface NatsHandle {
  url: string;
  port: number;
  host: string;
  dir: string;
  pid: number;
  /** Where clients find the CA when TLS is on. */
  tls?: NatsTls;
  /**
   * Re-read nats.conf (SIGHUP): TLS files and users change without dropping connections. Resolves
   * once nats-server says it reloaded (a client connecting before that meets the old users).
   */
  reload(config?: string): Promise<void>;
  /** What nats-server has logged so far (its last megabyte; detached: see <dir>/nats.log). */
  log(): string;
  stop(): Promise<void>;
}

export interface NatsTls {
  cert: string;
  key: string;
  /** CA bundle for client certificates (and what clients verify the server with, when it signed it). */
  ca: string;
  /** Client certificates: none asked for, required, or required and mapped to users (verify_and_map). */
  clients?: "optional" | "verify" | "map";
}

export interface StartNatsOptions {
  host?: string;
  /** Extra nats-server config text appended to the generated file. */
  config?: string;
  jetstream?: boolean;
  /** Keep state here (kept on stop) instead of a temp dir (removed on stop). */
  dir?: string;
  /** Outlive this process (the lab): logs to <dir>/nats.log, pid in <dir>/nats.pid. */
  detached?: boolean;
  port?: number;
  /** TLS on the client port. */
  tls?: NatsTls;
}

export function tlsBlock(t: NatsTls): string {
  const verify = t.clients === "map" ? "verify_and_map: true\n" : t.clients === "verify" ? "verify: true\n" : "";
  return `tls {\n  cert_file: ${JSON.stringify(t.cert)}\n  key_file: ${JSON.stringify(t.key)}\n  ca_file: ${JSON.stringify(t.ca)}\n  ${verify}  timeout: 5\n}\n`;
}

const RELOAD_WAIT_MS = 10_000;
const readLog = (file: string) => {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return "";
  }
};

/** Start a real nats-server (JetStream on) on a free loopback port. Always pair with stop(). */
export async function startNats(opts: StartNatsOptions = {}): Promise<NatsHandle> {
  const host = opts.host ?? "127.0.0.1";
  const port = opts.port ?? (await freePort(host));
  const ownDir = !opts.dir;
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), "muster-nats-"));
  mkdirSync(dir, { recursive: true });
  const conf = join(dir, "nats.conf");
  const js = opts.jetstream === false ? "" : `jetstream { store_dir: "${join(dir, "js")}" }\n`;
  const render = (extra: string | undefined) => `listen: "${host}:${port}"\nmax_payload: 4MB\n${js}${opts.tls ? tlsBlock(opts.tls) : ""}${extra ?? ""}\n`;
  writeFileSync(conf, render(opts.config));
  let child: ChildProcess;
  try {
    if (opts.detached) {
      const out = openSync(join(dir, "nats.log"), "a");
      child = spawn("nats-server", ["-c", conf], { detached: true, stdio: ["ignore", out, out] });
      closeSync(out);
    } else child = spawn("nats-server", ["-c", conf], { stdio: ["ignore", "ignore", "pipe"] });
  } catch (e) {
    throw new Error(`cannot start nats-server (apt-get install nats-server): ${String(e)}`);
  }
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-(1 << 20))));
  const exited = new Promise<never>((_, reject) => {
    child.once("error", (e) => reject(new Error(`nats-server failed to start (is it installed? apt-get install nats-server): ${e.message}`)));
    child.once("exit", (code) => reject(new Error(`nats-server exited early with ${code}: ${stderr.slice(-2000)}`)));
  });
  exited.catch(() => undefined);
  try {
    await Promise.race([waitForPort(host, port, 10_000), exited]);
  } catch (e) {
    // one that never listened is stopped, not left holding its port (nothing else knows of it)
    if (child.pid !== undefined) await stopChild(child, "SIGKILL", 0);
    if (ownDir) rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  const pid = child.pid ?? -1;
  writeFileSync(join(dir, "nats.pid"), `${pid}\n`);
  let endWatchdog: (() => void) | undefined;
  if (opts.detached) child.unref();
  else endWatchdog = watchdog(pid); // dies with us even if we crash before stop(): no broker left holding a port
  let stopped = false;
  return {
    url: `nats://${host}:${port}`,
    port,
    host,
    dir,
    pid,
    tls: opts.tls,
    async reload(config?: string) {
      if (config !== undefined) writeFileSync(conf, render(config));
      const logText = () => (opts.detached ? readLog(join(dir, "nats.log")) : stderr);
      const said = () => logText().match(/Reloaded server configuration|Failed to reload|config reload failed/gi) ?? [];
      const before = said().length;
      process.kill(pid, "SIGHUP");
      const giveUp = Date.now() + RELOAD_WAIT_MS;
      for (;;) {
        const now = said().slice(before);
        if (now.some((l) => /^Reloaded/i.test(l))) return;
        if (now.length) throw new Error(`nats-server did not reload ${conf}: ${logText().slice(-1000)}`);
        if (Date.now() > giveUp) throw new Error(`nats-server did not say it reloaded ${conf} within ${RELOAD_WAIT_MS / 1000} s`);
        await new Promise((r) => setTimeout(r, 50)); // polling its log for the line, with the deadline above
      }
    },
    log: () => stderr,
    async stop() {
      if (stopped) return;
      stopped = true;
      await stopChild(child, "SIGTERM", 5000);
      endWatchdog?.();
      if (ownDir) rmSync(dir, { recursive: true, force: true });
    },
  };
}

export async function waitForPort(host: string, port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = createConnection({ host, port });
      s.once("connect", () => {
        s.destroy();
        resolve(true);
      });
      s.once("error", () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`nothing listens on ${host}:${port} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50)); // polling a port, not synchronising on an event we could subscribe to
  }
}
