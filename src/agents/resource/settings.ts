import { existsSync, realpathSync } from "node:fs";
import { dirname, isAbsolute, resolve } from "node:path";
import { settingsReader } from "../settings.js";
import { RpcError } from "../../errors.js";
import { Status } from "../../protocol/status.js";
import { defaultResourcesFile } from "../../puppet/resource.js";
import { resourceRefusal, type ResourceRuleSettings } from "../../puppet/resource-rule.js";
import { RESOURCE_TYPE } from "./ddl.js";

// Settings of the resource agent (`plugins.resource` in the server config, passed as ctx.config).
// Every key is optional; strings from config files are coerced:
//
//   allowed_types   []                   resource types this node applies or shows (a list, or a
//                                        comma-separated string), among file, package and service:
//                                        each has its rule of titles, properties and values
//                                        (src/puppet/resource-rule.ts). Empty: every type is refused.
//   file_paths      (none)               directories `file` titles must be under; without it no
//                                        file is managed. The privileged helper also requires each
//                                        to be root's, with nothing on the way another user can change.
//   file_owners     []                   values `owner` may take (names or uids); none: not settable
//   file_groups     []                   values `group` may take; none: not settable
//   allow_managed   false                also change resources the node's Puppet catalog manages
//                                        (Puppet would revert them on its next run anyway)
//   puppet_bin      "puppet"             the puppet binary
//   confdir         "/etc/puppet"        Puppet confdir given to puppet resource
//   vardir          "/var/cache/puppet"  Puppet vardir given to puppet resource
//   resources_file  <vardir>/state/resources.txt   the last catalog's managed resources (Puppet's resourcefile)
//   timeout         120                  seconds puppet resource may take (the DDL allows 180)

export interface ResourceSettings extends ResourceRuleSettings {
  allowManaged: boolean;
  puppetBin: string;
  confdir: string;
  vardir: string;
  resourcesFile: string;
  timeoutMs: number;
}

export const DEFAULTS = {
  puppet_bin: "puppet",
  confdir: "/etc/puppet",
  vardir: "/var/cache/puppet",
  timeout: 120,
} as const;

const MAX_TIMEOUT = 170;

export function resolveResourceSettings(config: Record<string, unknown>): ResourceSettings {
  const { str, num, bool, bad } = settingsReader("resource", config);
  const list = (key: string, valid: (v: string) => boolean, want: string): string[] | undefined => {
    const raw = config[key];
    if (raw === undefined || raw === null) return undefined;
    const items = typeof raw === "string" ? raw.split(",").map((t) => t.trim()).filter((t) => t !== "") : raw;
    if (!Array.isArray(items) || !items.every((t): t is string => typeof t === "string" && valid(t))) throw bad(key, raw, want);
    return items;
  };
  const typeRe = new RegExp(RESOURCE_TYPE);
  const types = list("allowed_types", (t) => typeRe.test(t), "a list of resource type names") ?? [];
  const paths = list("file_paths", (p) => isAbsolute(p) && resolve(p) !== "/", "a non-empty list of absolute directories other than /");
  if (paths !== undefined && paths.length === 0) throw bad("file_paths", config.file_paths, "a non-empty list of absolute directories other than /");
  const principal = (v: string) => /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}$/.test(v);
  const vardir = str("vardir", DEFAULTS.vardir);
  return {
    allowedTypes: new Set(types),
    ...(paths ? { filePaths: paths.map((p) => resolve(p)) } : {}),
    fileOwners: list("file_owners", principal, "a list of user names or uids") ?? [],
    fileGroups: list("file_groups", principal, "a list of group names or gids") ?? [],
    allowManaged: bool("allow_managed", false),
    puppetBin: str("puppet_bin", DEFAULTS.puppet_bin),
    confdir: str("confdir", DEFAULTS.confdir),
    vardir,
    resourcesFile: str("resources_file", defaultResourcesFile(vardir)),
    timeoutMs: num("timeout", DEFAULTS.timeout, { positive: true, max: MAX_TIMEOUT }) * 1000,
  };
}

/**
 * Refuses a resource outside the node's rule (src/puppet/resource-rule.ts) as Aborted (policy,
 * not the caller's malformed input), naming what was refused. With file_paths, a symlinked
 * directory on the way must not lead outside them either: the daemon checks where the parent
 * really is (the privileged helper goes further, privileged/paths.ts).
 */
export function ensureResourceAllowed(s: ResourceSettings, type: string, name: string, properties: readonly (readonly [string, string])[] = []): void {
  const refused = resourceRefusal(s, type, name, properties);
  if (refused) throw new RpcError(Status.Aborted, refused.message, { type, ...(refused.reason === "type_denied" ? {} : { name }), reason: refused.reason });
  if (type !== "file" || !s.filePaths) return;
  let parent = dirname(name);
  while (!existsSync(parent) && parent !== dirname(parent)) parent = dirname(parent);
  const real = resolve(realpathSync(parent), name.replace(/\/+$/, "").slice(parent.length + 1));
  if (!s.filePaths.some((d) => real.startsWith(`${d}/`))) {
    throw new RpcError(Status.Aborted, `file ${name}: outside the directories this node allows, through a symbolic link (plugins.resource.file_paths: ${s.filePaths.join(", ")})`, { type, name, reason: "path_denied" });
  }
}
