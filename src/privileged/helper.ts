import { execFileSync } from "node:child_process";
import { chmodSync, chownSync, existsSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import type { Logger } from "pino";
import { resolveSettings as resolveProvisionSettings, puppetAgentFor as provisionPuppet } from "../agents/provision/state.js";
import { resolveSettings as resolvePuppetSettings, puppetAgentFor as puppetPuppet } from "../agents/puppet/settings.js";
import { ensureFileAllowed, ensureTypeAllowed, resolveResourceSettings } from "../agents/resource/settings.js";
import { nodePuppetOrDefaults } from "../agents/node.js";
import { MusterError, RpcError } from "../errors.js";
import { isManagedResource, readManagedResources } from "../puppet/resource.js";
import { PuppetAgent, readIniSection, updatePuppetConf, type PuppetAgentSettings } from "../puppet/index.js";
import { loadServerConfig, type ServerConfig } from "../server/config.js";
import { directOps, type NodeOps, type PuppetTarget, type PuppetUser } from "./node-ops.js";
import { MAX_REQUEST_BYTES, parseRequest, parseServer, peerAllowed, type Reply, type Request } from "./operations.js";
import { peerCredentials, type PeerCredentials } from "./peer.js";

// The privileged helper (docs/decisions/privileged-helper.md): root's side of the node daemon's
// operations. Per connection: the peer's uid from the kernel (SO_PEERCRED), one request line
// checked against the list (operations.ts), settings read now from root's server config (never
// from the request), the operation's own rules below, then the same code a root daemon runs
// (directOps). One reply line, and the connection closes. Every request is logged with its peer.

/** A request the helper will not do: nothing was done, and the reply says which rule refused it. */
export class Refusal extends Error {}

export interface HelperOptions {
  /** Root's /etc/muster/server.yaml: the agents' settings, read for every request. */
  configPath: string;
  /** The one uid served (the muster user's). */
  clientUid: number;
  log: Logger;
  /** How operations run once allowed (default: directOps, as root). */
  ops?: NodeOps;
  peer?: (s: Socket) => Promise<PeerCredentials>;
  /** Stop after this long with no connection (RunningHelper.idle); 0 or absent: never. */
  idleMs?: number;
}

/** The node's settings as the helper sees them: what root's config says, for this request. */
interface View {
  cfg: ServerConfig;
  agents: Set<string>;
}

function view(configPath: string): View {
  const cfg = loadServerConfig(configPath);
  const agents = new Set(cfg.agents.builtin ?? []);
  if (cfg.provisioning) agents.add("provision");
  return { cfg, agents };
}

function requireAgent(v: View, agent: string): void {
  if (!v.agents.has(agent)) throw new Refusal(`this node does not host the ${agent} agent (agents.builtin in its server config)`);
}

function target(v: View, agent: PuppetUser): PuppetTarget {
  requireAgent(v, agent);
  const plugins = v.cfg.plugins;
  const settings: PuppetAgentSettings =
    agent === "provision" ? provisionPuppet(resolveProvisionSettings(plugins.provision ?? {}, v.cfg.identity)).settings : puppetPuppet(resolvePuppetSettings(plugins.puppet ?? {}, v.cfg.identity)).settings;
  return { agent, settings };
}

/** Where puppet.conf [main] (and, with use_hosts_file, the hosts file) points Puppet now. */
function configuredMaster(agent: PuppetAgent, useHostsFile: boolean, hostsFile: string): { host: string | undefined; port: string | undefined } {
  const conf = existsSync(agent.puppetConfPath) ? readIniSection(readFileSync(agent.puppetConfPath, "utf8"), "main") : {};
  let host = conf.server;
  if (useHostsFile && host === "puppet") {
    const line = (existsSync(hostsFile) ? readFileSync(hostsFile, "utf8") : "").split("\n").find((l) => l.replace(/#.*/, "").trim().split(/\s+/).slice(1).includes("puppet"));
    host = line?.trim().split(/\s+/)[0];
  }
  return { host, port: conf.serverport };
}

/**
 * Puppet keeps the state the daemon reads (its state directory, the classes file, the managed
 * resources, the last run's summary) root's alone on Debian (0750 and 0640). Metadata on those
 * settings in puppet.conf (Puppet's own mechanism: it applies the mode whenever it writes them)
 * makes them readable, as MCollective's agents could read them. Settings the operator set in
 * [main] or [agent] are left as they are.
 */
export const READABLE_STATE: Record<string, string> = {
  statedir: "$vardir/state { mode = 0755 }",
  classfile: "$statedir/classes.txt { mode = 0644 }",
  resourcefile: "$statedir/resources.txt { mode = 0644 }",
  lastrunfile: "$publicdir/last_run_summary.yaml { mode = 0644 }",
};

function shareReadableState(puppetConf: string): void {
  const text = existsSync(puppetConf) ? readFileSync(puppetConf, "utf8") : "";
  const set = { ...readIniSection(text, "main"), ...readIniSection(text, "agent") };
  const missing = Object.fromEntries(Object.entries(READABLE_STATE).filter(([k]) => set[k] === undefined));
  if (Object.keys(missing).length) updatePuppetConf(puppetConf, "main", missing);
}

/** The operation's own rules, then the operation. `signal`: the peer hung up. */
export async function perform(req: Request, o: { configPath: string; ops: NodeOps; signal: AbortSignal }): Promise<unknown> {
  const v = view(o.configPath);
  const { ops, signal } = o;
  const plugins = v.cfg.plugins;
  switch (req.op) {
    case "puppet.run": {
      const a = req.args;
      const t = target(v, a.agent);
      const settings = a.agent === "provision" ? resolveProvisionSettings(plugins.provision ?? {}, v.cfg.identity) : resolvePuppetSettings(plugins.puppet ?? {}, v.cfg.identity);
      if (a.server !== undefined) {
        if (a.agent !== "puppet" || !resolvePuppetSettings(plugins.puppet ?? {}, v.cfg.identity).allowServerOverride) {
          throw new Refusal(`a Puppet master other than the configured one (${a.server}): plugins.puppet.allow_server_override is not set in ${o.configPath}`);
        }
        if (!parseServer(a.server)) throw new Refusal(`server ${JSON.stringify(a.server)} is not host[:port]`);
      }
      return ops.puppetRun(t, { ...a, signal, timeoutMs: settings.runTimeoutSeconds * 1000 });
    }
    case "puppet.daemonize":
      return ops.puppetDaemonize(target(v, req.args.agent));
    case "puppet.disable":
      return ops.puppetDisable(target(v, req.args.agent), req.args.message);
    case "puppet.enable":
      return ops.puppetEnable(target(v, req.args.agent));
    case "puppet.cert_status": {
      const r = await ops.certStatus(target(v, "provision"), { download: req.args.download, signal });
      return { hasCert: r.hasCert, certFingerprint: r.certFingerprint ?? null, csrFingerprint: r.csrFingerprint ?? null };
    }
    case "puppet.request_certificate":
      return ops.requestCertificate(target(v, "provision"), { ...(req.args.node_key ? { nodeKey: req.args.node_key } : {}), signal });
    case "puppet.set_server": {
      const t = target(v, "provision");
      const s = resolveProvisionSettings(plugins.provision ?? {}, v.cfg.identity);
      const agent = new PuppetAgent(t.settings);
      // Provisioning points Puppet at the master the provisioner chose. Once the node holds its
      // certificate, that master is the one it trusts: a change takes root on the node.
      if (agent.hasCert()) {
        const now = configuredMaster(agent, s.useHostsFile, s.hostsFile);
        if (now.host !== req.args.host || (req.args.port !== undefined && String(req.args.port) !== now.port)) {
          throw new Refusal(`the node holds its Puppet certificate (${agent.certPath}) and its master is set (${now.host ?? "none"}${now.port ? `:${now.port}` : ""}); pointing it at ${req.args.host} takes root on the node`);
        }
      }
      const r = await ops.setPuppetServer(t, { host: req.args.host, ...(req.args.port !== undefined ? { port: req.args.port } : {}), useHostsFile: s.useHostsFile, hostsFile: s.hostsFile });
      shareReadableState(agent.puppetConfPath);
      return r;
    }
    case "puppet.tls_credential": {
      if (!v.cfg.tls?.use_puppet_cert) throw new Refusal(`tls.use_puppet_cert is not set in ${o.configPath}: the node does not connect with its Puppet certificate`);
      const settings = await nodePuppetOrDefaults({ identity: v.cfg.identity, plugins, builtin: v.cfg.agents.builtin, provisioning: !!v.cfg.provisioning });
      return ops.tlsCredential({ agent: "provision", settings });
    }
    case "puppet.resource": {
      requireAgent(v, "resource");
      const { type, name, properties } = req.args;
      const s = resolveResourceSettings(plugins.resource ?? {});
      try {
        ensureTypeAllowed(s, type);
        ensureFileAllowed(
          s,
          type,
          name,
          properties.map(([k]) => k),
        );
      } catch (e) {
        throw new Refusal((e as Error).message);
      }
      if (properties.length > 0 && !s.allowManaged && isManagedResource(readManagedResources(s.resourcesFile), type, name)) {
        throw new Refusal(`${type}[${name}] is managed by this node's Puppet catalog (${s.resourcesFile}); plugins.resource.allow_managed is not set`);
      }
      return ops.puppetResource({ puppetBin: s.puppetBin, confdir: s.confdir, vardir: s.vardir, type, name, properties, signal, timeoutMs: s.timeoutMs });
    }
    case "provision.persist_stage": {
      requireAgent(v, "provision");
      const s = resolveProvisionSettings(plugins.provision ?? {}, v.cfg.identity);
      return { changed: await ops.persistStage(s.stageFactFile, s.stageFact) };
    }
  }
}

/** A refusal or failure as a reply line. */
function failure(e: unknown): Reply {
  if (e instanceof Refusal) return { ok: false, refused: true, code: "MUSTER_PRIVILEGED_REFUSED", error: e.message };
  if (e instanceof MusterError) return { ok: false, refused: false, code: e.code, error: e.message };
  // a bad setting in root's config (the agents' readers throw RpcError) is the operator's to fix
  if (e instanceof RpcError) return { ok: false, refused: false, code: "MUSTER_CONFIG_INVALID", error: e.message };
  return { ok: false, refused: false, code: "MUSTER_PUPPET_FAILED", error: e instanceof Error ? e.message : String(e) };
}

export interface RunningHelper {
  server: Server;
  /** Stop taking connections and wait for the operations in flight. */
  close(): Promise<void>;
  /**
   * With `idleMs`: resolves once no connection has been open for that long, after it has stopped
   * taking connections (socket-activated, the next one starts it again); never without.
   */
  idle: Promise<void>;
}

/** Serve on `listen`: a path, or the listening socket systemd passed (fd 3). */
export function serveHelper(listen: { path: string; group?: number } | { fd: number }, opts: HelperOptions): Promise<RunningHelper> {
  const ops = opts.ops ?? directOps();
  const peerOf = opts.peer ?? ((s: Socket) => peerCredentials(s));
  const inFlight = new Set<Promise<void>>();
  // Idle exit: the timer runs only while nothing is in flight. Its callback and the accept of a new
  // connection run on one thread, so a connection is either counted or left in the listen queue
  // for systemd to start the next helper with.
  let idleTimer: NodeJS.Timeout | undefined;
  let becameIdle: () => void = () => undefined;
  const idle = new Promise<void>((res) => (becameIdle = res));
  // A puppet agent daemon it started lives in its cgroup and would stop with it: then it stays.
  let daemonStarted = false;
  const armIdle = () => {
    if (!opts.idleMs || inFlight.size || daemonStarted) return;
    clearTimeout(idleTimer);
    idleTimer = setTimeout(() => {
      if (inFlight.size) return;
      server.close();
      becameIdle();
    }, opts.idleMs);
  };
  const server = createServer({ pauseOnConnect: true }, (sock) => {
    clearTimeout(idleTimer);
    const p = handle(sock).finally(() => {
      inFlight.delete(p);
      armIdle();
    });
    inFlight.add(p);
  });

  async function handle(sock: Socket): Promise<void> {
    // Settles once the connection is gone, however it went (a peer may hang up first).
    const closed = new Promise<void>((res) => sock.once("close", () => res()));
    const reply = (r: Reply) => {
      if (sock.destroyed) return Promise.resolve();
      sock.end(`${JSON.stringify(r)}\n`);
      sock.resume(); // read (and drop) what the peer still sends, up to its close: else it never comes
      sock.setTimeout(5_000, () => sock.destroy()); // a peer that never hangs up
      return closed;
    };
    sock.on("error", () => undefined); // a peer that hung up: the operation is aborted below
    let peer: PeerCredentials;
    try {
      peer = await peerOf(sock);
    } catch (e) {
      opts.log.error({ err: (e as Error).message }, "refused a connection: cannot tell who it is");
      return reply({ ok: false, refused: true, code: "MUSTER_PRIVILEGED_REFUSED", error: "the helper cannot tell who you are" });
    }
    if (!peerAllowed(peer.uid, opts.clientUid)) {
      opts.log.warn({ peer }, "refused a connection from a user the helper does not serve");
      return reply({ ok: false, refused: true, code: "MUSTER_PRIVILEGED_REFUSED", error: `uid ${peer.uid} may not use this helper (it serves uid ${opts.clientUid})` });
    }
    // A peer that connects and says nothing holds nothing for long.
    sock.setTimeout(30_000, () => sock.destroy());
    const line = await readLine(sock);
    sock.setTimeout(0);
    if (line === undefined) return reply({ ok: false, refused: true, code: "MUSTER_PRIVILEGED_REFUSED", error: `no request line of at most ${MAX_REQUEST_BYTES} bytes` });
    const parsed = parseRequest(line);
    if (!parsed.ok) {
      opts.log.warn({ peer, error: parsed.error }, "refused a request outside the helper's list");
      return reply({ ok: false, refused: true, code: "MUSTER_PRIVILEGED_REFUSED", error: parsed.error });
    }
    const abort = new AbortController();
    const onClose = () => abort.abort();
    sock.once("close", onClose);
    const started = Date.now();
    try {
      const result = await perform(parsed.request, { configPath: opts.configPath, ops, signal: abort.signal });
      if (parsed.request.op === "puppet.daemonize") daemonStarted = true;
      opts.log.info({ peer: peer.pid, op: parsed.request.op, ms: Date.now() - started }, "done");
      await reply({ ok: true, result: result ?? null });
    } catch (e) {
      const r = failure(e);
      opts.log[r.ok || !r.refused ? "error" : "warn"]({ peer: peer.pid, op: parsed.request.op, error: r.ok ? undefined : r.error }, r.ok || !r.refused ? "failed" : "refused");
      await reply(r);
    } finally {
      sock.off("close", onClose);
    }
  }

  return new Promise((resolve, reject) => {
    server.once("error", reject);
    const ready = () => {
      server.off("error", reject);
      armIdle();
      resolve({
        server,
        idle,
        async close() {
          clearTimeout(idleTimer);
          if (server.listening) await new Promise<void>((res) => server.close(() => res()));
          await Promise.allSettled([...inFlight]);
        },
      });
    };
    if ("fd" in listen) server.listen({ fd: listen.fd }, ready);
    else {
      rmSync(listen.path, { force: true });
      server.listen(listen.path, () => {
        // As the socket unit makes it: root and the client's group may connect, nobody else.
        if (listen.group !== undefined) chownSync(listen.path, 0, listen.group);
        chmodSync(listen.path, 0o660);
        ready();
      });
    }
  });
}

/** One `\n`-terminated line of at most MAX_REQUEST_BYTES, or undefined. */
function readLine(sock: Socket): Promise<string | undefined> {
  return new Promise((resolve) => {
    let buf = Buffer.alloc(0);
    const finish = (v: string | undefined) => {
      sock.off("data", onData);
      sock.off("end", onEnd);
      sock.off("close", onEnd);
      sock.pause();
      resolve(v);
    };
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const nl = buf.indexOf(10);
      if (nl >= 0 && nl <= MAX_REQUEST_BYTES) return finish(buf.subarray(0, nl).toString("utf8"));
      if (buf.length > MAX_REQUEST_BYTES) finish(undefined);
    };
    const onEnd = () => finish(undefined);
    sock.on("data", onData);
    sock.once("end", onEnd);
    sock.once("close", onEnd);
    sock.resume();
  });
}

/** A user name or uid as `{uid, gid}` (getent passwd; a bare number is taken as it is). */
export function resolveUser(user: string): { uid: number; gid: number | undefined } {
  try {
    const line = execFileSync("getent", ["passwd", user], { encoding: "utf8" }).trim().split("\n")[0]!;
    const [, , uid, gid] = line.split(":");
    return { uid: Number(uid), gid: Number(gid) };
  } catch {
    if (/^\d+$/.test(user)) return { uid: Number(user), gid: undefined };
    throw new MusterError("MUSTER_USAGE", `--client-user ${user}: no such user (the package's postinst makes \`muster\`)`);
  }
}
