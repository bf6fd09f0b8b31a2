import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { MusterClient } from "../../client/client.js";
import { MusterError } from "../../errors.js";
import { loadOrCreateSigningKey } from "../../security/keys.js";
import * as machines from "../machines/index.js";
import type { LabMachinesState } from "../machines/index.js";
import type { LabState, SiteMachineState } from "../state.js";
import type { SiteFiles } from "./files.js";
import { siteExec } from "./reach.js";
import type { SiteRenderContext } from "./render.js";

// What the operator does to the site from the workstation, besides booting it: what each machine's
// user-data is rendered from, files copied to the brokers (and nats-server reloaded there), a file
// read off a machine once its user-data made it, the lab's Debian mirror served, a client of the site.

/** Where the admins' webhook receiver is reached from the lab network (a relay to the host's). */
export const RECEIVER_RELAY_PORT = 8081;
/** The puppetservers' JVM heap on a lab machine (2 cores, a shared host). */
const PUPPETSERVER_HEAP = "768m";

/** Serve a release's mirror (built with its image) at debian/<release> on the package server. */
export function linkMirror(packagesDir: string, release: string, mirror: string): void {
  const link = join(packagesDir, machines.MIRROR_PATH, release);
  mkdirSync(join(packagesDir, machines.MIRROR_PATH), { recursive: true });
  rmSync(link, { force: true });
  symlinkSync(mirror, link);
}

export function siteRenderContext(ms: LabMachinesState, files: SiteFiles): SiteRenderContext {
  return {
    creds: files.creds,
    aptRepo: ms.packages.url,
    aptKey: ms.packages.key,
    brokerFiles: (id) => ({ natsConfig: files.natsConfigs[id]!, users: files.users, clientsCa: files.clientsCa }),
    puppetCodeUrl: `http://${machines.RELAY_ADDRESS}:${machines.PACKAGE_PORT}/puppet-code.tar.gz`,
    registryToken: files.registryToken,
    webTokens: files.webTokens,
    provisionerConfig: files.provisionerConfig,
    notifyRecipients: [`http://${machines.RELAY_ADDRESS}:${RECEIVER_RELAY_PORT}/`],
    operator: operatorKey(),
    sshPublicKey: readFileSync(`${ms.ssh.key}.pub`, "utf8").trim(),
    puppetserverHeap: PUPPETSERVER_HEAP,
  };
}

/** The operator's own signing key: every machine obeys it (as the lab's nodes always have). */
function operatorKey(): { name: string; key: string } {
  const k = loadOrCreateSigningKey();
  return { name: k.name, key: k.publicKey };
}

/** A file a machine's user-data makes, once it is there. */
export async function readWhenThere(m: SiteMachineState, path: string, timeoutMs: number, signal: AbortSignal): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await siteExec(m, ["cat", path]);
    if (r.status === 0 && r.stdout.includes("BEGIN CERTIFICATE")) return r.stdout;
    if (signal.aborted) throw new MusterError("MUSTER_USAGE", "no longer waited for: the lab's start was abandoned");
    if (Date.now() > deadline) throw new MusterError("MUSTER_TIMEOUT", `${m.identity} has no ${path} after ${timeoutMs / 1000} s: its user-data did not finish (see ${join(m.machine.dir, "console.log")}, and \`muster lab exec ${m.identity} -- cloud-init status --long\`)`);
    await new Promise((r) => setTimeout(r, 2000)); // cloud-init announces nothing to the host: look again
  }
}

/**
 * Copy a file the operator made to every broker and reload nats-server there (what section 3 tells
 * an operator). A broker that is off is passed over and named in the answer: it keeps its old file
 * until the operator copies the new one to it again.
 */
export async function pushToBrokers(site: SiteMachineState[], from: string, to: string): Promise<string[]> {
  const text = readFileSync(from, "utf8");
  const skipped: string[] = [];
  for (const b of site.filter((x) => x.role === "broker")) {
    if (!existsSync(b.machine.dir) || !machines.machineLeader(b.machine.dir)) {
      skipped.push(b.identity);
      continue;
    }
    const w = await siteExec(b, ["sh", "-c", `cat > ${to}.new && chmod 0644 ${to}.new && mv ${to}.new ${to}`], text);
    if (w.status !== 0) throw new MusterError("MUSTER_USAGE", `could not write ${to} on ${b.identity}: ${w.stderr.trim()}`);
    const r = await siteExec(b, ["systemctl", "reload", "nats-server.service"]);
    if (r.status !== 0) throw new MusterError("MUSTER_USAGE", `nats-server on ${b.identity} did not reload: ${r.stderr.trim()}`);
  }
  return skipped;
}

/** A client of the site as its operator (tests and `lab` commands). */
export async function siteClient(s: LabState, name: string): Promise<MusterClient> {
  return MusterClient.connect({ brokers: s.site!.brokers, collective: s.collective, name, tls: s.tls.admin });
}
