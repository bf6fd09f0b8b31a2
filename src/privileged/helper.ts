import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import { existsSync, lstatSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { createServer, type Server, type Socket } from "node:net";
import type { Logger } from "pino";
import type { NodeOps, PuppetTarget, PuppetUser } from "../agent/node-ops.js";
import { MusterError, RpcError } from "../errors.js";
import { PuppetAgent, type PuppetAgentSettings } from "../puppet/agent.js";
import { puppetCodeDirs, puppetSettings, type PuppetInvocation } from "../puppet/code-dirs.js";
import { readIniSection, updatePuppetConf } from "../puppet/conf.js";
import { packageState } from "../puppet/dpkg.js";
import { directOps } from "../puppet/node-ops.js";
import { isManagedResource, readManagedResources } from "../puppet/resource.js";
import { directoryRefusal, packageChangeRefusal, resourceRefusal } from "../puppet/resource-rule.js";
import { rootCodeRefusal } from "../puppet/root-code.js";
import { parseServer } from "../puppet/server-address.js";
import { Semaphore } from "../semaphore.js";
import { MAX_REQUEST_BYTES, parseRequest, peerAllowed, type Reply, type Request } from "./operations.js";
import { pathRefusal } from "./paths.js";
import { peerCredentials, type PeerCredentials } from "./peer.js";
import type { NodeSettings, NodeSettingsReader, ResourceSettingsView } from "./settings.js";

// The privileged helper (docs/decisions/privileged-helper.md): root's side of the node daemon's
// operations. Per connection: a free slot (at most maxConnections at once), the peer's uid from
// the kernel (SO_PEERCRED), one request line read within a deadline and checked against the list
// (operations.ts), settings read now from root's server config (never from the request), the
// operation's own rules below, then the same code a root daemon runs (directOps), one Puppet
// process acting at a time (reads, one more beside it). One reply line, and the connection
// closes. Every request is logged with its peer and its arguments (secrets left out).

/** A request the helper will not do: nothing was done, and the reply says which rule refused it. */
export class Refusal extends Error {}

/** Connections served at once; more are told the helper is busy and closed at once. */
export const MAX_CONNECTIONS = 16;
/** How long a peer has to send its whole request line. */
export const READ_TIMEOUT_MS = 30_000;

export interface HelperOptions {
  /** Root's server config as the helper reads it, afresh for every request. */
  settings: NodeSettingsReader;
  /** The one uid served (the muster user's). */
  clientUid: number;
  log: Logger;
  /** How operations run once allowed (default: directOps, as root). */
  ops?: NodeOps;
  peer?: (s: Socket) => Promise<PeerCredentials>;
  /** Stop after this long with no connection (RunningHelper.idle); 0 or absent: never. */
  idleMs?: number;
  maxConnections?: number;
  readTimeoutMs?: number;
}

function requireAgent(v: NodeSettings, agent: string): void {
  if (!v.agents.has(agent)) throw new Refusal(`this node does not host the ${agent} agent (agents.builtin in ${v.source})`);
}

function target(v: NodeSettings, agent: PuppetUser): PuppetTarget {
  requireAgent(v, agent);
  return { agent, settings: v.puppet(agent).settings };
}

/** Where puppet.conf [main] (and, with use_hosts_file, the hosts file) points Puppet now. */
function configuredMaster(agent: PuppetAgent, useHostsFile: boolean, hostsFile: string): { host: string | undefined; port: number } {
  const conf = existsSync(agent.puppetConfPath) ? readIniSection(readFileSync(agent.puppetConfPath, "utf8"), "main") : {};
  let host = conf.server;
  if (useHostsFile && host === "puppet") {
    const line = (existsSync(hostsFile) ? readFileSync(hostsFile, "utf8") : "").split("\n").find((l) => l.replace(/#.*/, "").trim().split(/\s+/).slice(1).includes("puppet"));
    host = line?.trim().split(/\s+/)[0];
  }
  // Puppet's own default when puppet.conf names none
  return { host, port: conf.serverport ? Number(conf.serverport) : 8140 };
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

export interface PerformOptions {
  settings: NodeSettingsReader;
  ops: NodeOps;
  /** The peer hung up: stop. */
  signal: AbortSignal;
  /** One Puppet process at a time: an operation that runs one waits for its turn here. */
  puppet: Semaphore;
  /** Reads (facts, state: a Puppet or Facter process too) have a slot of their own: a long run does not hold up discovery. */
  reads: Semaphore;
}

/** Runs `fn` once it holds `slot` (or gives up when the peer hangs up while it waits). */
async function inTurn<T>(slot: Semaphore, signal: AbortSignal, fn: () => Promise<T>): Promise<T> {
  await slot.acquire(signal);
  try {
    return await fn();
  } finally {
    slot.release();
  }
}

/**
 * The resource rule, the walk of a file's directories, what a directory may become, and whether
 * the catalog manages it: everything about a `puppet.resource` request the helper can check at
 * once, without a process. Returns whether the catalog manages the resource.
 */
function resourceChecks(s: ResourceSettingsView, type: string, name: string, properties: [string, string][]): boolean {
  const refused = resourceRefusal(s, type, name, properties);
  if (refused) throw new Refusal(refused.message);
  if (type === "file") {
    // the rule put the path under one of them; now make sure nobody but root can move it
    const path = name.length > 1 ? name.replace(/\/+$/, "") : name;
    const dir = s.filePaths!.find((d) => name.startsWith(`${d}/`))!;
    const unsafe = pathRefusal(path, dir);
    if (unsafe) throw new Refusal(`file ${name}: ${unsafe}`);
    const now = lstatOrUndefined(path);
    const tree = directoryRefusal(name, properties, now?.isDirectory() ? { mode: now.mode } : undefined);
    if (tree) throw new Refusal(tree.message);
  }
  const managed = isManagedResource(readManagedResources(s.resourcesFile), type, name);
  if (properties.length > 0 && !s.allowManaged && managed) {
    throw new Refusal(`${type}[${name}] is managed by this node's Puppet catalog (${s.resourcesFile}); plugins.resource.allow_managed is not set`);
  }
  return managed;
}

function lstatOrUndefined(p: string) {
  try {
    return lstatSync(p);
  } catch {
    return undefined;
  }
}

/**
 * Every way the node runs Puppet as root, for where each loads code from: `puppet resource`, the
 * puppet and provision agents' runs, the facts, and Puppet's own defaults (puppet.service).
 */
function puppetInvocations(v: NodeSettings, s: ResourceSettingsView): PuppetInvocation[] {
  const ofAgent = (a: PuppetAgentSettings): PuppetInvocation => ({ puppetBin: a.puppetBin ?? "puppet", args: new PuppetAgent(a).commonArgs(), ...(a.env ? { env: a.env } : {}) });
  return [
    { puppetBin: s.puppetBin, args: ["--confdir", s.confdir, "--vardir", s.vardir] },
    ofAgent(v.puppet("puppet").settings),
    ofAgent(v.puppet("provision").settings),
    { puppetBin: s.puppetBin, args: [] },
  ];
}

/**
 * The certificate Puppet itself holds, by its own settings: certname and ssldir as `puppet config
 * print` resolves them with this confdir (puppet.conf may name others than muster's), or undefined.
 */
async function puppetOwnCertificate(a: PuppetAgentSettings, signal: AbortSignal): Promise<string | undefined> {
  const own = await puppetSettings({ puppetBin: a.puppetBin ?? "puppet", args: ["--confdir", a.confdir], ...(a.env ? { env: a.env } : {}) }, { signal });
  const cert = join(own.ssldir!, "certs", `${own.certname}.pem`);
  return existsSync(cert) ? cert : undefined;
}

/** The operation's own rules, then the operation. */
export async function perform(req: Request, o: PerformOptions): Promise<unknown> {
  const v = o.settings();
  const { ops, signal } = o;
  switch (req.op) {
    case "puppet.run": {
      const a = req.args;
      const t = target(v, a.agent);
      const p = v.puppet(a.agent);
      if (a.server !== undefined) {
        if (a.agent !== "puppet" || !p.allowServerOverride) throw new Refusal(`a Puppet master other than the configured one (${a.server}): plugins.puppet.allow_server_override is not set in ${v.source}`);
        if (!parseServer(a.server)) throw new Refusal(`server ${JSON.stringify(a.server)} is not host[:port]`);
      }
      return inTurn(o.puppet, signal, () => ops.puppetRun(t, { ...a, signal, timeoutMs: p.runTimeoutMs }));
    }
    case "puppet.daemonize": {
      const t = target(v, req.args.agent);
      return inTurn(o.puppet, signal, () => ops.puppetDaemonize(t));
    }
    case "puppet.disable":
      return ops.puppetDisable(target(v, req.args.agent), req.args.message);
    case "puppet.enable":
      return ops.puppetEnable(target(v, req.args.agent));
    case "puppet.cert_status": {
      const t = target(v, "provision");
      const r = await inTurn(o.puppet, signal, () => ops.certStatus(t, { download: req.args.download, signal }));
      return { hasCert: r.hasCert, certFingerprint: r.certFingerprint ?? null, csrFingerprint: r.csrFingerprint ?? null };
    }
    case "puppet.request_certificate": {
      const t = target(v, "provision");
      return inTurn(o.puppet, signal, () => ops.requestCertificate(t, { ...(req.args.node_key ? { nodeKey: req.args.node_key } : {}), signal }));
    }
    case "puppet.set_server": {
      const t = target(v, "provision");
      const s = v.provision();
      const agent = new PuppetAgent(t.settings);
      // Provisioning points Puppet at the master the provisioner chose. Once the node holds its
      // certificate, that master is the one it trusts: only it, on its port, is accepted, and
      // nothing is written (server_list and the rest of puppet.conf stay as they are). Certified
      // by muster's settings or by Puppet's own: puppet.conf may name another certname or ssldir,
      // and the agent Puppet runs by itself (puppet.service) goes by those.
      const cert = agent.hasCert() ? agent.certPath : await inTurn(o.reads, signal, () => puppetOwnCertificate(t.settings, signal));
      if (cert) {
        const now = configuredMaster(agent, s.useHostsFile, s.hostsFile);
        const port = req.args.port ?? 8140;
        if (now.host !== req.args.host || port !== now.port) {
          throw new Refusal(`the node holds its Puppet certificate (${cert}) and its master is ${now.host ?? "not set"}:${now.port}; pointing it at ${req.args.host}:${port} would take root on the node`);
        }
        shareReadableState(agent.puppetConfPath);
        return { server: s.useHostsFile ? "puppet" : now.host, puppetConf: agent.puppetConfPath, hostsFile: s.useHostsFile ? s.hostsFile : null, unchanged: true };
      }
      const r = await ops.setPuppetServer(t, { host: req.args.host, ...(req.args.port !== undefined ? { port: req.args.port } : {}), useHostsFile: s.useHostsFile, hostsFile: s.hostsFile });
      shareReadableState(agent.puppetConfPath);
      return r;
    }
    case "puppet.tls_credential": {
      if (!v.usePuppetCert) throw new Refusal(`tls.use_puppet_cert is not set in ${v.source}: the node does not connect with its Puppet certificate`);
      return ops.tlsCredential({ agent: "provision", settings: await v.nodePuppet() });
    }
    case "puppet.resource": {
      requireAgent(v, "resource");
      const { type, name, properties } = req.args;
      const s = v.resource();
      // On arrival, for an early answer; then again in its turn, just before Puppet starts: a
      // request waits behind others, and what they did (or root did) meanwhile counts, not what
      // was there when it came.
      resourceChecks(s, type, name, properties);
      return inTurn(o.puppet, signal, async () => {
        if (type === "file") {
          // where root's Puppet and Facter load code from, as Puppet itself reports it now
          const code = rootCodeRefusal(name.length > 1 ? name.replace(/\/+$/, "") : name, s.filePaths!, await puppetCodeDirs(puppetInvocations(v, s), { signal }));
          if (code) throw new Refusal(`file ${name}: ${code}`);
        }
        const ensure = properties.find(([k]) => k === "ensure")?.[1];
        if (type === "package" && ensure !== undefined) {
          const refused = packageChangeRefusal(name, ensure, await packageState(name, ensure));
          if (refused) throw new Refusal(refused.message);
        }
        // Synchronous from here to Puppet's start: the walk holds until root changes the tree, and
        // no other Puppet process of the helper's runs while this one holds the turn.
        const managed = resourceChecks(s, type, name, properties);
        const r = await ops.puppetResource({ puppetBin: s.puppetBin, confdir: s.confdir, vardir: s.vardir, type, name, properties, signal, timeoutMs: s.timeoutMs });
        return { ...r, managed };
      });
    }
    case "provision.persist_stage": {
      requireAgent(v, "provision");
      const s = v.provision();
      return { changed: await ops.persistStage(s.stageFactFile, s.stageFact) };
    }
    case "puppet.facts": {
      if (!v.facts.enabled) throw new Refusal(`facts.facter is off in ${v.source}: this node gathers no facts`);
      const t: PuppetTarget = { agent: "puppet", settings: await v.nodePuppet() };
      return inTurn(o.reads, signal, () => ops.nodeFacts(t, { facterCommand: v.facts.facterCommand }));
    }
    case "puppet.read_state": {
      const t = target(v, req.args.agent);
      return { text: await inTurn(o.reads, signal, () => ops.readPuppetState(t, req.args.file)) };
    }
    case "puppet.last_run_report":
      return ops.lastRunReport(target(v, req.args.agent));
  }
}

/** What the journal records of a request's arguments: secrets (a file's content, fact values) by size and digest only. */
export function loggedArgs(req: Request): Record<string, unknown> {
  const hidden = (v: string) => `<${Buffer.byteLength(v)} bytes, sha256 ${createHash("sha256").update(v).digest("hex").slice(0, 16)}>`;
  switch (req.op) {
    case "puppet.resource":
      return { ...req.args, properties: req.args.properties.map(([k, val]) => [k, k === "content" ? hidden(val) : val]) };
    case "puppet.run":
      return { ...req.args, ...(req.args.facts ? { facts: Object.fromEntries(Object.entries(req.args.facts).map(([k, val]) => [k, hidden(val)])) } : {}) };
    default:
      return { ...req.args };
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
  const maxConnections = opts.maxConnections ?? MAX_CONNECTIONS;
  const readTimeoutMs = opts.readTimeoutMs ?? READ_TIMEOUT_MS;
  const puppet = new Semaphore(1);
  const reads = new Semaphore(1);
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
  let refusedBusy = 0;
  const server = createServer({ pauseOnConnect: true }, (sock) => {
    clearTimeout(idleTimer);
    if (inFlight.size >= maxConnections) {
      // Before anything costs a process (the peer check runs one): a flood gets an answer, not a queue.
      sock.on("error", () => undefined);
      sock.end(`${JSON.stringify({ ok: false, refused: false, code: "MUSTER_PRIVILEGED_BUSY", error: `the privileged helper is serving ${maxConnections} connections, its limit: try again` } satisfies Reply)}\n`);
      sock.resume();
      const hangUp = setTimeout(() => sock.destroy(), 1_000);
      sock.once("close", () => clearTimeout(hangUp));
      if (refusedBusy++ % 100 === 0) opts.log.warn({ limit: maxConnections, refused: refusedBusy }, "refused a connection: at the connection limit");
      return;
    }
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
      // a peer that never hangs up, or keeps trickling bytes: gone 5 s after its answer, whatever it does
      const hangUp = setTimeout(() => sock.destroy(), 5_000);
      return closed.finally(() => clearTimeout(hangUp));
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
    // The whole line within the deadline, however slowly it trickles in.
    const line = await readLine(sock, readTimeoutMs);
    if (typeof line !== "string") {
      opts.log.warn({ peer: peer.pid, why: line.why }, "refused a request");
      return reply({ ok: false, refused: true, code: "MUSTER_PRIVILEGED_REFUSED", error: line.why });
    }
    const parsed = parseRequest(line);
    if (!parsed.ok) {
      opts.log.warn({ peer: peer.pid, error: parsed.error, bytes: Buffer.byteLength(line) }, "refused a request outside the helper's list");
      return reply({ ok: false, refused: true, code: "MUSTER_PRIVILEGED_REFUSED", error: parsed.error });
    }
    const { op } = parsed.request;
    const args = loggedArgs(parsed.request);
    const abort = new AbortController();
    const onClose = () => abort.abort();
    sock.once("close", onClose);
    const started = Date.now();
    opts.log.info({ peer: peer.pid, op, args }, "request");
    try {
      const result = await perform(parsed.request, { settings: opts.settings, ops, signal: abort.signal, puppet, reads });
      if (op === "puppet.daemonize") daemonStarted = true;
      opts.log.info({ peer: peer.pid, op, args, ms: Date.now() - started }, "done");
      await reply({ ok: true, result: result ?? null });
    } catch (e) {
      const r = failure(e);
      const refused = !r.ok && r.refused;
      opts.log[refused ? "warn" : "error"]({ peer: peer.pid, op, args, ms: Date.now() - started, error: r.ok ? undefined : r.error }, refused ? "refused" : "failed");
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
      // As the socket unit makes it: root and the client's group may connect, nobody else. The
      // socket is made with that owner and mode (umask 0117, the group as the effective gid while
      // it binds; Node.js binds within listen()), never changed by path afterwards: a chown or
      // chmod by path follows a link someone who may write the directory put there in between,
      // and Linux cannot change a socket file's mode through the listening descriptor.
      const umask = process.umask(0o117);
      const egid = process.getegid!();
      try {
        if (listen.group !== undefined) process.setegid!(listen.group);
        server.listen(listen.path, () => {
          const st = lstatSync(listen.path);
          const [uid, group] = [process.geteuid!(), listen.group ?? egid];
          if (!st.isSocket() || st.uid !== uid || st.gid !== group || (st.mode & 0o777) !== 0o660) {
            server.close();
            reject(new MusterError("MUSTER_USAGE", `${listen.path} came out ${st.isSocket() ? "a socket" : "not a socket"} owned ${st.uid}:${st.gid} mode ${(st.mode & 0o777).toString(8)}, not ${uid}:${group} 0660 (something replaced it, or a set-group-ID directory gave its own group): put the socket in a directory root owns`));
            return;
          }
          ready();
        });
      } finally {
        process.setegid!(egid);
        process.umask(umask);
      }
    }
  });
}

/** One `\n`-terminated line of at most MAX_REQUEST_BYTES, read within `deadlineMs`, or why not. */
function readLine(sock: Socket, deadlineMs: number): Promise<string | { why: string }> {
  return new Promise((resolve) => {
    let buf = Buffer.alloc(0);
    const finish = (v: string | { why: string }) => {
      clearTimeout(timer);
      sock.off("data", onData);
      sock.off("end", onEnd);
      sock.off("close", onEnd);
      sock.pause();
      resolve(v);
    };
    const timer = setTimeout(() => finish({ why: `no complete request line within ${Math.round(deadlineMs / 1000)} s` }), deadlineMs);
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const nl = buf.indexOf(10);
      if (nl >= 0 && nl <= MAX_REQUEST_BYTES) return finish(buf.subarray(0, nl).toString("utf8"));
      if (buf.length > MAX_REQUEST_BYTES) finish({ why: `request over ${MAX_REQUEST_BYTES} bytes` });
    };
    const onEnd = () => finish({ why: `no request line of at most ${MAX_REQUEST_BYTES} bytes` });
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
