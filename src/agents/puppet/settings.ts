import { isFactName } from "../../puppet/index.js";
import { RpcError } from "../../errors.js";
import { Status } from "../../protocol/status.js";
import { PuppetAgent } from "../../puppet/index.js";

// `plugins.puppet` settings (ctx.config; strings from config files are coerced).

export interface PuppetSettings {
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
  /** Whether runonce may name another master (input `server`). */
  allowServerOverride: boolean;
  runTimeoutSeconds: number;
  /** Default of runonce's `splay` input. */
  splay: boolean;
  splaylimitSeconds: number;
  /** Environment of runonce when the request names none (default: puppet.conf decides). */
  environment: string | undefined;
  /** Facts of the node daemon passed to runs as FACTER_<name> (export_facts). */
  exportFacts: string[];
  /** Fixed facts passed to every run (facts), e.g. {lifecycle_stage: production}. */
  extraFacts: Record<string, string>;
}

export const DEFAULTS = {
  puppet_bin: "puppet",
  confdir: "/etc/puppet",
  vardir: "/var/cache/puppet",
  ssldir: "/var/lib/puppet/ssl",
  allow_server_override: false,
  run_timeout: 1800,
  splay: false,
  splaylimit: 1800,
} as const;

export function resolveSettings(config: Record<string, unknown>, identity: string): PuppetSettings {
  const optStr = (k: string): string | undefined => {
    const v = config[k];
    if (v === undefined || v === null || v === "") return undefined;
    if (typeof v !== "string") throw badSetting(k, v, "a string");
    return v;
  };
  const str = (k: string, d: string): string => optStr(k) ?? d;
  const num = (k: string, d: number | undefined, min = 0): number | undefined => {
    const v = config[k];
    if (v === undefined || v === null || v === "") return d;
    const n = typeof v === "string" ? Number(v) : v;
    if (typeof n !== "number" || !Number.isFinite(n) || n < min) throw badSetting(k, v, min > 0 ? "a positive number" : "a number >= 0");
    return n;
  };
  const bool = (k: string, d: boolean): boolean => {
    const v = config[k];
    if (v === undefined || v === null || v === "") return d;
    if (typeof v === "boolean") return v;
    if (typeof v === "string" && /^(true|yes|1|on)$/i.test(v)) return true;
    if (typeof v === "string" && /^(false|no|0|off)$/i.test(v)) return false;
    throw badSetting(k, v, "a boolean");
  };
  const environment = optStr("environment");
  if (environment !== undefined && !/^[a-z0-9_]+$/.test(environment)) throw badSetting("environment", environment, "a Puppet environment name");
  return {
    puppetBin: str("puppet_bin", DEFAULTS.puppet_bin),
    confdir: str("confdir", DEFAULTS.confdir),
    vardir: str("vardir", DEFAULTS.vardir),
    ssldir: str("ssldir", DEFAULTS.ssldir),
    logdir: optStr("logdir"),
    rundir: optStr("rundir"),
    publicdir: optStr("publicdir"),
    certname: str("certname", identity),
    server: optStr("server"),
    serverport: num("serverport", undefined, 1),
    allowServerOverride: bool("allow_server_override", DEFAULTS.allow_server_override),
    runTimeoutSeconds: num("run_timeout", DEFAULTS.run_timeout, 1) ?? DEFAULTS.run_timeout,
    splay: bool("splay", DEFAULTS.splay),
    splaylimitSeconds: num("splaylimit", DEFAULTS.splaylimit) ?? DEFAULTS.splaylimit,
    environment,
    exportFacts: factNames(config.export_facts),
    extraFacts: fixedFacts(config.facts),
  };
}

function factNames(v: unknown): string[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || !v.every((f) => typeof f === "string" && isFactName(f))) throw badSetting("export_facts", v, "a list of fact names");
  return [...(v as string[])];
}

function fixedFacts(v: unknown): Record<string, string> {
  if (v === undefined || v === null) return {};
  if (typeof v !== "object" || Array.isArray(v)) throw badSetting("facts", v, "a mapping of fact names to values");
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(v as Record<string, unknown>)) {
    if (!isFactName(k) || !["string", "number", "boolean"].includes(typeof val)) throw badSetting("facts", v, "a mapping of fact names to scalar values");
    out[k] = String(val);
  }
  return out;
}

function badSetting(key: string, value: unknown, want: string): RpcError {
  return new RpcError(Status.UnknownError, `plugins.puppet.${key} must be ${want}, got ${JSON.stringify(value)}: fix the node's server config`);
}

/** The node's PuppetAgent; `server` ("host[:port]") overrides the configured master. */
export function puppetAgentFor(s: PuppetSettings, server?: string): PuppetAgent {
  let host = s.server;
  let port = s.serverport;
  if (server !== undefined) {
    const [h, p] = server.split(":");
    host = h;
    port = p !== undefined ? Number(p) : undefined;
  }
  return new PuppetAgent({
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
  });
}
