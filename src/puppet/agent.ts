import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync, renameSync } from "node:fs";
import { dirname, join } from "node:path";
import { MusterError } from "../errors.js";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import { NODE_KEY_CSR_OID } from "../protocol/node-keys.js";
import { updatePuppetConf } from "./conf.js";
import { csrFingerprint, fingerprintOf, pemToDer } from "./csr.js";
import { execCommand, tailLines, type ExecResult } from "./exec.js";
import { parseRunOutput, readRunReport, type FailedResource } from "./report.js";

// One node's Puppet agent, driven through the real `puppet` binary with every directory given
// explicitly, so many nodes can share a machine (tests, the lab, the emulator) and nothing
// touches /etc/puppet unless the settings say so.

export interface PuppetAgentSettings {
  /** Default "puppet". */
  puppetBin?: string;
  confdir: string;
  vardir: string;
  ssldir: string;
  certname: string;
  /** Passed as --server / --serverport when set; otherwise puppet.conf decides. */
  server?: string;
  serverport?: number;
  /** Default <vardir>/log, <vardir>/run, <vardir>/public. */
  logdir?: string;
  rundir?: string;
  publicdir?: string;
  /** Extra environment for every puppet command. */
  env?: Record<string, string>;
}

export interface PuppetRunOptions {
  environment?: string;
  /** Extra facts, passed as FACTER_<name> environment variables. */
  facts?: Record<string, string>;
  /** --noop / --no-noop; undefined leaves it to puppet.conf's noop setting. */
  noop?: boolean;
  tags?: string[];
  signal?: AbortSignal;
  /** Default 30 minutes. */
  timeoutMs?: number;
}

export interface PuppetRunResult {
  /** puppet's --detailed-exitcodes status: 0 no changes, 2 changes, 4 failures, 6 both, 1 run failed. */
  exitcode: number;
  /** exit 0 or 2 */
  success: boolean;
  /** exit 2 or 6 */
  changed: boolean;
  failed: boolean;
  /** Another run held the lock (exit 1, "already in progress"): try again later. */
  retryable: boolean;
  /** The agent is administratively disabled (`puppet agent --disable`). */
  disabled: boolean;
  failedResources: FailedResource[];
  /** Error lines from the run (compile errors, resource failures), Facter noise excluded. */
  errors: string[];
  /** Resource counts from last_run_summary.yaml (total, changed, failed, ...). */
  resources: Record<string, number>;
  environment: string | undefined;
  /** The last lines of puppet's output. */
  output: string;
  durationMs: number;
}

export interface CertificateRequest {
  certname: string;
  /** SHA-256 of the CSR's DER, `AA:BB:...` as Puppet prints it. */
  fingerprint: string;
  csrPath: string;
  /** False when an identical CSR was already pending on the CA (a repeated request). */
  submitted: boolean;
}

export class PuppetAgent {
  readonly settings: PuppetAgentSettings & Required<Pick<PuppetAgentSettings, "puppetBin" | "logdir" | "rundir" | "publicdir">>;

  constructor(settings: PuppetAgentSettings) {
    if (!/^[a-z0-9._-]+$/i.test(settings.certname)) throw new MusterError("MUSTER_PUPPET_FAILED", `invalid certname ${JSON.stringify(settings.certname)}`);
    this.settings = {
      ...settings,
      puppetBin: settings.puppetBin ?? "puppet",
      logdir: settings.logdir ?? join(settings.vardir, "log"),
      rundir: settings.rundir ?? join(settings.vardir, "run"),
      publicdir: settings.publicdir ?? join(settings.vardir, "public"),
    };
  }

