import { caClientName } from "../../config/site.js";
import { PUPPETDB_INCOMING, puppetDbTlsScript } from "../../config/puppetdb-site.js";
import { MusterError } from "../../errors.js";
import type { SiteMachineState } from "../state.js";
import { siteExec } from "./reach.js";
import { shortName } from "./roles.js";

// The site's PuppetDB on the console's machine: the masters' files copied there as docs/deploy.md
// section 10 says, its TLS script run, and the wait for Debian's unit to serve.

/**
 * PuppetDB's TLS from each master's CA (one certificate per name the masters reach it by), the
 * masters' CAs trusted and only the masters let in. Returns the names let in.
 */
export async function placePuppetDbTls(consoleMachine: SiteMachineState, masters: string[], pdbCerts: { name: string; cert: string; key: string }[], cas: string[]): Promise<{ allow: string[]; before: string }> {
  // the unit's run before the restart the script asks for: the wait below is for a later one
  const before = (await siteExec(consoleMachine, ["systemctl", "show", "-P", "InvocationID", "puppetdb.service"])).stdout.trim();
  const allow = masters.flatMap((id) => [id, caClientName(id)]);
  // the masters' files to PuppetDB's machine, as docs/deploy.md section 10 copies them, then its script
  const put = async (name: string, text: string) => {
    const w = await siteExec(consoleMachine, ["sh", "-c", `install -d -m 0700 ${PUPPETDB_INCOMING} && cat > ${PUPPETDB_INCOMING}/${name}`], text);
    if (w.status !== 0) throw new MusterError("MUSTER_USAGE", `could not write ${PUPPETDB_INCOMING}/${name} on ${consoleMachine.identity}: ${w.stderr.trim()}`);
  };
  for (const [i, c] of pdbCerts.entries()) {
    await put(`${c.name}.pem`, c.cert);
    await put(`${c.name}.key`, c.key);
    await put(`ca-${shortName(masters[i]!)}.pem`, cas[i]!);
  }
  // PuppetDB takes a minute to start: it does while the brokers take the masters in
  const tls = await siteExec(consoleMachine, ["sh", "-s"], puppetDbTlsScript({ names: pdbCerts.map((c) => c.name), allow, restart: "no-block" }));
  if (tls.status !== 0) throw new MusterError("MUSTER_USAGE", `PuppetDB's TLS on ${consoleMachine.identity} (docs/deploy.md#10-puppetdb): ${tls.stderr.trim()}`);
  return { allow, before };
}

/**
 * Resolves once Debian's PuppetDB unit is active (its ExecStartPost waits until PuppetDB serves) in
 * a run other than `before` (the one a queued restart ends: still active for a moment after it was
 * asked for).
 */
export async function waitForPuppetDb(m: SiteMachineState, timeoutMs: number, signal: AbortSignal, before = ""): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await siteExec(m, ["systemctl", "is-active", "puppetdb.service"]);
    // no run before (the script's restart was its first start): any active run is the one asked for
    if (r.stdout.trim() === "active" && (!before || (await siteExec(m, ["systemctl", "show", "-P", "InvocationID", "puppetdb.service"])).stdout.trim() !== before)) return;
    if (r.stdout.trim() === "failed") {
      const why = await siteExec(m, ["journalctl", "-u", "puppetdb", "-o", "cat", "--no-pager", "-n", "20"]);
      throw new MusterError("MUSTER_USAGE", `PuppetDB on ${m.identity} failed to start:\n${why.stdout.trim()}`);
    }
    if (signal.aborted) throw new MusterError("MUSTER_USAGE", "no longer waited for: the lab's start was abandoned");
    if (Date.now() > deadline) throw new MusterError("MUSTER_TIMEOUT", `PuppetDB on ${m.identity} is not running after ${Math.round(timeoutMs / 1000)} s (systemctl says ${r.stdout.trim()}); see \`muster lab exec ${m.identity} -- journalctl -u puppetdb\``);
    await new Promise((res) => setTimeout(res, 2000)); // the unit's state, asked again: systemd offers no wait a remote shell can hold
  }
}
