import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { MusterError } from "../errors.js";

// Facts handed to a Puppet run as FACTER_<name> environment variables.

const FACT_NAME = /^[A-Za-z][A-Za-z0-9_]*$/;

export function isFactName(name: string): boolean {
  return FACT_NAME.test(name);
}

/** The scalar facts among `names` (those the node daemon knows: its facts file, facter). */
export function exportedFacts(names: readonly string[], facts: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const n of names) {
    const v = facts[n];
    if (typeof v === "string" || typeof v === "number" || typeof v === "boolean") out[n] = String(v);
  }
  return out;
}

// ---- facts that outlive a run: a file Facter reads on every later run ----
//
// A FACTER_<name> variable lasts one run. To make every later run see a fact, however it is
// started (the daemon, cron, `muster puppet runonce`), it goes into a file Facter itself reads:
//
//   *.yaml, *.yml, *.json, *.txt  an external fact for a directory Facter searches: its system
//                                 directory (/etc/facter/facts.d as root with Debian's facter;
//                                 AIO Puppet also reads /etc/puppetlabs/facter/facts.d)
//   *.rb                          a custom fact for a directory on Puppet's `factpath`, whose
//                                 default <vardir>/lib/facter:<vardir>/facts gives every node on
//                                 a machine its own (<vardir>/facts: pluginsync leaves it alone)
//
// Not Puppet's pluginfactdest (<vardir>/facts.d): pluginsync deletes what the master does not
// serve there. FACTER_<name> still wins over both kinds (checked with facter 4), so a later
// bootstrap run is told `bootstrap` whatever the file says.

export type FactFileKind = "yaml" | "json" | "txt" | "rb";

/** Pure: what kind of fact file a path names, by its extension; undefined when Facter would not read it. */
export function factFileKind(path: string): FactFileKind | undefined {
  const m = /\.(yaml|yml|json|txt|rb)$/.exec(path);
  if (!m) return undefined;
  return m[1] === "yml" ? "yaml" : (m[1] as FactFileKind);
}

/** Pure: the text of a fact file that sets `name` to `value` (a string). */
export function factFileContent(path: string, name: string, value: string): string {
  if (!isFactName(name)) throw new MusterError("MUSTER_PUPPET_FAILED", `invalid fact name ${JSON.stringify(name)}`);
  const kind = factFileKind(path);
  const header = "written by muster's provision agent when the node's bootstrap stage succeeded";
  switch (kind) {
    case "yaml":
      return `# ${header}\n${name}: ${JSON.stringify(value)}\n`;
    case "json":
      return `${JSON.stringify({ [name]: value })}\n`;
    case "txt":
      if (/[\r\n]/.test(value)) throw new MusterError("MUSTER_PUPPET_FAILED", `a .txt fact file holds one-line values only`);
      return `# ${header}\n${name}=${value}\n`;
    case "rb":
      // single quotes in Ruby: only \\ and \' are special
      return `# ${header}\nFacter.add(:${name}) do\n  setcode { '${value.replace(/[\\']/g, (c) => `\\${c}`)}' }\nend\n`;
    default:
      throw new MusterError("MUSTER_PUPPET_FAILED", `${path}: a fact file must end in .yaml, .yml, .json, .txt (external fact) or .rb (custom fact on Puppet's factpath)`);
  }
}

/**
 * Write a fact file atomically (a dot-named temp file, which Facter skips, then a rename), so a
 * run starting meanwhile sees the old file or the new one, never half of one. Unchanged files
 * are left alone. Returns whether the file changed.
 */
export function writeFactFile(path: string, name: string, value: string): boolean {
  const text = factFileContent(path, name, value);
  try {
    if (readFileSync(path, "utf8") === text) return false;
  } catch {
    /* absent: write it */
  }
  const tmp = join(dirname(path), `.${basename(path)}.muster-${process.pid}.tmp`);
  try {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(tmp, text, { mode: 0o644 });
    renameSync(tmp, path);
  } catch (e) {
    try {
      rmSync(tmp, { force: true });
    } catch {
      /* nothing was written */
    }
    throw new MusterError("MUSTER_PUPPET_FAILED", `cannot write the fact file ${path}: ${(e as Error).message}`, { cause: e });
  }
  return true;
}
