import type { ServiceCheck } from "../protocol/service.js";
import { registryWarning, type RegistryStatus } from "./select.js";
import type { ReceiverStats } from "./receiver.js";

// The registry as one of the site's services (docs/fleet.md#the-sites-services): its service
// heartbeat (src/beacon.ts) says it is alive, whether registrations reach it (the warning
// discovery prints: empty, filling, stale) and whether its writes to its bucket fail. Pure.

export function registryServiceStatus(s: RegistryStatus, stats: ReceiverStats, writeErrorsBefore: number, now: number): { checks: ServiceCheck[]; details: Record<string, unknown> } {
  const warning = registryWarning(s, now, "this daemon");
  const newErrors = stats.writeErrors - writeErrorsBefore;
  const checks: ServiceCheck[] = [
    warning ? { name: "registrations", status: "warn", why: warning } : { name: "registrations", status: "ok", why: `${s.nodes} current node${s.nodes === 1 ? "" : "s"}, the newest registration ${s.newest_seen === null ? "never" : `${Math.max(0, Math.round((now - s.newest_seen) / 1000))} s ago`}` },
    newErrors > 0 ? { name: "bucket", status: "fail", why: `${newErrors} write${newErrors === 1 ? "" : "s"} to its bucket failed since its last heartbeat` } : { name: "bucket", status: "ok", why: "its writes succeed" },
  ];
  return { checks, details: { nodes: s.nodes, newest_seen: s.newest_seen !== null ? new Date(s.newest_seen).toISOString() : null, received: stats.received, written: stats.written, write_errors: stats.writeErrors, dropped: stats.dropped } };
}
