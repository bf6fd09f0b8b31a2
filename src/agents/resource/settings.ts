import { existsSync, realpathSync } from "node:fs";
import { dirname, isAbsolute, resolve } from "node:path";
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
//   file_paths      (none)               when set, `file` resources only under these directories
//                                        and only their ensure, content and mode: no source,
//                                        target, path or recurse that could reach elsewhere

export interface ResourceSettings {
  allowedTypes: ReadonlySet<string>;
  allowManaged: boolean;
  puppetBin: string;
  confdir: string;
  vardir: string;
  resourcesFile: string;
  timeoutMs: number;
  /** Directories `file` resources must be under (none: any path). */
  filePaths?: string[];
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
  const rawPaths = config.file_paths;
  const paths = typeof rawPaths === "string" ? rawPaths.split(",").map((t) => t.trim()).filter((t) => t !== "") : rawPaths;
  if (paths !== undefined && (!Array.isArray(paths) || paths.length === 0 || !paths.every((p): p is string => typeof p === "string" && isAbsolute(p)))) throw bad("file_paths", rawPaths, "a non-empty list of absolute directories");
  return {
    filePaths: paths?.map((p) => resolve(p)),
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

const FILE_PROPERTIES = new Set(["ensure", "content", "mode"]);

/** With file_paths set: a file resource only under those directories, with only ensure, content and mode. */
export function ensureFileAllowed(s: ResourceSettings, type: string, name: string, properties: string[] = []): void {
  if (type !== "file" || !s.filePaths) return;
  const refuse = (why: string) => new RpcError(Status.Aborted, `file ${name}: ${why} (plugins.resource.file_paths: ${s.filePaths!.join(", ")})`, { type, name, reason: "path_denied" });
  const path = name.length > 1 ? name.replace(/\/+$/, "") : name;
  // `..`, `.` and doubled slashes would make the checked path differ from the one Puppet writes
  if (!isAbsolute(path) || resolve(path) !== path) throw refuse("not a plain absolute path");
  // a symlinked directory on the way would lead Puppet elsewhere: check where the parent really is
  let parent = dirname(path);
  while (!existsSync(parent) && parent !== dirname(parent)) parent = dirname(parent);
  const real = resolve(realpathSync(parent), path.slice(parent.length + 1));
  const inside = (p: string) => s.filePaths!.some((d) => p.startsWith(d + "/"));
  if (!inside(path) || !inside(real)) throw refuse("outside the directories this node allows");
  const extra = properties.filter((p) => !FILE_PROPERTIES.has(p));
  if (extra.length) throw refuse(`property ${extra.join(", ")} is not allowed here; only ${[...FILE_PROPERTIES].join(", ")}`);
}
