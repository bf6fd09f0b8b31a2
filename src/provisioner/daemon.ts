import { spawn } from "node:child_process";
import { existsSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import type { Logger } from "pino";
import { ServiceBeacon } from "../beacon.js";
import { MusterClient } from "../client/client.js";
import { resolveBrokerSettings } from "../config/client.js";
import { MusterError } from "../errors.js";
import { undeliverableTargets, type ProvisionerConfig } from "./config.js";
import { ProvisionerMetrics } from "./metrics.js";
import { MusterCollective } from "./muster-collective.js";
import { Provisioner } from "./scheduler.js";
import { provisionerStatus } from "./service.js";
import { VERSION } from "../version.js";
import { ProvisionState } from "./state.js";

// Process concerns of `muster provisioner`: detaching, pidfile, signals, metrics endpoint.

/** Re-run ourselves detached (daemonize: true); the parent returns the child's pid and exits. */
export function detach(argv: string[], cfg: ProvisionerConfig): number {
  const child = spawn(process.execPath, argv, { detached: true, stdio: "ignore", env: { ...process.env, MUSTER_DAEMONIZED: "1" } });
  child.unref();
  if (cfg.pidfile) writeFileSync(cfg.pidfile, `${child.pid}\n`);
  return child.pid ?? 0;
}

function claimPidfile(path: string): void {
  if (existsSync(path)) {
    const pid = Number(readFileSync(path, "utf8").trim());
    if (pid && pid !== process.pid) {
      try {
        process.kill(pid, 0);
        throw new MusterError("MUSTER_USAGE", `another provisioner runs with pid ${pid} (pidfile ${path}); stop it first`);
      } catch (e) {
        if (e instanceof MusterError) throw e; // ESRCH: a stale pidfile, ours to take
      }
    }
  }
  writeFileSync(path, `${process.pid}\n`);
}

export interface RunOptions {
  once: boolean;
  broker?: string;
}

export async function runProvisioner(cfg: ProvisionerConfig, log: Logger, opts: RunOptions): Promise<number> {
  if (cfg.pidfile) claimPidfile(cfg.pidfile);
  // With the notify step on these were refused when the config was read; off, they are unused.
  for (const problem of undeliverableTargets(cfg)) log.warn(`${problem}; unused while steps.notify is false`);
  const broker = resolveBrokerSettings({ flag: opts.broker, own: { file: "the provisioner config", brokers: cfg.broker === undefined ? undefined : Array.isArray(cfg.broker) ? cfg.broker : [cfg.broker], tls: cfg.tls } });
  // The daemon waits for its broker, saying so; --once fails fast like any command.
  const client = await MusterClient.connect({ brokers: broker.servers, from: broker.from, persistent: !opts.once, collective: cfg.collective, name: `muster-provisioner:${cfg.id}`, log, tls: broker.tls, keyBucket: false });
  // keyBucket false: the client still drops bad signatures, but whose key a reply must carry is the
  // runner's call (its pins): the directory it writes must not lock out a node being provisioned anew.
  const store = await ProvisionState.open(client, cfg.state_bucket, { replicas: cfg.state_replicas, onInvalid: (key, reason) => log.warn({ key, reason }, "the state bucket holds a value that is not a provisioning record; treated as no record") });
  const metrics = new ProvisionerMetrics();
  if (cfg.metrics) log.info({ url: `${await metrics.serve(cfg.metrics.host, cfg.metrics.port)}/metrics` }, "serving metrics");
  const p = new Provisioner(cfg, new MusterCollective(client, cfg, log), store, log, metrics);
  let code = 0;
  try {
    if (opts.once) {
      // One discovery cycle; provision what it found (and our own unfinished nodes), then exit.
      await p.runOnce();
      const recs = await store.list();
      const failed = recs.filter((r) => r.status === "failed").length;
      const waiting = recs.filter((r) => r.status === "in_progress" && r.masterWait && r.owner === cfg.id).length;
      const also = [failed ? `${failed} failed node(s)` : "", waiting ? `${waiting} node(s) waiting for a Puppet master (the daemon takes them up)` : ""].filter(Boolean);
      log.info({ failed, waiting }, `one cycle done (--once)${also.length ? `: ${also.join(", ")}, see muster provision status` : ""}`);
      code = failed ? 2 : 0;
    } else {
      // Handlers before the running line: a supervisor may stop us the moment it reads it.
      const stopping = new Promise<void>((resolve) => {
        process.once("SIGTERM", () => resolve());
        process.once("SIGINT", () => resolve());
      });
      await p.start();
      // one of the site's services: alive, its claims, its queue and last cycle (docs/fleet.md#the-sites-services)
      const beacon = new ServiceBeacon(client, { role: "provisioner", name: cfg.id, version: VERSION, log, status: () => provisionerStatus({ claims: p.claims(), ...(p.lastCycle ? { lastCycle: p.lastCycle } : {}), sleeptimeS: cfg.sleeptime, id: cfg.id }, Date.now()) });
      beacon.start();
      log.info({ id: cfg.id, concurrency: cfg.concurrency, per_master_limit: cfg.per_master_limit }, "provisioner running");
      await stopping;
      log.info("stopping: no new nodes; finishing or abandoning current steps");
      await p.stop();
      await beacon.stop();
    }
  } finally {
    await metrics.close();
    await client.close();
    if (cfg.pidfile) {
      try {
        if (readFileSync(cfg.pidfile, "utf8").trim() === String(process.pid)) unlinkSync(cfg.pidfile);
      } catch {
        // already gone
      }
    }
  }
  return code;
}
