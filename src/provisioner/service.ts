import type { ServiceCheck } from "../protocol/service.js";

// A provisioner as one of the site's services (docs/fleet.md#the-sites-services): its service
// heartbeat (src/beacon.ts) says it is alive, which nodes it holds a claim on, how many wait for a
// slot, and how its last discovery cycle went. Pure: what the scheduler knows and the clock in.

export interface ProvisionerNow {
  claims: { provisioning: string[]; queued: number; parked: string[]; waitingForMaster: string[] };
  lastCycle?: { at: number; tookMs: number; found: number; error?: string };
  /** Seconds between cycles (config sleeptime). */
  sleeptimeS: number;
  id: string;
}

const LISTED = 50;

export function provisionerStatus(p: ProvisionerNow, now: number): { checks: ServiceCheck[]; details: Record<string, unknown> } {
  const c = p.lastCycle;
  const ago = c ? Math.max(0, Math.round((now - c.at) / 1000)) : 0;
  // a cycle is a discovery (its timeout) and a look at the masters: three sleeptimes, at least a minute, is late
  const lateS = Math.max(60, 3 * p.sleeptimeS);
  const cycle: ServiceCheck = !c
    ? { name: "cycle", status: "ok", why: "its first discovery cycle is running" }
    : c.error
      ? { name: "cycle", status: "fail", why: `its last discovery cycle (${ago} s ago) failed: ${c.error}` }
      : ago > lateS
        ? { name: "cycle", status: "fail", why: `no discovery cycle has finished for ${ago} s (one is due every ${p.sleeptimeS} s)` }
        : { name: "cycle", status: "ok", why: `its last discovery cycle, ${ago} s ago, found ${c.found} waiting node${c.found === 1 ? "" : "s"} in ${c.tookMs} ms` };
  const k = p.claims;
  const held = k.provisioning.length + k.parked.length + k.waitingForMaster.length;
  const claims: ServiceCheck = { name: "claims", status: "ok", why: held ? `holds ${held} node${held === 1 ? "" : "s"}: ${k.provisioning.length} provisioning (${k.queued} of them waiting for a slot), ${k.parked.length} gone, ${k.waitingForMaster.length} waiting for a master` : "holds no node" };
  return {
    checks: [cycle, claims],
    details: {
      id: p.id,
      provisioning: k.provisioning.slice(0, LISTED),
      provisioning_count: k.provisioning.length,
      queued: k.queued,
      parked: k.parked.slice(0, LISTED),
      waiting_for_master: k.waitingForMaster.slice(0, LISTED),
      last_cycle: c ? { at: new Date(c.at).toISOString(), took_ms: c.tookMs, found: c.found, error: c.error ?? null } : null,
    },
  };
}
