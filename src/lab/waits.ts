import { join } from "node:path";
import { MusterClient } from "../client/client.js";
import { MusterError } from "../errors.js";
import { labProvisionerClient } from "./broker.js";
import { labWebToken } from "./credentials.js";
import type { MusterProcess } from "./processes.js";
import { labBrokers, type LabNode, type LabRegistry, type LabState, type LabWeb } from "./state.js";

// What "up" means for each part of the lab, with a deadline and a message that says where to look:
// muster servers answer discovery (in the fleet, or in the provisioning collective for nodes that
// wait to be provisioned), the registry and the console answer over HTTP.

/** What waitForNodes needs of a lab: enough to connect as its operator or its provisioner. */
export type LabReach = Pick<LabState, "broker" | "site" | "collective" | "provisioningCollective" | "tls" | "provisionerEnv" | "machines">;

/**
 * Resolves when every identity has answered discovery (in the fleet, or as the provisioner in the
 * provisioning collective), each once, not necessarily all in one round; rejects with the ones
 * that never did at the deadline, or at once with what `failed` says when it says something.
 */
export async function waitForNodes(s: LabReach, identities: string[], timeoutMs: number, where: "fleet" | "provisioning" = "fleet", onFound?: (identity: string) => void, failed?: () => string | undefined): Promise<void> {
  const client = where === "provisioning" ? await labProvisionerClient(s, "muster-lab-wait") : await MusterClient.connect({ brokers: labBrokers(s), collective: s.collective, name: "muster-lab-wait", tls: s.tls.admin });
  const deadline = Date.now() + timeoutMs;
  const seen = new Set<string>();
  try {
    for (;;) {
      const found = new Set(await client.discover({ timeoutMs: 2000, idleMs: 300 }));
      for (const id of identities) if (found.has(id) && !seen.has(id)) (seen.add(id), onFound?.(id));
      // a node that answered once came up: in the provisioning collective it may be provisioned
      // and gone from it before a slower one answers (CI: node07 done in 52 s, node08 still booting)
      const missing = identities.filter((i) => !seen.has(i));
      if (missing.length === 0) return;
      const why = failed?.(); // a machine that powered off will not answer: say so now, not at the deadline
      if (why) throw new MusterError("MUSTER_USAGE", why);
      if (Date.now() > deadline) {
        const where = s.machines ? "their consoles under machines/<identity>/console.log, and `muster lab exec <identity> -- journalctl -u cloud-final -u muster-server`" : "their logs under logs/";
        throw new MusterError("MUSTER_TIMEOUT", `lab nodes did not come up: ${missing.join(", ")} (see ${where})`);
      }
    }
  } finally {
    await client.close();
  }
}

/** Poll `ok` until it answers true; rejects with `late()` at the deadline, or at once when `signal` aborts. */
async function pollHttp(ok: () => Promise<boolean>, timeoutMs: number, everyMs: number, late: () => string, signal?: AbortSignal): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      if (await ok()) return;
    } catch {
      // not listening yet
    }
    if (signal?.aborted) throw new MusterError("MUSTER_USAGE", "no longer waited for: the lab's start was abandoned");
    if (Date.now() > deadline) throw new MusterError("MUSTER_TIMEOUT", late());
    await new Promise((r) => setTimeout(r, everyMs)); // polling an HTTP port: no event to wait on
  }
}

/** Resolves once the console answers an authenticated request; rejects at the deadline pointing at its log. */
export async function waitForWeb(w: LabWeb, timeoutMs: number, signal?: AbortSignal): Promise<void> {
  const token = labWebToken(w.tokens_file, "viewer");
  await pollHttp(
    async () => (await fetch(new URL("api/session", w.url), { signal: AbortSignal.timeout(2000), headers: { authorization: `Bearer ${token}` } })).ok,
    timeoutMs,
    200,
    () => `the lab web console did not answer on ${w.url} within ${timeoutMs / 1000} s (see ${w.log})`,
    signal,
  );
}

/** Resolves once the lab registry answers over HTTP; rejects at the deadline pointing at its log. */
export async function waitForRegistry(r: LabRegistry, timeoutMs: number, signal?: AbortSignal): Promise<void> {
  await pollHttp(async () => (await fetch(`${r.url}/healthz`, { signal: AbortSignal.timeout(2000) })).ok, timeoutMs, 250, () => `the lab registry did not answer on ${r.url} within ${timeoutMs / 1000} s (see ${r.log})`, signal);
}

/** Machines whose supervisor exited before they answered (a boot that failed): what to tell the operator. */
export function poweredOff(nodes: LabNode[], servers: Map<string, MusterProcess>): string | undefined {
  const off = nodes.filter((n) => n.machine && servers.get(n.identity)?.exitCode() !== undefined);
  if (!off.length) return undefined;
  return `machine(s) powered off before they answered: ${off.map((n) => `${n.identity} (see ${join(n.machine!.dir, "supervisor.log")} and console.log)`).join(", ")}`;
}