  get certname(): string {
    return this.settings.certname;
  }
  get puppetConfPath(): string {
    return join(this.settings.confdir, "puppet.conf");
  }
  get certPath(): string {
    return join(this.settings.ssldir, "certs", `${this.settings.certname}.pem`);
  }
  get keyPath(): string {
    return join(this.settings.ssldir, "private_keys", `${this.settings.certname}.pem`);
  }
  get csrPath(): string {
    return join(this.settings.ssldir, "certificate_requests", `${this.settings.certname}.pem`);
  }
  get pidfile(): string {
    return join(this.settings.rundir, "agent.pid");
  }
  get lockfile(): string {
    return join(this.settings.vardir, "state", "agent_catalog_run.lock");
  }

  /** The options every puppet command gets: this node's directories and identity. */
  commonArgs(): string[] {
    const s = this.settings;
    const args = ["--confdir", s.confdir, "--vardir", s.vardir, "--ssldir", s.ssldir, "--certname", s.certname, "--logdir", s.logdir, "--rundir", s.rundir, "--publicdir", s.publicdir];
    if (s.server) args.push("--server", s.server);
    if (s.serverport) args.push("--serverport", String(s.serverport));
    return args;
  }

  /**
   * Puppet settings as the agent resolves them (`puppet config print --section agent`), with
   * puppet.conf and every interpolation applied: the only way to be right about, say, a
   * `statedir` moved in puppet.conf.
   */
  async configPrint(names: string[], opts: { timeoutMs?: number } = {}): Promise<Record<string, string>> {
    for (const n of names) if (!/^[a-z_]+$/.test(n)) throw new MusterError("MUSTER_PUPPET_FAILED", `invalid Puppet setting name ${JSON.stringify(n)}`);
    const r = await this.puppet(["config", "print", ...names, "--section", "agent", ...this.commonArgs(), "--color", "false"], { timeoutMs: opts.timeoutMs ?? 60_000 });
    if (r.code !== 0) throw new MusterError("MUSTER_PUPPET_FAILED", `puppet config print ${names.join(" ")} failed (exit ${r.code}): ${lastErrors(r.output)}`);
    return parseConfigPrint(names, r.output);
  }

  /**
   * Where this node's Puppet agent writes the classes of its last catalog (the `classfile`
   * setting, by default <vardir>/state/classes.txt). Puppet rewrites it on every agent run,
   * however the run was started.
   */
  async classfile(opts: { timeoutMs?: number } = {}): Promise<string> {
    const v = (await this.configPrint(["classfile"], opts)).classfile;
    if (!v) throw new MusterError("MUSTER_PUPPET_FAILED", "puppet config print classfile printed nothing");
    return v;
  }

  /** Puppet's default classfile for these directories, when Puppet cannot be asked. */
  get defaultClassfile(): string {
    return join(this.settings.vardir, "state", "classes.txt");
  }

  /** Whether this node holds a signed certificate (local files only). */
  hasCert(): boolean {
    return existsSync(this.certPath) && existsSync(this.keyPath);
  }

  /** SHA-256 fingerprint of the node's certificate, when it has one. */
  certFingerprint(): string | undefined {
    if (!existsSync(this.certPath)) return undefined;
    return fingerprintOf(pemToDer(readFileSync(this.certPath, "utf8"), "CERTIFICATE"));
  }

  /** SHA-256 fingerprint of the pending local CSR, when there is one. */
  csrFingerprint(): string | undefined {
    return existsSync(this.csrPath) ? csrFingerprint(readFileSync(this.csrPath, "utf8")) : undefined;
  }

  /**
   * Fetch the signed certificate from the CA when the node has a key but no certificate yet
   * (`puppet ssl download_cert`). Returns whether the node now has its certificate.
   */
  async downloadCert(opts: { signal?: AbortSignal; timeoutMs?: number } = {}): Promise<boolean> {
    if (this.hasCert()) return true;
    if (!existsSync(this.keyPath)) return false;
    await this.puppet(["ssl", "download_cert", ...this.commonArgs(), ...SSL_ARGS], opts);
    return this.hasCert();
  }

