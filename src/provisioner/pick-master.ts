import { criterionText } from "../protocol/known-masters.js";

// Master choice, pure. For each criterion fact in order, the first master whose value equals the
// node's wins; with no match, the first master in identity order (stable across cycles and restarts).
// chooseMaster adds what the node's round knows: the master it already has, and the masters known
// to exist that do not answer now, which its criteria may pick over one that answers
// (docs/provisioner.md#each-node-on-its-regions-master).

export interface MasterCandidate {
  identity: string;
  facts: Record<string, unknown>;
}

export interface MasterChoice<M extends MasterCandidate = MasterCandidate> {
  master: M;
  /** The criterion that decided, or undefined for the fallback. */
  criterion?: string;
  value?: unknown;
}

const same = (a: unknown, b: unknown) => {
  const t = criterionText(a);
  return t !== undefined && t === criterionText(b);
};
const byIdentity = <M extends MasterCandidate>(ms: readonly M[]) => [...ms].sort((a, b) => a.identity.localeCompare(b.identity));

export function pickMaster<M extends MasterCandidate>(criteria: readonly string[], nodeFacts: Record<string, unknown>, masters: readonly M[]): MasterChoice<M> | undefined {
  if (masters.length === 0) return undefined;
  const ordered = byIdentity(masters);
  for (const fact of criteria) {
    const want = nodeFacts[fact];
    if (want === undefined || want === null) continue;
    const m = ordered.find((x) => same(x.facts[fact], want));
    if (m) return { master: m, criterion: fact, value: want };
  }
  return { master: ordered[0]! };
}

/** What chooseMaster is told about one node's round. */
export interface ChoiceInput<M extends MasterCandidate> {
  criteria: readonly string[];
  /** The node's facts. */
  facts: Record<string, unknown>;
  /** The masters that answer now. */
  answering: readonly M[];
  /** Masters known to exist (seen before, or configured), with the facts they are matched on; those among `answering` count as answering. */
  known: readonly MasterCandidate[];
  /** The master the node's record names, if any. */
  previous?: string;
  /** The node is mid-round with `previous` (its CSR or certificate may be there): never moved. */
  bound?: boolean;
  /** The known master the node has waited for, and since when (ms epoch): its record's masterWait. */
  waiting?: { master: string; since: number };
  /** A known master this round already stopped waiting for (its record's masterFallback). */
  gaveUpOn?: string;
  now: number;
  /** known_master_wait, ms: how long a node waits for a known master its criteria pick; 0: not at all. */
  waitMs: number;
}

/** Why a node did not get the master its criteria picked: that master, and the reason said in the log, the record and the notice. */
export interface Fallback {
  from: string;
  reason: string;
}

export type MasterDecision<M extends MasterCandidate> =
  /** Provision against `master` (kept: the one it had). `fallback`: its criteria picked another, which did not answer in time. */
  | (MasterChoice<M> & { type: "use"; kept?: boolean; fallback?: Fallback })
  /** Wait for `master`: its own (`own`, mid-round) or the known one its criteria pick (`known`, with the deciding criterion). */
  | { type: "wait"; master: string; own: true }
  | { type: "wait"; master: string; own?: false; criterion: string; value: unknown }
  /** No master answers (and none known is waited for): wait for any. */
  | { type: "wait-any"; fallback?: Fallback };

/**
 * The node's master: the one it had, when it answers; waited for when it does not and the node is
 * mid-round. Otherwise the criteria decide over the masters that answer and the known ones that do
 * not, an answering one winning among those that match equally: when a known master that does not
 * answer is the pick, the node waits for it up to `waitMs` from when it began waiting, and past that
 * falls back to the usual rule over the masters that answer (or waits for any, if none does).
 */
export function chooseMaster<M extends MasterCandidate>(o: ChoiceInput<M>): MasterDecision<M> {
  if (o.previous) {
    const kept = o.answering.find((m) => m.identity === o.previous);
    if (kept) return { type: "use", master: kept, kept: true };
    if (o.bound) return { type: "wait", master: o.previous, own: true };
  }
  const answering = byIdentity(o.answering);
  const away = byIdentity(o.known.filter((k) => !o.answering.some((m) => m.identity === k.identity)));
  const usual = (fallback?: Fallback): MasterDecision<M> => {
    const p = pickMaster(o.criteria, o.facts, answering);
    return p ? { type: "use", ...p, ...(fallback ? { fallback } : {}) } : { type: "wait-any", ...(fallback ? { fallback } : {}) };
  };
  for (const fact of o.criteria) {
    const want = o.facts[fact];
    if (want === undefined || want === null) continue;
    const a = answering.find((x) => same(x.facts[fact], want));
    if (a) return { type: "use", master: a, criterion: fact, value: want };
    const k = away.find((x) => same(x.facts[fact], want));
    if (!k) continue;
    // The old rule (known_master_wait 0), or this round gave up on it already: the masters that answer.
    if (o.waitMs <= 0) return usual();
    if (o.gaveUpOn === k.identity) return usual({ from: k.identity, reason: `${k.identity} (its ${fact} ${String(want)}) did not answer in time` });
    const since = o.waiting?.master === k.identity ? o.waiting.since : o.now;
    if (o.now < since + o.waitMs) return { type: "wait", master: k.identity, criterion: fact, value: want };
    return usual({ from: k.identity, reason: `${k.identity} (its ${fact} ${String(want)}) did not answer within ${Math.round(o.waitMs / 1000)}s (known_master_wait)` });
  }
  return usual();
}
