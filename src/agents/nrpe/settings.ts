import { settingsReader } from "../settings.js";

// Settings of the nrpe agent (`plugins.nrpe` in the server config, passed as ctx.config). Every key
// is optional; strings from config files are coerced:
//
//   conf_dir         "/etc/nagios/nrpe.d"   directory of *.cfg files with command[name]=... lines
//   timeout          10                     seconds a check may run (NRPE's command_timeout;
//                                           at most 55, the DDL allows 60); a timeout is UNKNOWN
//   allow_arguments  true                   accept $ARGn$ arguments from requests (NRPE's
//                                           dont_blame_nrpe); false refuses any request with args
//   path             "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
//                                           PATH of the checks. Plugins get a small environment
//                                           (PATH, LANG, LC_ALL, TZ), never the daemon's own.

/** What createNrpeAgent is given (agent.ts), and its actions with it. */
export interface NrpeDeps {
  /** `plugins.nrpe` settings; ctx.config overlays them per request. */
  config?: Record<string, unknown>;
}

export interface NrpeSettings {
  confDir: string;
  timeoutMs: number;
  allowArguments: boolean;
  path: string;
}

export const DEFAULTS = { conf_dir: "/etc/nagios/nrpe.d", timeout: 10, allow_arguments: true, path: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" } as const;
const MAX_TIMEOUT = 55;


export function resolveNrpeSettings(config: Record<string, unknown>): NrpeSettings {
  const { str, num, bool } = settingsReader("nrpe", config);
  const timeout = num("timeout", DEFAULTS.timeout, { positive: true, max: MAX_TIMEOUT });
  const allowArguments = bool("allow_arguments", DEFAULTS.allow_arguments);
  return { confDir: str("conf_dir", DEFAULTS.conf_dir), timeoutMs: timeout * 1000, allowArguments, path: str("path", DEFAULTS.path) };
}

/** The environment a check runs with. */
export function pluginEnv(s: NrpeSettings): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { PATH: s.path };
  for (const k of ["LANG", "LC_ALL", "TZ"]) if (process.env[k] !== undefined) env[k] = process.env[k];
  return env;
}
