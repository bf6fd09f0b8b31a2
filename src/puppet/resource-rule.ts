import { isAbsolute, resolve } from "node:path";
import { rootCodeRefusal } from "./root-code.js";

// What `puppet resource` may be asked on a node (docs/decisions/privileged-helper.md): for each
// type muster knows, the titles it takes and every property with the values it may have. Any
// other type, property or value is refused, with a message naming it: a property is allowed
// because it is known to be harmless, never because it is not known to be harmful (`service
// start=`, `package provider=`, `file ensure=<target>` run commands or escape a directory).
// Pure: the resource agent checks it before it runs Puppet, and the privileged helper again, as
// root, with root's settings (and then walks the file's directories: privileged/paths.ts, and
// adds what only root can read: Puppet's own directories, whether a path is a directory now, the
// dpkg database).

/** The types a node may allow (plugins.resource.allowed_types); any other is refused. */
export const RULED_TYPES = ["file", "package", "service"] as const;

export interface ResourceRuleSettings {
  /** plugins.resource.allowed_types */
  allowedTypes: ReadonlySet<string>;
  /** plugins.resource.file_paths: directories `file` titles must be under; none: `file` is refused. */
  filePaths?: readonly string[];
  /** plugins.resource.file_owners / file_groups: the values `owner` and `group` may take (none: neither may be set). */
  fileOwners: readonly string[];
  fileGroups: readonly string[];
}

export type RefusalReason = "type_denied" | "name_denied" | "property_denied" | "value_denied" | "path_denied";

export interface RuleRefusal {
  reason: RefusalReason;
  message: string;
}

type ValueRule = (v: string, s: ResourceRuleSettings) => string | undefined;

const oneOf =
  (...allowed: string[]): ValueRule =>
  (v) =>
    allowed.includes(v) ? undefined : `one of ${allowed.join(", ")}`;

/** A Debian version (policy 5.6.12): what `ensure` pins a package to. */
const DEBIAN_VERSION = /^(?:[0-9]+:)?[0-9][A-Za-z0-9.+~-]{0,127}$/;
const PACKAGE_ENSURE = ["present", "installed", "absent", "purged", "latest"];

/** `ensure` names a version rather than a state. */
export function isVersionPin(ensure: string): boolean {
  return !PACKAGE_ENSURE.includes(ensure);
}

/** What dpkg's database says of a package, as the helper reads it in its turn (src/puppet/dpkg.ts). */
export interface PackageState {
  /** The versions installed (one per architecture); none: not installed (config files alone are not). */
  installed: string[];
  /** dpkg's selection is `hold` (apt-mark hold). */
  held: boolean;
  essential: boolean;
  protected: boolean;
  /** With a version pin and the package installed: the pin is at least every installed version (dpkg's order). */
  pinNotLower?: boolean;
}

/**
 * Why this `package` change may not be made to a package in this state, or undefined. A version
 * pin only upward: Puppet's apt provider installs `name=version --force-yes` (which downgrades) and
 * unholds a held package first, so a pin down would bring back an old, fixed version, muster's own
 * helper included (build/apt keeps old versions). A pin moves an installed package up, or leaves
 * it; a package not installed takes present or latest (apt's candidate, never below what is
 * installed), never a pin: removing it first and pinning an old version is a downgrade in two
 * steps. A held package is the operator's: no change at all. Essential and Protected packages are
 * not removed. Showing (no ensure) is always allowed.
 */
export function packageChangeRefusal(name: string, ensure: string | undefined, st: PackageState): RuleRefusal | undefined {
  if (ensure === undefined) return undefined;
  const deny = (why: string): RuleRefusal => ({ reason: "value_denied", message: `package ${name}: ensure=${JSON.stringify(ensure)} is not allowed; ${why}` });
  if (st.held) return deny(`${name} is held (dpkg selection hold, apt-mark hold): the operator keeps it where it is, and Puppet would unhold it`);
  if ((ensure === "absent" || ensure === "purged") && (st.essential || st.protected)) return deny(`${name} is ${st.essential ? "Essential" : "Protected"}: the system needs it`);
  if (isVersionPin(ensure)) {
    if (st.installed.length === 0) return deny(`${name} is not installed, and a version pin only moves an installed package up: use ensure=present or latest`);
    if (st.pinNotLower !== true) return deny(`${name} ${st.installed.join(", ")} is installed, and a version pin never goes down (a downgrade brings back what an upgrade fixed)`);
  }
  return undefined;
}

