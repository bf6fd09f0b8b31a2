import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createConnection } from "node:net";
import { freePort } from "./ports.js";

export interface NatsHandle {
  url: string;
  port: number;
  host: string;
  dir: string;
  stop(): Promise<void>;
}

export interface StartNatsOptions {
  host?: string;
  /** Extra nats-server config text appended to the generated file. */
  config?: string;
  jetstream?: boolean;
}

/** Start a real nats-server (JetStream on) on a free loopback port. Always pair with stop(). */
export async function startNats(opts: StartNatsOptions = {}): Promise<NatsHandle> {
  const host = opts.host ?? "127.0.0.1";
  const port = await freePort(host);
  const dir = mkdtempSync(join(tmpdir(), "muster-nats-"));
  const conf = join(dir, "nats.conf");
  const js = opts.jetstream === false ? "" : `jetstream { store_dir: "${join(dir, "js")}" }\n`;
  writeFileSync(conf, `listen: "${host}:${port}"\nmax_payload: 4MB\n${js}${opts.config ?? ""}\n`);
  let child: ChildProcess;
  try {
    child = spawn("nats-server", ["-c", conf], { stdio: ["ignore", "ignore", "pipe"] });
  } catch (e) {
    throw new Error(`cannot start nats-server (apt-get install nats-server): ${String(e)}`);
  }
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<never>((_, reject) => {
    child.once("error", (e) => reject(new Error(`nats-server failed to start (is it installed? apt-get install nats-server): ${e.message}`)));
    child.once("exit", (code) => reject(new Error(`nats-server exited early with ${code}: ${stderr.slice(-2000)}`)));
  });
  await Promise.race([waitForPort(host, port, 10_000), exited]);
  let stopped = false;
  return {
    url: `nats://${host}:${port}`,
    port,
    host,
    dir,
    async stop() {
      if (stopped) return;
      stopped = true;
      if (child.exitCode === null) {
        const gone = new Promise((r) => child.once("exit", r));
        child.kill("SIGTERM");
        const t = setTimeout(() => child.kill("SIGKILL"), 5000);
        await gone;
        clearTimeout(t);
      }
      rmSync(dir, { recursive: true, force: true });
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
