import { spawn } from "node:child_process";
import { existsSync } from "node:fs";

// The node's facts: `muster server` reads them through here (puppet/ is the only place that runs
// Puppet's tools). What discovery matches is what Puppet uses (docs/decisions/privileged-helper.md,
// "Facts"): `puppet facts show`, Facter plus Puppet's own facts (puppetversion) and the modules'
// custom and external facts pluginsync put in the vardir, run as root (through the privileged
// helper when the daemon is not). Facter alone is the fallback where Puppet is not installed.

/** The system's external fact directories: what root's Facter reads, and every Puppet run sees. */
export const SYSTEM_FACT_DIRS = ["/etc/facter/facts.d", "/etc/puppetlabs/facter/facts.d"] as const;

/**
 * Facter's arguments. Run as another user than root (the packaged server runs as `muster`),
 * Facter reads ~/.facter/facts.d instead of the system's external fact directories, so the facts
 * a machine was given (its region, its role, the lifecycle stage) were missing from muster's view
 * while Puppet, run as root, saw them: the system's directories are named explicitly.
 */
export function facterArgs(uid: number, exists: (path: string) => boolean): string[] {
  const dirs = uid === 0 ? [] : SYSTEM_FACT_DIRS.filter((d) => exists(d));
  return ["--json", "--show-legacy", ...dirs.flatMap((d) => ["--external-dir", d])];
}

/**
 * `puppet facts show` arguments for the node's Puppet (its confdir and vardir: the custom facts
 * pluginsync left there). Run as another user than root, Puppet's Facter reads that user's fact
 * directory, not the system's: the first system directory there is is named (one only: the
 * command takes one).
 */
export function puppetFactsArgs(s: { confdir: string; vardir: string }, uid: number, exists: (path: string) => boolean): string[] {
  const system = uid === 0 ? undefined : SYSTEM_FACT_DIRS.find((d) => exists(d));
  return ["facts", "show", "--render-as", "json", "--show-legacy", "--color", "false", "--confdir", s.confdir, "--vardir", s.vardir, ...(system ? ["--external-dir", system] : [])];
}

/**
 * The facts Puppet uses on this node (`puppet facts show`), legacy ones too. Where Puppet is not
 * installed, Facter's (`facterCommand`); where Puppet fails to print them, Facter's as well, and
 * `onPartial` hears why.
 */
export async function puppetFacts(s: { puppetBin?: string; confdir: string; vardir: string }, o: { facterCommand: string; timeoutMs?: number; onPartial?: (reason: string) => void }): Promise<Record<string, unknown>> {
  const bin = s.puppetBin ?? "puppet";
  try {
    return await jsonFacts(bin, puppetFactsArgs(s, process.getuid?.() ?? 0, existsSync), o.timeoutMs, o.onPartial);
  } catch (e) {
    if ((e as { missing?: boolean }).missing) return runFacter(o.facterCommand, o.timeoutMs, o.onPartial);
    o.onPartial?.(`${(e as Error).message}; using Facter's facts without Puppet's`);
    return runFacter(o.facterCommand, o.timeoutMs, o.onPartial);
  }
}

/**
 * Runs `facter --json --show-legacy`: the facts a Puppet run sends its master, legacy ones too
 * (Facter 4 hides `ipaddress`, `osfamily`, ... unless asked, and mcprovision configs name them, as
 * `target.ipaddress_fact: ipaddress` does). Facter exits non-zero when some fact fails to resolve (in containers, for
 * instance, it cannot read /proc/1/environ) yet still prints every other fact: a JSON object on
 * stdout is used whatever the exit code, and `onPartial` hears about the failure.
 */
export function runFacter(command: string, timeoutMs = 60_000, onPartial?: (reason: string) => void): Promise<Record<string, unknown>> {
  return jsonFacts(command, facterArgs(process.getuid?.() ?? 0, existsSync), timeoutMs, onPartial);
}

/** A command that prints the facts as one JSON object (facter --json, puppet facts show). */
function jsonFacts(command: string, args: string[], timeoutMs = 60_000, onPartial?: (reason: string) => void): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"] });
    const out: Buffer[] = [];
    let err = "";
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.stdout.on("data", (d: Buffer) => out.push(d));
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    child.once("error", (e: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      reject(Object.assign(new Error(`cannot run ${command}: ${e.message} (apt-get install facter, or set facts.facter: false)`), { missing: e.code === "ENOENT" }));
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      let v: unknown;
      try {
        v = JSON.parse(Buffer.concat(out).toString("utf8")) as unknown;
        if (!v || typeof v !== "object" || Array.isArray(v)) throw new Error("not an object");
      } catch (e) {
        const what = `${command} ${args[0] === "facts" ? "facts show" : "--json"}`;
        if (code !== 0) return reject(new Error(`${what} exited ${code}: ${err.slice(-500)}`));
        return reject(new Error(`${what} printed something that is not a JSON object: ${(e as Error).message}`));
      }
      if (code !== 0) onPartial?.(`${command} ${args[0] === "facts" ? "facts show" : "--json"} exited ${code} but printed facts; some did not resolve: ${err.slice(-500)}`);
      resolve(v as Record<string, unknown>);
    });
  });
}