/** File modes: octal only, no setuid, setgid or sticky bit, nothing writable by others. */
export function fileModeProblem(v: string): string | undefined {
  if (!/^0?[0-7]{3,4}$/.test(v)) return "an octal mode such as 0644 (no symbolic modes)";
  const m = parseInt(v, 8);
  if (m & 0o7000) return "a mode without setuid, setgid or sticky bit";
  if (m & 0o002) return "a mode that others cannot write";
  return undefined;
}

/**
 * Puppet reads a file's `content` that looks like `{sha256}<sum>` (any `{word}` prefix: Puppet 7
 * takes 3 to 10 word characters, another Puppet may take others) as a checksum and copies what
 * its filebucket holds under that sum: old contents of any file Puppet ever replaced, root-only
 * ones too (`puppet.last_run_report` shows the sums). Such content is refused, on any line.
 */
export const FILEBUCKET_CONTENT = /^\{\w+\}/m;

/**
 * Why a `file` resource that is, or will be, a directory may not have these properties: the walk
 * (privileged/paths.ts) lets a write through only directories root owns and nobody else may
 * write, so the helper never makes one it would refuse next time: no owner but root, no write for
 * its group (others' write is refused for every file). `now`: the directory the path is already,
 * with its mode (a `mode`, `owner` or `group` without `ensure` changes it, and a `group` gives
 * whatever write its mode has); only root can tell, so the helper asks again in its turn.
 */
export function directoryRefusal(name: string, properties: readonly (readonly [string, string])[], now?: { mode: number }): RuleRefusal | undefined {
  const props = new Map(properties);
  const ensure = props.get("ensure");
  if (ensure !== "directory" && !(ensure === undefined && now)) return undefined;
  const mode = props.get("mode");
  if (mode !== undefined && /^0?[0-7]{3,4}$/.test(mode) && parseInt(mode, 8) & 0o020) {
    return { reason: "value_denied", message: `file ${name}: mode=${JSON.stringify(mode)} is not allowed on a directory; its group could then rename what is in it and lead a later write out (a directory's mode has no write for group or others)` };
  }
  const group = props.get("group");
  if (group !== undefined && mode === undefined && now && now.mode & 0o020) {
    return { reason: "value_denied", message: `file ${name}: group=${JSON.stringify(group)} is not allowed on this directory: its mode (${(now.mode & 0o7777).toString(8).padStart(4, "0")}) lets its group write, so that group could lead a later write out; give a mode without group write too` };
  }
  const owner = props.get("owner");
  if (owner !== undefined && owner !== "root" && owner !== "0") {
    return { reason: "value_denied", message: `file ${name}: owner=${JSON.stringify(owner)} is not allowed on a directory; its owner could then rename what is in it and lead a later write out (a directory's owner is root)` };
  }
  return undefined;
}

interface TypeRule {
  /** What a title must be, as a problem message, or undefined when it is one. */
  title(name: string, s: ResourceRuleSettings): RuleRefusal | undefined;
  properties: Record<string, ValueRule>;
}

const UNIT_NAME = /^[A-Za-z0-9][A-Za-z0-9:_.@-]{0,254}$/;
const PACKAGE_NAME = /^[a-z0-9][a-z0-9+.-]{1,127}$/;
const PACKAGE_FILE = /\.(?:u?deb|ddeb|dsc|changes)$/;

