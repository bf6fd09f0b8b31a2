import type { Logger } from "pino";
import type { ServiceCheck, ServiceStatus } from "../../protocol/service.js";
import { caFor } from "./settings.js";

// A master as one of the site's services (docs/fleet.md#the-sites-services): the node hosting
// puppetca says, on each heartbeat, whether its puppetserver answers its status API and whether
// its CA answers, with the days left on the CA's certificate; the heartbeat itself says that the
// muster server answers. The two HTTP looks run in the background, at most one at a time, and a
// heartbeat carries the latest finished one, so a slow puppetserver never delays a heartbeat.

/** Days before the CA certificate's end from which its check warns. */
export const CA_EXPIRY_WARN_DAYS = 30;
const DAY_MS = 86_400_000;
/** How long one look may take before it counts as no answer. */
const PROBE_TIMEOUT_MS = 5_000;

export interface MasterProbe {
  at: number;
  checks: ServiceCheck[];
  details: Record<string, unknown>;
}

/** The checks from one look at puppetserver and its CA (pure: what they answered, and the clock). */
export function masterChecks(server: { ok: boolean; state: string } | Error, ca: { notAfter: string } | Error, now: number): { checks: ServiceCheck[]; details: Record<string, unknown> } {
  const checks: ServiceCheck[] = [];
  checks.push(server instanceof Error ? { name: "puppetserver", status: "fail", why: `no answer from its status API: ${server.message}` } : { name: "puppetserver", status: server.ok ? "ok" : "fail", why: `status API: ${server.state}` });
  let daysLeft: number | null = null;
  if (ca instanceof Error) checks.push({ name: "ca", status: "fail", why: `the CA does not answer: ${ca.message}` });
  else {
    daysLeft = Math.floor((Date.parse(ca.notAfter) - now) / DAY_MS);
    const status = daysLeft < 0 ? "fail" : daysLeft <= CA_EXPIRY_WARN_DAYS ? "warn" : "ok";
    checks.push({ name: "ca", status, why: daysLeft < 0 ? `answers, but its certificate expired on ${ca.notAfter}` : `answers; its certificate has ${daysLeft} days left (until ${ca.notAfter.slice(0, 10)})` });
  }
  return { checks, details: { ca_days_left: daysLeft, ca_not_after: ca instanceof Error ? null : ca.notAfter, puppetserver: server instanceof Error ? null : server.state } };
}

/** The puppetca agent's `service`: the latest look, a new one started when none runs. */
export function masterService(): (ctx: { identity: string; config: Record<string, unknown>; log: Logger }) => Promise<ServiceStatus> {
  let latest: MasterProbe | undefined;
  let running: Promise<MasterProbe> | undefined;
  const look = async (ctx: { identity: string; config: Record<string, unknown> }): Promise<MasterProbe> => {
    const ca = caFor({ timeout: PROBE_TIMEOUT_MS / 1000, ...ctx.config }, ctx.identity);
    const asError = (e: unknown) => (e instanceof Error ? e : new Error(String(e)));
    const [server, cert] = await Promise.all([ca.serverStatus().catch(asError), ca.caCertificate().catch(asError)]);
    const now = Date.now();
    const c = masterChecks(server, cert, now);
    return { at: now, checks: c.checks, details: { ...c.details, url: ca.settings.url } };
  };
  return async (ctx) => {
    if (!running) {
      running = look(ctx)
        .then((p) => (latest = p))
        .catch((e: unknown) => {
          ctx.log.warn({ err: (e as Error).message }, "could not look at puppetserver and its CA");
          return (latest = { at: Date.now(), checks: [{ name: "puppetserver", status: "fail", why: (e as Error).message }], details: {} });
        })
        .finally(() => (running = undefined));
    }
    const p = latest ?? (await running); // the first heartbeat waits for the first look
    return { role: "master", checks: [{ name: "muster server", status: "ok", why: "answers (this heartbeat)" }, ...p.checks], details: { ...p.details, checked_at: new Date(p.at).toISOString() } };
  };
}
