import { existsSync, readFileSync, realpathSync, statSync } from "node:fs";
import { delimiter, isAbsolute, join } from "node:path";
import { MusterError } from "../errors.js";
import { parseConfigPrint } from "./agent.js";
import { execCommand, tailLines } from "./exec.js";

// Puppet's own settings, as Puppet resolves them when it runs (`puppet config print`, run as
// root): where it loads code from (factpath, plugins, modules, its confdir and vardir), and who it
// is (certname, ssldir). The privileged helper asks here rather than trusting muster's view of
// them: puppet.conf may move factpath to /srv/facts, or name a certname muster does not know.
// Printing costs a Ruby process (about a second of CPU), so a result is kept for as long as the
// puppet.conf it came from is the same file, unchanged, and Puppet is the same installation. The
// helper exits when idle, so it keeps them in a file of its own cache directory too (root's, 0700;
// keepPuppetSettingsIn, with the CLI's ownCacheFile): without it every start printed them again,
// once per Puppet run on a node (the classes file's place, read after each run).

/** The settings that name a place Puppet loads code, facts, plugins or its identity from. */
export const PUPPET_CODE_SETTINGS = [
  "confdir",
  "codedir",
  "vardir",
  "ssldir",
  "rundir",
  "factpath",
  "libdir",
  "plugindest",
  "pluginfactdest",
  "environmentpath",
  "basemodulepath",
  "vendormoduledir",
  "hiera_config",
  "clientbucketdir",
  "statedir",
  "publicdir",
] as const;

const PRINTED = [...PUPPET_CODE_SETTINGS, "certname", "classfile"];

/** Facter's configuration files (Debian's, then Puppet's own packages'): facter.conf may name more fact directories. */
export const FACTER_CONFS = ["/etc/facter/facter.conf", "/etc/puppetlabs/facter/facter.conf"];

export interface PuppetInvocation {
  puppetBin: string;
  /** The options the Puppet run gets (--confdir, --vardir, ...); none: Puppet's own defaults, as `puppet agent` on the node has them. */
  args: string[];
  env?: Record<string, string>;
}

interface Cached {
  settings: Record<string, string>;
  /** puppet.conf as it was when printed: its identity and times, or absent; "unknown" (printed again next time) if it changed around then. */
  stamp: string;
  conf: string;
  /** The Puppet that printed them (installStamp): an upgraded or replaced Puppet prints afresh. */
  install: string;
}

const cache = new Map<string, Cached>();
/** Where printed settings are kept between processes: text in, text out (the CLI's ownCacheFile). */
export interface SettingsStore {
  /** The kept text, or undefined for none (or one not to be believed). */
  read(): string | undefined;
  write(text: string): void;
}

/** The store printed settings are kept in between processes, or none (keepPuppetSettingsIn). */
let store: SettingsStore | undefined;
let storeRead = false;

/**
 * Keep printed settings in `kept` as well, and take those kept there: for the privileged helper,
 * a file in its own cache directory (root's, 0700) that only root's own file feeds; undefined:
 * memory only.
 */
export function keepPuppetSettingsIn(kept: SettingsStore | undefined): void {
  store = kept;
  storeRead = false;
}

/** The Puppet installation `bin` names: the file it resolves to on PATH, and the package database (an apt upgrade of Puppet changes both). */
function installStamp(bin: string): string {
  let path = bin;
  if (!isAbsolute(bin)) path = (process.env.PATH ?? "").split(delimiter).map((d) => join(d, bin)).find((p) => existsSync(p)) ?? bin;
  let real = path;
  try {
    real = realpathSync(path);
  } catch {
    // not there: its stamp says absent
  }
  return `${real}@${stampOf(real)};dpkg@${stampOf("/var/lib/dpkg/status")}`;
}

const complete = (s: Record<string, string>): boolean => Boolean(s.confdir && s.vardir && s.ssldir && s.certname);

function isCached(e: unknown): e is Cached {
  const c = e as Partial<Cached> | null;
  return (
    typeof c === "object" && c !== null && typeof c.stamp === "string" && typeof c.conf === "string" && typeof c.install === "string" &&
    typeof c.settings === "object" && c.settings !== null && Object.values(c.settings).every((v) => typeof v === "string") && complete(c.settings)
  );
}

function readStore(): void {
  if (storeRead || !store) return;
  storeRead = true;
  try {
    const j = JSON.parse(store.read() ?? "null") as { v?: unknown; entries?: unknown } | null;
    if (j?.v !== 1 || typeof j.entries !== "object" || j.entries === null) return;
    for (const [k, e] of Object.entries(j.entries)) if (isCached(e) && !cache.has(k)) cache.set(k, e);
  } catch {
    // garbled: printed afresh and written whole again
  }
}

