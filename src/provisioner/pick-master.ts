// Master choice, pure. For each criterion fact in order, the first master whose value equals the
// node's wins; with no match, the first master in identity order (stable across cycles and restarts).

export interface MasterCandidate {
  identity: string;
  facts: Record<string, unknown>;
}

export interface MasterChoice {
  master: MasterCandidate;
  /** The criterion that decided, or undefined for the fallback. */
  criterion?: string;
  value?: unknown;
}

const same = (a: unknown, b: unknown) => a !== undefined && a !== null && String(a) === String(b);

export function pickMaster(criteria: readonly string[], nodeFacts: Record<string, unknown>, masters: readonly MasterCandidate[]): MasterChoice | undefined {
  if (masters.length === 0) return undefined;
  const ordered = [...masters].sort((a, b) => a.identity.localeCompare(b.identity));
  for (const fact of criteria) {
    const want = nodeFacts[fact];
    if (want === undefined || want === null) continue;
    const m = ordered.find((x) => same(x.facts[fact], want));
    if (m) return { master: m, criterion: fact, value: want };
  }
  return { master: ordered[0]! };
}
