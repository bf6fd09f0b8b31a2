import { exportFactsSetting, puppetAgentSettings, puppetNodeSettings, settingsReader, type PuppetNodeSettings, type SettingsReader } from "../settings.js";
import { isFactName, PuppetAgent } from "../../puppet/index.js";

// `plugins.puppet` settings (ctx.config; strings from config files are coerced).

export interface PuppetSettings extends PuppetNodeSettings {
  /** Whether runonce may name another master (input `server`). */
  allowServerOverride: boolean;
  runTimeoutSeconds: number;
  /** Default of runonce's `splay` input. */
  splay: boolean;
  splaylimitSeconds: number;
  /** Environment of runonce when the request names none (default: puppet.conf decides). */
  environment: string | undefined;
  /** Fixed facts passed to every run (facts) as FACTER_<name>. */
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
  const r = settingsReader("puppet", config);
  const { optStr, num, bool, bad: badSetting } = r;
  const environment = optStr("environment");
  if (environment !== undefined && !/^[a-z0-9_]+$/.test(environment)) throw badSetting("environment", environment, "a Puppet environment name");
  return {
    ...puppetNodeSettings(r, identity),
    allowServerOverride: bool("allow_server_override", DEFAULTS.allow_server_override),
    runTimeoutSeconds: num("run_timeout", DEFAULTS.run_timeout, { min: 1 }),
    splay: bool("splay", DEFAULTS.splay),
    splaylimitSeconds: num("splaylimit", DEFAULTS.splaylimit),
    environment,
    exportFacts: exportFactsSetting(r, config),
    extraFacts: fixedFacts(config.facts, badSetting),
  };
}


function fixedFacts(v: unknown, badSetting: SettingsReader["bad"]): Record<string, string> {
  if (v === undefined || v === null) return {};
  if (typeof v !== "object" || Array.isArray(v)) throw badSetting("facts", v, "a mapping of fact names to values");
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(v as Record<string, unknown>)) {
    if (!isFactName(k) || !["string", "number", "boolean"].includes(typeof val)) throw badSetting("facts", v, "a mapping of fact names to scalar values");
    out[k] = String(val);
  }
  return out;
}


/** The node's PuppetAgent; `server` ("host[:port]") overrides the configured master. */
export function puppetAgentFor(s: PuppetSettings, server?: string): PuppetAgent {
  return new PuppetAgent(puppetAgentSettings(s, server));
}
