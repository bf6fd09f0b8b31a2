import { RpcError } from "../errors.js";
import { Status } from "../protocol/status.js";
import type { PuppetAgentSettings } from "../puppet/agent.js";

// Reading an agent's `plugins.<agent>` settings. Values from YAML may arrive as strings, so
// numbers and booleans are coerced; a bad value is the node's fault (UnknownError), not the
// caller's, with a message naming the key.

export interface SettingsReader {
  bad(key: string, value: unknown, want: string): RpcError;
  optStr(key: string): string | undefined;
  str(key: string, fallback: string): string;
  /** A number >= min (default 0), > 0 when `positive`, and <= max when given. */
  num(key: string, fallback: number, opts?: NumberBounds): number;
  optNum(key: string, opts?: NumberBounds): number | undefined;
  bool(key: string, fallback: boolean): boolean;
}

export interface NumberBounds {
  min?: number;
  max?: number;
  positive?: boolean;
}

const TRUE = /^(true|yes|1|on)$/i;
const FALSE = /^(false|no|0|off)$/i;

export function settingsReader(agent: string, config: Record<string, unknown>): SettingsReader {
  const bad = (key: string, value: unknown, want: string) =>
    new RpcError(Status.UnknownError, `plugins.${agent}.${key} must be ${want}, got ${JSON.stringify(value)}: fix the node's server config`);
  const absent = (v: unknown) => v === undefined || v === null || v === "";
  const optStr = (key: string): string | undefined => {
    const v = config[key];
    if (absent(v)) return undefined;
    if (typeof v !== "string") throw bad(key, v, "a string");
    return v;
  };
  const optNum = (key: string, opts: NumberBounds = {}): number | undefined => {
    const v = config[key];
    if (absent(v)) return undefined;
    const n = typeof v === "string" ? Number(v) : v;
    const min = opts.min ?? 0;
    const low = opts.positive ? "a positive number" : `a number >= ${min}`;
    const want = opts.max !== undefined ? `${low} up to ${opts.max}` : low;
    if (typeof n !== "number" || !Number.isFinite(n) || n < min || (opts.positive && n <= 0) || (opts.max !== undefined && n > opts.max)) throw bad(key, v, want);
    return n;
  };
  return {
    bad,
    optStr,
    str: (key, fallback) => optStr(key) ?? fallback,
    optNum,
    num: (key, fallback, opts) => optNum(key, opts) ?? fallback,
    bool(key, fallback) {
      const v = config[key];
      if (absent(v)) return fallback;
      if (typeof v === "boolean") return v;
      if (typeof v === "string" && TRUE.test(v)) return true;
      if (typeof v === "string" && FALSE.test(v)) return false;
      throw bad(key, v, "a boolean");
    },
  };
}

/** Where a node's Puppet lives: the settings the provision and puppet agents share. */
export interface PuppetNodeSettings {
  puppetBin: string;
  confdir: string;
  vardir: string;
  ssldir: string;
  logdir: string | undefined;
  rundir: string | undefined;
  publicdir: string | undefined;
  certname: string;
  server: string | undefined;
  serverport: number | undefined;
  /** Facts of the node daemon passed to Puppet runs as FACTER_<name> (export_facts). */
  exportFacts: string[];
}

export function puppetNodeSettings(r: SettingsReader, identity: string): Omit<PuppetNodeSettings, "exportFacts"> {
  return {
    puppetBin: r.str("puppet_bin", "puppet"),
    confdir: r.str("confdir", "/etc/puppet"),
    vardir: r.str("vardir", "/var/cache/puppet"),
    ssldir: r.str("ssldir", "/var/lib/puppet/ssl"),
    logdir: r.optStr("logdir"),
    rundir: r.optStr("rundir"),
    publicdir: r.optStr("publicdir"),
    certname: r.str("certname", identity),
    server: r.optStr("server"),
    serverport: r.optNum("serverport", { min: 1, max: 65535 }),
  };
}

/** export_facts: names of the node daemon's facts handed to Puppet runs. */
export function exportFactsSetting(r: SettingsReader, config: Record<string, unknown>): string[] {
  const v = config.export_facts;
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || !v.every((f) => typeof f === "string" && /^[A-Za-z][A-Za-z0-9_]*$/.test(f))) throw r.bad("export_facts", v, "a list of fact names");
  return [...(v as string[])];
}

/**
 * How the node's Puppet is run (PuppetAgent's settings), from the settings the provision and
 * puppet agents share; `server` ("host[:port]") overrides the configured master.
 */
export function puppetAgentSettings(s: Omit<PuppetNodeSettings, "exportFacts">, server?: string): PuppetAgentSettings {
  let host = s.server;
  let port = s.serverport;
  if (server !== undefined) {
    const [h, p] = server.split(":");
    host = h;
    port = p !== undefined ? Number(p) : undefined;
  }
  return {
    puppetBin: s.puppetBin,
    confdir: s.confdir,
    vardir: s.vardir,
    ssldir: s.ssldir,
    certname: s.certname,
    ...(host !== undefined ? { server: host } : {}),
    ...(port !== undefined ? { serverport: port } : {}),
    ...(s.logdir !== undefined ? { logdir: s.logdir } : {}),
    ...(s.rundir !== undefined ? { rundir: s.rundir } : {}),
    ...(s.publicdir !== undefined ? { publicdir: s.publicdir } : {}),
  };
}