  /**
   * Create a key and CSR with the real agent and submit it to the CA (`puppet ssl submit_request`).
   * Returns the CSR's fingerprint, computed from the CSR file's DER, for the CA side to check.
   */
  async requestCertificate(opts: { signal?: AbortSignal; timeoutMs?: number; nodeKey?: string } = {}): Promise<CertificateRequest> {
    if (this.hasCert()) {
      throw new MusterError("MUSTER_PUPPET_FAILED", `${this.certname} already has a signed certificate (${this.certPath}); clean it on the node and the CA before requesting another`);
    }
    if (opts.nodeKey) this.requestExtension(NODE_KEY_CSR_OID, opts.nodeKey);
    const r = await this.puppet(["ssl", "submit_request", ...this.commonArgs(), ...SSL_ARGS], opts);
    const fp = this.csrFingerprint();
    if (r.code === 0 && fp) return { certname: this.certname, fingerprint: fp, csrPath: this.csrPath, submitted: true };
    // A CSR for this name is already pending: ours, if the key is unchanged. The CA side compares
    // fingerprints before signing, so a foreign CSR under our name is refused there.
    if (fp && /conflict|already has a requested certificate|already exists/i.test(r.output)) {
      return { certname: this.certname, fingerprint: fp, csrPath: this.csrPath, submitted: false };
    }
    throw new MusterError("MUSTER_PUPPET_FAILED", `puppet ssl submit_request failed (exit ${r.code}): ${lastErrors(r.output)}`);
  }

