import { readFileSync } from "node:fs";
import { Agent, request } from "node:https";
import type { TlsSettings } from "../../broker/connect.js";
import { MusterClient } from "../../client/client.js";
import { describeMeta, metaRemedy, parseMetaView, type MetaView } from "../../broker/meta-group.js";
import { MusterError } from "../../errors.js";
import { DEFAULT_STATE_BUCKET } from "../../protocol/buckets.js";
import { ProvisionState } from "../../provisioner/state.js";
import { labWebToken } from "../credentials.js";
import { machineExecAsync, machineStory } from "../machines/index.js";
import type { SiteMachineState } from "../state.js";
import type { SiteFiles } from "./files.js";

// What "up" means for a site machine, asked from the operator's side: inside the machine (cloud-init
// done, its role's units active), and over the relays (the brokers' JetStream cluster answers, the
// registry and the console answer). Each wait has a deadline and says where to look when it passes.

const abandoned = () => new MusterError("MUSTER_USAGE", "no longer waited for: the lab's start was abandoned");
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms)); // what is polled announces nothing to the host

/** Run a command in a site machine (as `muster lab exec` does); a machine that is off answers status null. */
export function siteExec(m: { machine: { dir: string } }, argv: string[], input?: string): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return machineExecAsync(m.machine.dir, argv, { ...(input !== undefined ? { input } : {}) });
}

/** How long cloud-init may say "not started" in a machine that answers before its boot is taken as stuck. */
export const STUCK_BOOT_MS = 180_000;

/**
 * What to do about a machine whose cloud-init has said "not started" since `notStartedSince` (pure):
 * wait, or reboot it, once. A boot that started no cloud-init stage in minutes is stuck (seen once
 * in CI after a reboot: a master answered for 20 min with cloud-init not started); an operator
 * reboots it, and says so. A second stuck boot is left for the deadline's error to tell.
 */
export function stuckBootAction(notStartedSince: number | undefined, now: number, rebootedAlready: boolean): "wait" | "reboot" {
  return notStartedSince !== undefined && !rebootedAlready && now - notStartedSince > STUCK_BOOT_MS ? "reboot" : "wait";
}

/**
 * Resolves once cloud-init is done in the machine and every unit of its role is active; rejects at
 * once when cloud-init reports an error, or `off()` says the machine went off. A boot stuck before
 * cloud-init started is rebooted once (stuckBootAction), told to `say` with the machine's story.
 */
export async function machineUp(m: SiteMachineState, units: string[], timeoutMs: number, signal: AbortSignal, off: () => string | undefined, say: (line: string) => void = () => undefined): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const where = `see ${m.machine.dir}/console.log and \`muster lab exec ${m.identity} -- cloud-init status --long\``;
  let notStartedSince: number | undefined;
  let rebooted = false;
  for (;;) {
    const ci = await siteExec(m, ["cloud-init", "status"]);
    notStartedSince = /status: not started/.test(ci.stdout) ? (notStartedSince ?? Date.now()) : undefined;
    if (stuckBootAction(notStartedSince, Date.now(), rebooted) === "reboot") {
      rebooted = true;
      say(`${m.identity}: cloud-init has not started in ${STUCK_BOOT_MS / 1000} s of its boot: rebooting it (${where}). What it says:\n${await machineStory(m.machine.dir, units)}`);
      await siteExec(m, ["systemctl", "reboot"]);
      notStartedSince = undefined;
    }
    if (/status: error/.test(ci.stdout)) {
      const why = await siteExec(m, ["sh", "-c", "cloud-init status --long; tail -n 30 /var/log/cloud-init-output.log"]);
      throw new MusterError("MUSTER_USAGE", `${m.identity}'s user-data failed:\n${why.stdout.trim()}\n(${where})`);
    }
    if (/status: done/.test(ci.stdout)) {
      const active = await siteExec(m, ["systemctl", "is-active", ...units]);
      if (active.status === 0) return;
      const failed = active.stdout.split("\n").map((l, i) => [units[i], l] as const).filter(([, l]) => l === "failed");
      if (failed.length) throw new MusterError("MUSTER_USAGE", `${m.identity}: ${failed.map(([u]) => u).join(", ")} failed (\`muster lab exec ${m.identity} -- journalctl -u ${failed[0]![0]}\`)`);
    }
    const why = off();
    if (why) throw new MusterError("MUSTER_USAGE", why);
    if (signal.aborted) throw abandoned();
    if (Date.now() > deadline) throw new MusterError("MUSTER_TIMEOUT", `${m.identity} was not up within ${timeoutMs / 1000} s: cloud-init ${ci.stdout.trim() || "did not answer"}, units ${units.join(", ")} (${where}). What it says:\n${await machineStory(m.machine.dir, units)}`);
    await pause(2000);
  }
}

/** The brokers as the lab reaches them: a member's name, its monitoring port (relayed), its machine. */
export interface ClusterMember {
  server: string;
  monitor: string;
  restart: () => Promise<void>;
  /** Its nats-server's last warnings and errors, for a timeout's message. */
  complaints: () => Promise<string>;
}

