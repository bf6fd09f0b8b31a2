import { isValidIdentity } from "./subjects.js";

// The Puppet masters the provisioners have seen: kept in the provisioner's state bucket under one
// key of its own (KNOWN_MASTERS_KEY), next to the node records, so that a master that does not
// answer right now (not started yet, rebooting, powered off) is still known to be there, with the
// facts its nodes are matched on (docs/provisioner.md#each-node-on-its-regions-master). Written by
// the provisioners (compare-and-set, merged), read by them, dropped per master by `muster
// decommission`. Only src/provisioner/state.ts reads or writes the bucket. The bucket is writable by
// every admin credential: a value is checked entry by entry, and one that is not valid is ignored
// with a reason, never cast.

/**
 * The key of the known masters in the state bucket. A node's key never holds a `/` (identities are
 * letters, digits and `_-.:@`, and recordKey escapes nothing else into one), so this key is no node's.
 */
export const KNOWN_MASTERS_KEY = "muster/known-masters";

/** Masters kept, at most: a site has a few; a value claiming thousands is not read. */
export const MAX_KNOWN_MASTERS = 500;
/** The longest fact value kept (a criterion fact is a region, a country, a rack). */
const MAX_FACT_TEXT = 256;

/** One master: its identity, the criterion facts it was seen with, and when it was last seen (ms epoch). */
export interface KnownMaster {
  identity: string;
  facts: Record<string, string>;
  seen: number;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

export function encodeKnownMasters(masters: readonly KnownMaster[]): Uint8Array {
  return enc.encode(JSON.stringify({ masters }));
}

export type KnownMastersVerdict = { ok: true; masters: KnownMaster[] } | { ok: false; reason: string };

/** The stored value, or why it is not one. */
export function decodeKnownMasters(data: Uint8Array): KnownMastersVerdict {
  let v: unknown;
  try {
    v = JSON.parse(dec.decode(data));
  } catch {
    return { ok: false, reason: "not JSON" };
  }
  const list = (v as { masters?: unknown } | null)?.masters;
  if (!Array.isArray(list)) return { ok: false, reason: "no masters list" };
  if (list.length > MAX_KNOWN_MASTERS) return { ok: false, reason: `${list.length} masters (at most ${MAX_KNOWN_MASTERS})` };
  const out: KnownMaster[] = [];
  for (const [i, m] of list.entries()) {
    const e = m as Partial<KnownMaster> | null;
    if (typeof e?.identity !== "string" || !isValidIdentity(e.identity)) return { ok: false, reason: `masters[${i}]: no valid identity` };
    if (typeof e.seen !== "number" || !Number.isFinite(e.seen)) return { ok: false, reason: `masters[${i}]: seen is not a time in ms` };
    if (typeof e.facts !== "object" || e.facts === null || Array.isArray(e.facts)) return { ok: false, reason: `masters[${i}]: facts is not an object` };
    const facts = Object.entries(e.facts);
    if (!facts.every(([, x]) => typeof x === "string" && x.length <= MAX_FACT_TEXT)) return { ok: false, reason: `masters[${i}]: a fact that is not text of at most ${MAX_FACT_TEXT} characters` };
    out.push({ identity: e.identity, facts: Object.fromEntries(facts) as Record<string, string>, seen: e.seen });
  }
  return { ok: true, masters: out };
}

/** A fact's value as a criterion compares it: its text (numbers and booleans too), else absent. */
export function criterionText(v: unknown): string | undefined {
  if (typeof v === "string") return v;
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  return undefined;
}

/**
 * The known masters once `seen` (masters that answered now, with their facts) are merged in: each
 * keeps the criterion facts it answered with. Undefined when nothing that matters changed (a
 * master new, or its criterion facts different), so a steady site writes nothing; `seen` times
 * alone are refreshed only when a day old, for the same reason.
 */
export function mergeSeen(known: readonly KnownMaster[], seen: readonly { identity: string; facts: Record<string, unknown> }[], criteria: readonly string[], now: number): KnownMaster[] | undefined {
  const byId = new Map(known.map((m) => [m.identity, m]));
  let changed = false;
  for (const s of seen) {
    const facts: Record<string, string> = {};
    for (const c of criteria) {
      const t = criterionText(s.facts[c]);
      if (t !== undefined && t.length <= MAX_FACT_TEXT) facts[c] = t;
    }
    const was = byId.get(s.identity);
    const same = was && sameFacts(was.facts, facts);
    if (same && now - was.seen < 86_400_000) continue;
    byId.set(s.identity, { identity: s.identity, facts: same ? was.facts : { ...was?.facts, ...facts }, seen: now });
    changed = true;
  }
  if (!changed) return undefined;
  return [...byId.values()].sort((a, b) => a.identity.localeCompare(b.identity)).slice(0, MAX_KNOWN_MASTERS);
}

function sameFacts(a: Record<string, string>, b: Record<string, string>): boolean {
  return Object.entries(b).every(([k, v]) => a[k] === v);
}