  /**
   * Ask for an extension in the next CSR: `extension_requests` in csr_attributes.yaml (Puppet's
   * `csr_attributes` setting, default `<confdir>/csr_attributes.yaml`), whatever else the file holds kept.
   */
  requestExtension(oid: string, value: string): void {
    const path = join(this.settings.confdir, "csr_attributes.yaml");
    let doc: Record<string, unknown> = {};
    if (existsSync(path)) {
      const parsed = parseYaml(readFileSync(path, "utf8")) as unknown;
      if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) doc = parsed as Record<string, unknown>;
      else if (parsed != null) throw new MusterError("MUSTER_PUPPET_FAILED", `${path} is not a mapping; cannot add the node-key extension request`);
    }
    const ext = doc.extension_requests && typeof doc.extension_requests === "object" ? (doc.extension_requests as Record<string, unknown>) : {};
    if (ext[oid] === value) return;
    doc.extension_requests = { ...ext, [oid]: value };
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(`${path}.tmp`, stringifyYaml(doc), { mode: 0o640 });
    renameSync(`${path}.tmp`, path);
  }

  /**
   * Point the node at a master: `server` and `serverport` in puppet.conf [main], every other
   * setting kept. Overrides of the same keys in [agent] are removed, since they would win.
   */
  setPuppetHost(host: string, port?: number): void {
    updatePuppetConf(this.puppetConfPath, "main", { server: host, serverport: port, masterport: undefined });
    const text = readFileSync(this.puppetConfPath, "utf8");
    if (/^\s*\[agent\]/m.test(text)) updatePuppetConf(this.puppetConfPath, "agent", { server: undefined, serverport: undefined, masterport: undefined, server_list: undefined });
  }

  /** One foreground agent run: `puppet agent --test --detailed-exitcodes`. */
  async run(opts: PuppetRunOptions = {}): Promise<PuppetRunResult> {
    const args = ["agent", "--test", "--detailed-exitcodes", "--waitforcert", "0", ...this.commonArgs(), "--color", "false"];
    if (opts.environment) {
      if (!/^[a-z0-9_]+$/.test(opts.environment)) throw new MusterError("MUSTER_PUPPET_FAILED", `invalid Puppet environment name ${JSON.stringify(opts.environment)}`);
      args.push("--environment", opts.environment);
    }
    if (opts.noop !== undefined) args.push(opts.noop ? "--noop" : "--no-noop");
    if (opts.tags?.length) args.push("--tags", opts.tags.join(","));
    const factEnv: Record<string, string> = {};
    for (const [k, v] of Object.entries(opts.facts ?? {})) {
      if (!/^[A-Za-z][A-Za-z0-9_]*$/.test(k)) throw new MusterError("MUSTER_PUPPET_FAILED", `invalid fact name ${JSON.stringify(k)}`);
      factEnv[`FACTER_${k}`] = v;
    }
    const since = Date.now();
    const r = await this.puppet(args, { signal: opts.signal, timeoutMs: opts.timeoutMs ?? 30 * 60_000, env: factEnv });
    const exitcode = r.code ?? -1;
    const report = readRunReport(join(this.settings.vardir, "state", "last_run_report.yaml"), join(this.settings.publicdir, "last_run_summary.yaml"), since);
    const fromOutput = parseRunOutput(r.output);
    const success = exitcode === 0 || exitcode === 2;
    const retryable = exitcode === 1 && /already in progress|agent_catalog_run\.lock/i.test(r.output);
    const disabled = exitcode === 1 && /administratively disabled/i.test(r.output);
    return {
      exitcode,
      success,
      changed: exitcode === 2 || exitcode === 6,
      failed: !success,
      retryable,
      disabled,
      failedResources: report.failedResources.length ? report.failedResources : fromOutput.failedResources,
      errors: report.errors.length ? report.errors : fromOutput.errors,
      resources: report.resources,
      environment: report.environment ?? opts.environment,
      output: tailLines(r.output, 60),
      durationMs: r.durationMs,
    };
  }

  /**
   * Start the agent daemon (`puppet agent` without --test) with this node's settings and
   * return its pid (from <rundir>/agent.pid). An already running daemon is reported as is.
   */
  async daemonize(opts: { extraArgs?: string[]; timeoutMs?: number } = {}): Promise<{ pid: number; alreadyRunning: boolean }> {
    const running = this.daemonPid();
    if (running !== undefined) return { pid: running, alreadyRunning: true };
    rmSync(this.pidfile, { force: true });
    mkdirSync(this.settings.rundir, { recursive: true });
    const child = spawn(this.settings.puppetBin, ["agent", ...this.commonArgs(), ...(opts.extraArgs ?? [])], {
      env: { ...process.env, ...this.settings.env },
      stdio: "ignore",
      detached: true,
    });
    const code = await new Promise<number | null>((resolve, reject) => {
      child.once("error", (e: NodeJS.ErrnoException) =>
        reject(new MusterError("MUSTER_PUPPET_FAILED", e.code === "ENOENT" ? `${this.settings.puppetBin} not found` : `cannot start puppet agent: ${e.message}`)),
      );
      child.once("exit", (c) => resolve(c));
    });
    if (code !== 0) throw new MusterError("MUSTER_PUPPET_FAILED", `puppet agent (daemon) exited with ${code}; see ${this.settings.logdir}`);
    const deadline = Date.now() + (opts.timeoutMs ?? 30_000);
    for (;;) {
      const pid = this.daemonPid();
      if (pid !== undefined) return { pid, alreadyRunning: false };
      if (Date.now() > deadline) throw new MusterError("MUSTER_PUPPET_FAILED", `puppet agent daemon wrote no pidfile (${this.pidfile}) in time`);
      await new Promise((r) => setTimeout(r, 100)); // the daemon forks away from us: a pidfile is all there is to watch
    }
  }

  /** The running daemon's pid, if its pidfile names a live process. */
  daemonPid(): number | undefined {
    try {
      const pid = Number(readFileSync(this.pidfile, "utf8").trim());
      if (!Number.isInteger(pid) || pid <= 0) return undefined;
      process.kill(pid, 0);
      return pid;
    } catch {
      return undefined;
    }
  }

  /** Stop the daemon started by daemonize(); true when one was running. */
  async stopDaemon(timeoutMs = 15_000): Promise<boolean> {
    const pid = this.daemonPid();
    if (pid === undefined) return false;
    process.kill(pid, "SIGTERM");
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      try {
        process.kill(pid, 0);
      } catch {
        return true;
      }
      await new Promise((r) => setTimeout(r, 100)); // not our child: no exit event to wait on
    }
    process.kill(pid, "SIGKILL");
    return true;
  }

  private async puppet(args: string[], opts: { signal?: AbortSignal; timeoutMs?: number; env?: Record<string, string> }): Promise<ExecResult> {
    const r = await execCommand(this.settings.puppetBin, args, {
      env: { ...process.env, ...this.settings.env, ...opts.env },
      signal: opts.signal,
      timeoutMs: opts.timeoutMs ?? 5 * 60_000,
    });
    if (r.timedOut) throw new MusterError("MUSTER_TIMEOUT", `puppet ${args[0]} ${args[1] ?? ""} did not finish in ${opts.timeoutMs ?? 5 * 60_000} ms and was killed; output:\n${tailLines(r.output, 20)}`);
    if (r.aborted) throw new MusterError("MUSTER_PUPPET_FAILED", `puppet ${args[0]} ${args[1] ?? ""} was cancelled`);
    return r;
  }
}

