import { readFileSync } from "node:fs";
import { join } from "node:path";
import { tailLines } from "../../puppet/exec.js";
import { machineExecAsync } from "./machine.js";

/**
 * A machine's own account of its boot, for an error that says it is not up: cloud-init's status,
 * where systemd is (is-system-running, the jobs it still waits on, the units that failed), the last
 * lines of cloud-init's, muster-server's and `units`' journals, and the end of its console.log (a
 * boot stuck before cloud-init, or a machine that is off, tells its story only there). CI keeps only
 * what the test printed: this is what says why the next time a machine does not come up.
 */
export async function machineStory(dir: string, units: string[] = []): Promise<string> {
  const journals = ["cloud-init-main", "cloud-init-local", "cloud-init-network", "cloud-final", "muster-server", ...units].map((u) => `-u ${u}`).join(" ");
  const r = await machineExecAsync(
    dir,
    ["sh", "-c", `cloud-init status --long 2>&1 | head -20; echo "systemd: $(systemctl is-system-running 2>&1)"; systemctl list-jobs --no-pager 2>&1 | head -15; systemctl --failed --no-legend --no-pager 2>&1 | head -10; journalctl -q --no-pager -b -n 30 ${journals} 2>&1`],
    { timeoutMs: 30_000 },
  );
  const said = r.status === null ? `it does not answer (${r.stderr.trim() || "off"})` : (r.stdout + r.stderr).trim();
  return `${said}\nthe end of its console.log:\n${consoleTail(dir)}`.split("\n").map((l) => `  ${l}`).join("\n");
}

function consoleTail(dir: string): string {
  try {
    return tailLines(readFileSync(join(dir, "console.log"), "utf8"), 25);
  } catch (e) {
    return `(${(e as Error).message})`;
  }
}