function writeStore(): void {
  store?.write(JSON.stringify({ v: 1, entries: Object.fromEntries([...cache].filter(([, e]) => e.stamp !== "unknown")) }));
}

function stampOf(path: string): string {
  try {
    const st = statSync(path);
    return `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
  } catch {
    return "absent";
  }
}

/** Puppet's settings for this invocation, `--section agent`, printed by Puppet (kept while its puppet.conf is unchanged). */
export async function puppetSettings(inv: PuppetInvocation, o: { signal?: AbortSignal; timeoutMs?: number } = {}): Promise<Record<string, string>> {
  const key = JSON.stringify([inv.puppetBin, inv.args, inv.env ?? {}]);
  readStore();
  const hit = cache.get(key);
  const install = installStamp(inv.puppetBin);
  if (hit && stampOf(hit.conf) === hit.stamp && hit.install === install) return hit.settings;
  // puppet.conf before and after Puppet reads it: kept only if it did not change meanwhile (where
  // it is, is known from --confdir or an earlier print; the first print of the defaults is not kept)
  const confArg = inv.args.indexOf("--confdir");
  const known = confArg >= 0 ? inv.args[confArg + 1] : hit?.settings.confdir;
  const before = known ? stampOf(join(known, "puppet.conf")) : undefined;
  const r = await execCommand(inv.puppetBin, ["config", "print", ...PRINTED, "--section", "agent", ...inv.args, "--color", "false"], {
    env: { ...process.env, ...inv.env },
    ...(o.signal ? { signal: o.signal } : {}),
    timeoutMs: o.timeoutMs ?? 120_000,
  });
  if (r.timedOut || r.code !== 0) throw new MusterError("MUSTER_PUPPET_FAILED", `puppet config print failed (${r.timedOut ? "timed out" : `exit ${r.code}`}), so the helper cannot tell where Puppet loads code from: ${tailLines(r.output, 5)}`);
  const settings = parseConfigPrint(PRINTED, r.output);
  if (!complete(settings)) throw new MusterError("MUSTER_PUPPET_FAILED", `puppet config print named no confdir, vardir, ssldir or certname: ${tailLines(r.output, 5)}`);
  const conf = join(settings.confdir!, "puppet.conf");
  const after = stampOf(conf);
  cache.set(key, { settings, conf, stamp: known === settings.confdir && before === after ? after : "unknown", install });
  writeStore();
  return settings;
}

/** Every absolute path in these settings' values (path lists split on `:`). */
export function settingPaths(settings: Record<string, string>): { path: string; why: string }[] {
  const out: { path: string; why: string }[] = [];
  for (const name of PUPPET_CODE_SETTINGS) {
    for (const p of (settings[name] ?? "").split(":")) if (isAbsolute(p.trim())) out.push({ path: p.trim(), why: `Puppet's ${name}` });
  }
  return out;
}

/**
 * Absolute paths a facter.conf names (external-dir, custom-dir, and anything else: a path there
 * is taken as a place Facter may load from, which can only refuse more). HOCON, read loosely:
 * comments dropped, every quoted or bare absolute path kept.
 */
export function facterConfPaths(text: string): string[] {
  const body = text
    .split("\n")
    .map((l) => l.replace(/(^|\s)(#|\/\/).*$/, "$1"))
    .join("\n");
  return [...body.matchAll(/(?:^|[\s"'=:[,])(\/[^\s"',[\]{}]*)/g)].map((m) => m[1]!.replace(/(.)\/+$/, "$1"));
}

/**
 * Where root's Puppet and Facter load code from, beyond the fixed list (src/puppet/root-code.ts):
 * what each invocation's settings name, and what facter.conf names.
 */
export async function puppetCodeDirs(invocations: PuppetInvocation[], o: { signal?: AbortSignal } = {}): Promise<{ path: string; why: string }[]> {
  const out: { path: string; why: string }[] = [];
  const seen = new Set<string>();
  for (const inv of invocations) {
    const key = JSON.stringify(inv);
    if (seen.has(key)) continue;
    seen.add(key);
    out.push(...settingPaths(await puppetSettings(inv, o)));
  }
  for (const f of FACTER_CONFS) if (existsSync(f)) for (const path of facterConfPaths(readFileSync(f, "utf8"))) out.push({ path, why: `named in ${f}` });
  return out;
}