// Puppet's HTTP pool reuses a connection after PUT certificate_request, and puppetserver 7
// then answers the next GET on it only after ~30 s (observed here). A fresh connection per
// request avoids that; these commands make only a few requests.
const SSL_ARGS = ["--http_keepalive_timeout", "0", "--color", "false"];

/**
 * Pure: the output of `puppet config print NAMES`. One name prints the bare value, several print
 * `name = value` lines; warnings (e.g. Facter's) may be mixed in and are skipped.
 */
export function parseConfigPrint(names: string[], output: string): Record<string, string> {
  const lines = output.split("\n").map((l) => l.trim()).filter((l) => l && !/^(Warning|Error|Notice|Info|Debug):/.test(l));
  const out: Record<string, string> = {};
  if (names.length === 1) {
    const v = lines[lines.length - 1];
    if (v !== undefined) out[names[0]!] = v.replace(new RegExp(`^${names[0]!} = `), "");
    return out;
  }
  for (const l of lines) {
    const m = /^([a-z_]+) = (.*)$/.exec(l);
    if (m && names.includes(m[1]!)) out[m[1]!] = m[2]!;
  }
  return out;
}

function lastErrors(output: string): string {
  const errs = output.split("\n").filter((l) => /^Error: /.test(l) && !/^Error: Facter:/.test(l));
  return (errs.length ? errs.slice(-3).join("; ") : tailLines(output, 5)).trim();
}

/**
 * Legacy name resolution as mcprovision did it: point the name `puppet` (and any extra names)
 * at `ip` in a hosts-format file, keeping every other entry. Never the real /etc/hosts in tests.
 */
export function writeHostsEntry(path: string, ip: string, names: string[] = ["puppet"]): void {
  const before = existsSync(path) ? readFileSync(path, "utf8") : "";
  const drop = new Set(names);
  const kept: string[] = [];
  for (const line of before.split("\n")) {
    const [content = "", comment] = splitComment(line);
    const fields = content.trim().split(/\s+/).filter(Boolean);
    if (fields.length < 2) {
      kept.push(line);
      continue;
    }
    const [addr, ...hostnames] = fields;
    const left = hostnames.filter((h) => !drop.has(h));
    if (left.length === hostnames.length) kept.push(line);
    else if (left.length) kept.push(`${addr}\t${left.join(" ")}${comment !== undefined ? ` #${comment}` : ""}`);
  }
  while (kept.length && kept[kept.length - 1] === "") kept.pop();
  kept.push(`${ip}\t${names.join(" ")}\t# muster provision`);
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.muster-${process.pid}.tmp`;
  writeFileSync(tmp, kept.join("\n") + "\n");
  renameSync(tmp, path);
}

function splitComment(line: string): [string, string | undefined] {
  const i = line.indexOf("#");
  return i < 0 ? [line, undefined] : [line.slice(0, i), line.slice(i + 1)];
}
