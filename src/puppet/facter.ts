import { spawn } from "node:child_process";

// Facter, the node's own fact source: `muster server` reads its facts through here (puppet/ is
// the only place that runs Puppet's tools).

/**
 * Runs `facter --json --show-legacy`: the facts a Puppet run sends its master, legacy ones too
 * (Facter 4 hides `ipaddress`, `osfamily`, ... unless asked, and mcprovision configs name them, as
 * `target.ipaddress_fact: ipaddress` does). Facter exits non-zero when some fact fails to resolve (in containers, for
 * instance, it cannot read /proc/1/environ) yet still prints every other fact: a JSON object on
 * stdout is used whatever the exit code, and `onPartial` hears about the failure.
 */
export function runFacter(command: string, timeoutMs = 60_000, onPartial?: (reason: string) => void): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, ["--json", "--show-legacy", ...externalDirArgs()], { stdio: ["ignore", "pipe", "pipe"] });
    const out: Buffer[] = [];
    let err = "";
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.stdout.on("data", (d: Buffer) => out.push(d));
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    child.once("error", (e) => {
      clearTimeout(timer);
      reject(new Error(`cannot run ${command}: ${e.message} (apt-get install facter, or set facts.facter: false)`));
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      let v: unknown;
      try {
        v = JSON.parse(Buffer.concat(out).toString("utf8")) as unknown;
        if (!v || typeof v !== "object" || Array.isArray(v)) throw new Error("not an object");
      } catch (e) {
        if (code !== 0) return reject(new Error(`${command} --json exited ${code}: ${err.slice(-500)}`));
        return reject(new Error(`${command} --json printed something that is not a JSON object: ${(e as Error).message}`));
      }
      if (code !== 0) onPartial?.(`${command} --json exited ${code} but printed facts; some did not resolve: ${err.slice(-500)}`);
      resolve(v as Record<string, unknown>);
    });
  });
}

/**
 * Facter run by anyone but root reads external facts from the user's home only (~/.facter/facts.d),
 * not the system directories root's Facter and every Puppet run read. The unprivileged node daemon
 * (the package's muster-server) names those, so it sees the facts cloud-init or provisioning wrote
 * there (country, region, lifecycle_stage). A directory that does not exist is skipped.
 */
export const SYSTEM_FACT_DIRS = ["/etc/facter/facts.d", "/etc/puppetlabs/facter/facts.d", "/opt/puppetlabs/facter/facts.d"] as const;

function externalDirArgs(): string[] {
  return process.getuid?.() === 0 ? [] : SYSTEM_FACT_DIRS.flatMap((d) => ["--external-dir", d]);
}
