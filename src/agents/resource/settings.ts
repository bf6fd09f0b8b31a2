import { settingsReader } from "../settings.js";
import { RpcError } from "../../errors.js";
import { Status } from "../../protocol/status.js";
import { defaultResourcesFile } from "../../puppet/resource.js";
import { RESOURCE_TYPE } from "./ddl.js";

// Settings of the resource agent (`plugins.resource` in the server config, passed as ctx.config).
// Every key is optional; strings from config files are coerced:
//
//   allowed_types   []                   resource types this node applies or shows (a list, or a
//                                        comma-separated string). Empty: every type is refused.
//   allow_managed   false                also change resources the node's Puppet catalog manages
//                                        (Puppet would revert them on its next run anyway)
//   puppet_bin      "puppet"             the puppet binary
//   confdir         "/etc/puppet"        Puppet confdir given to puppet resource
//   vardir          "/var/cache/puppet"  Puppet vardir given to puppet resource
//   resources_file  <vardir>/state/resources.txt   the last catalog's managed resources (Puppet's resourcefile)
//   timeout         120                  seconds puppet resource may take (the DDL allows 180)

export interface ResourceSettings {
  allowedTypes: ReadonlySet<string>;
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
  const rawTypes = config.allowed_types ?? [];
  const types = typeof rawTypes === "string" ? rawTypes.split(",").map((t) => t.trim()).filter((t) => t !== "") : rawTypes;
  const typeRe = new RegExp(RESOURCE_TYPE);
  if (!Array.isArray(types) || !types.every((t): t is string => typeof t === "string" && typeRe.test(t))) throw bad("allowed_types", rawTypes, "a list of resource type names");
  const allowManaged = bool("allow_managed", false);
  const timeout = num("timeout", DEFAULTS.timeout, { positive: true, max: MAX_TIMEOUT });
  const vardir = str("vardir", DEFAULTS.vardir);
  return {
    allowedTypes: new Set(types),
    allowManaged,
    puppetBin: str("puppet_bin", DEFAULTS.puppet_bin),
    confdir: str("confdir", DEFAULTS.confdir),
    vardir,
    resourcesFile: str("resources_file", defaultResourcesFile(vardir)),
    timeoutMs: timeout * 1000,
  };
}

/** Refuses a type the node does not allow (InvalidData is the caller's problem; Aborted is policy). */
export function ensureTypeAllowed(s: ResourceSettings, type: string): void {
  if (s.allowedTypes.has(type)) return;
  const allowed = [...s.allowedTypes].sort();
  throw new RpcError(
    Status.Aborted,
    allowed.length === 0
      ? `resource type '${type}' is not allowed on this node: plugins.resource.allowed_types is empty, so every type is refused`
      : `resource type '${type}' is not allowed on this node (allowed: ${allowed.join(", ")})`,
    { type, reason: "type_denied" },
  );
}