/** Each member's view of JetStream's meta group, from its monitoring port (GET /jsz). */
export async function metaViews(members: Pick<ClusterMember, "server" | "monitor">[]): Promise<MetaView[]> {
  return Promise.all(
    members.map(async (m) => {
      try {
        const r = await fetch(new URL("jsz", m.monitor), { signal: AbortSignal.timeout(3000) });
        return parseMetaView(m.server, await r.text());
      } catch (e) {
        return { server: m.server, error: `monitoring port silent (${(e as Error).message})` };
      }
    }),
  );
}

/** How long the cluster may refuse placement before the members the meta leader does not count are restarted. */
export const META_STUCK_MS = 90_000;

/**
 * Resolves once the brokers' JetStream cluster has a leader and takes a replicated bucket's writes.
 * A member the meta leader still does not count after META_STUCK_MS (nats-server 2.10 has left one
 * out of a freshly formed group: every R3 stream is then refused "no suitable peers for placement")
 * has its nats-server restarted, said out loud, as docs/deploy.md tells an operator; if that is not
 * enough within another META_STUCK_MS, the leader's is restarted (a new leader counts afresh). A
 * timeout names each member's view of the group and its nats-server's last complaints.
 */
export async function waitForCluster(brokers: string[], tls: TlsSettings, timeoutMs: number, signal: AbortSignal, members: ClusterMember[] = [], say: (line: string) => void = () => {}): Promise<void> {
  const started = Date.now();
  const deadline = started + timeoutMs;
  let acted = started;
  let round = 0;
  const client = await MusterClient.connect({ brokers, name: "muster-lab-cluster", tls, persistent: true });
  try {
    for (;;) {
      try {
        // what the provisioners will make: the state bucket, with as many copies as there are brokers
        await (await ProvisionState.open(client, DEFAULT_STATE_BUCKET, { replicas: brokers.length })).bucket.status();
        return;
      } catch (e) {
        if (signal.aborted) throw abandoned();
        const placement = /no suitable peers/.test((e as Error).message);
        if (placement && members.length && Date.now() - acted > META_STUCK_MS) {
          const views = await metaViews(members);
          const { restart, out } = metaRemedy(views, round);
          if (restart.length) {
            say(`JetStream's meta group leaves out ${out.join(", ")} (${describeMeta(views)}): restarting nats-server on ${restart.join(", ")}${round ? ", the leader" : ""} (docs/deploy.md#a-member-left-out-of-the-meta-group)`);
            for (const s of restart) await members.find((m) => m.server === s)!.restart();
            round++;
            acted = Date.now();
          }
        }
        if (Date.now() > deadline) {
          const views = members.length ? ` Each member's view of the meta group: ${describeMeta(await metaViews(members))}. Their last complaints:\n${(await Promise.all(members.map(async (m) => `${m.server}:\n${(await m.complaints()) || "  (none)"}`))).join("\n")}\n` : "";
          throw new MusterError("MUSTER_TIMEOUT", `the brokers' JetStream cluster did not answer within ${timeoutMs / 1000} s: ${(e as Error).message}.${views} (\`muster lab exec nats1.lab -- journalctl -u nats-server\`)`);
        }
        await pause(1000);
      }
    }
  } finally {
    await client.close();
  }
}

/** Resolves once the registry (with its token) and the console (with a viewer's token, over its HTTPS) answer through the relays. */
export async function waitForConsole(reach: { web: string; registry: string }, files: SiteFiles, timeoutMs: number, signal: AbortSignal): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const agent = new Agent({ ca: readFileSync(files.creds.ca.cert) });
  const viewer = labWebToken(files.webTokens, "viewer");
  const registryToken = readFileSync(files.registryToken, "utf8").trim();
  const ok = (url: string, token: string | undefined, https: boolean) =>
    https
      ? new Promise<boolean>((resolve) => {
          const req = request(url, { agent, headers: token ? { authorization: `Bearer ${token}` } : {}, timeout: 3000 }, (res) => (res.resume(), resolve(res.statusCode === 200)));
          req.once("error", () => resolve(false));
          req.once("timeout", () => req.destroy());
          req.end();
        })
      : fetch(url, { headers: token ? { authorization: `Bearer ${token}` } : {}, signal: AbortSignal.timeout(3000) }).then((r) => r.ok, () => false);
  for (;;) {
    const [registry, web] = await Promise.all([ok(`${reach.registry}/healthz`, registryToken, false), ok(new URL("api/session", reach.web).href, viewer, true)]);
    if (registry && web) return;
    if (signal.aborted) throw abandoned();
    if (Date.now() > deadline) throw new MusterError("MUSTER_TIMEOUT", `console.lab did not answer within ${timeoutMs / 1000} s: registry ${registry ? "ok" : "silent"} (${reach.registry}), console ${web ? "ok" : "silent"} (${reach.web}) (\`muster lab exec console.lab -- journalctl -u muster-registry -u muster-web\`)`);
    await pause(1000);
  }
}