const RULES: Record<(typeof RULED_TYPES)[number], TypeRule> = {
  service: {
    title: (name) => (UNIT_NAME.test(name) ? undefined : { reason: "name_denied", message: `service ${JSON.stringify(name)}: a service is named by its unit name (letters, digits, : _ . @ -; no path)` }),
    properties: { ensure: oneOf("running", "stopped", "true", "false"), enable: oneOf("true", "false", "mask") },
  },
  package: {
    // no path (apt installs ./x.deb or /x.deb from a file), no suite or version in the title, and
    // nothing named like a package file (apt may take x.deb in its working directory for one)
    title: (name) =>
      PACKAGE_NAME.test(name) && !PACKAGE_FILE.test(name) ? undefined : { reason: "name_denied", message: `package ${JSON.stringify(name)}: a package is named by its Debian package name (a-z 0-9 + . -; no path, suite, version or package file)` },
    properties: { ensure: (v) => (PACKAGE_ENSURE.includes(v) || DEBIAN_VERSION.test(v) ? undefined : `one of ${PACKAGE_ENSURE.join(", ")} or a version`) },
  },
  file: {
    title: (name, s) => filePathProblem(name, s),
    properties: {
      ensure: oneOf("file", "directory", "absent"),
      content: (v) => (FILEBUCKET_CONTENT.test(v) ? "text that does not start with {word} (Puppet would read {sha256}<sum> as a checksum and copy that content out of its filebucket)" : undefined),
      mode: fileModeProblem,
      owner: (v, s) => (s.fileOwners.includes(v) ? undefined : `one of plugins.resource.file_owners (${s.fileOwners.join(", ") || "none"})`),
      group: (v, s) => (s.fileGroups.includes(v) ? undefined : `one of plugins.resource.file_groups (${s.fileGroups.join(", ") || "none"})`),
    },
  },
};

const isRuled = (type: string): type is keyof typeof RULES => Object.hasOwn(RULES, type);

/** A `file` title: a plain absolute path strictly under one of file_paths (none set: no file at all). */
function filePathProblem(name: string, s: ResourceRuleSettings): RuleRefusal | undefined {
  if (!s.filePaths?.length) return { reason: "path_denied", message: `file ${name}: plugins.resource.file_paths is not set, so no file may be managed` };
  const path = name.length > 1 ? name.replace(/\/+$/, "") : name;
  // `..`, `.` and doubled slashes would make the checked path differ from the one Puppet writes
  if (!isAbsolute(path) || resolve(path) !== path) return { reason: "path_denied", message: `file ${name}: not a plain absolute path (plugins.resource.file_paths: ${s.filePaths.join(", ")})` };
  if (!s.filePaths.some((d) => path.startsWith(`${d}/`))) {
    return { reason: "path_denied", message: `file ${name}: outside the directories this node allows (plugins.resource.file_paths: ${s.filePaths.join(", ")})` };
  }
  const code = rootCodeRefusal(path, s.filePaths);
  return code ? { reason: "path_denied", message: `file ${name}: ${code}` } : undefined;
}

/** Why `type` is not one the node may use, or undefined. */
export function typeRefusal(s: ResourceRuleSettings, type: string): RuleRefusal | undefined {
  if (!s.allowedTypes.has(type)) {
    const allowed = [...s.allowedTypes].sort();
    return {
      reason: "type_denied",
      message: allowed.length === 0 ? `resource type '${type}' is not allowed on this node: plugins.resource.allowed_types is empty, so every type is refused` : `resource type '${type}' is not allowed on this node (allowed: ${allowed.join(", ")})`,
    };
  }
  if (!isRuled(type)) return { reason: "type_denied", message: `resource type '${type}' has no rule in muster, so it is refused even though plugins.resource.allowed_types lists it (muster allows only ${RULED_TYPES.join(", ")})` };
  return undefined;
}

/**
 * Why this resource may not be shown (no properties) or set, or undefined when it may: the type is
 * allowed and ruled, the title is one the type takes, and every property is on the type's list with
 * a value it allows.
 */
export function resourceRefusal(s: ResourceRuleSettings, type: string, name: string, properties: readonly (readonly [string, string])[]): RuleRefusal | undefined {
  const t = typeRefusal(s, type);
  if (t) return t;
  const rule = RULES[type as keyof typeof RULES];
  const titled = rule.title(name, s);
  if (titled) return titled;
  const known = Object.keys(rule.properties);
  for (const [k, v] of properties) {
    if (!Object.hasOwn(rule.properties, k)) return { reason: "property_denied", message: `${type} ${name}: property ${k} is not allowed; ${type} takes only ${known.join(", ")}` };
    const want = rule.properties[k]!(v, s);
    // a file's content is never echoed: it may be a secret (the helper logs it by digest only)
    if (want !== undefined) return { reason: "value_denied", message: `${type} ${name}: ${k}${k === "content" ? " (as given)" : `=${JSON.stringify(v)}`} is not allowed; ${k} must be ${want}` };
  }
  if (type === "file") return directoryRefusal(name, properties);
  return undefined;
}
