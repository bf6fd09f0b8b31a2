import { createHash } from "node:crypto";

// What a request is addressed to, inside what the client signs (docs/protocol.md#target-binding).
//
// A broadcast request carries `target: "broadcast"` and is accepted only on its broadcast subject.
// A directed request goes to N nodes' subjects; signing it N times would cost one signature per node
// on the client and one verification per node on a process hosting many nodes (the emulator), so
// the client signs once over the root of a Merkle tree of the addressed identities
// (`target: "direct:<root>"`), and each copy carries, outside the signed bytes, the identity it is
// for and that identity's path to the root (headers Muster-Target, Muster-Proof). A node accepts a
// directed request only when the path leads from its own identity to the signed root: a copy
// captured on one node's subject cannot be replayed onto a node the caller did not address.
// Pure: no I/O.

export const BROADCAST_TARGET = "broadcast";
export const DIRECT_PREFIX = "direct:";
export const TARGET_HEADER = "Muster-Target";
export const PROOF_HEADER = "Muster-Proof";
/** A tree over 2^40 identities is deeper than any call: longer proofs are refused unread. */
export const MAX_PROOF_LENGTH = 40;

const LEAF = Buffer.from([0]);
const NODE = Buffer.from([1]);

function leafHash(identity: string): Buffer {
  return createHash("sha256").update(LEAF).update(identity, "utf8").digest();
}

/** Sorted pairs: a path needs no left/right bits, and a leaf's position does not matter. */
function nodeHash(a: Buffer, b: Buffer): Buffer {
  const [x, y] = Buffer.compare(a, b) <= 0 ? [a, b] : [b, a];
  return createHash("sha256").update(NODE).update(x).update(y).digest();
}

export interface TargetTree {
  /** The request's signed `target` field. */
  target: string;
  /** The proof for one addressed identity, as the Muster-Proof header value ("" for a single node). */
  proof(identity: string): string;
}

/** The Merkle tree over the identities a directed call addresses (deduplicated). */
export function targetTree(identities: readonly string[]): TargetTree {
  const ids = [...new Set(identities)];
  if (ids.length === 0) throw new Error("a directed request needs at least one target");
  const index = new Map(ids.map((id, i) => [id, i]));
  const levels: Buffer[][] = [ids.map(leafHash)];
  while (levels[levels.length - 1]!.length > 1) {
    const below = levels[levels.length - 1]!;
    const up: Buffer[] = [];
    for (let i = 0; i < below.length; i += 2) up.push(i + 1 < below.length ? nodeHash(below[i]!, below[i + 1]!) : below[i]!); // an odd one out rises unchanged
    levels.push(up);
  }
  const root = levels[levels.length - 1]![0]!;
  return {
    target: DIRECT_PREFIX + root.toString("base64url"),
    proof(identity: string): string {
      let i = index.get(identity);
      if (i === undefined) throw new Error(`${identity} is not a target of this request`);
      const path: string[] = [];
      for (let l = 0; l < levels.length - 1; l++) {
        const sibling = levels[l]![i ^ 1];
        if (sibling) path.push(sibling.toString("base64url"));
        i >>= 1;
      }
      return path.join(",");
    },
  };
}

export type TargetVerdict = { ok: true } | { ok: false; reason: string };

/**
 * Hashes already proven to lead to a signed root, with the rest of the path that led there. A
 * process hosting many nodes (the emulator) checks N copies of one directed request, whose paths
 * share every upper level: a path that reaches a proven hash with the same remaining siblings must
 * reach the root, so each copy costs about two hashes instead of log2(N). A real node checks one
 * copy per request and passes none. Verdicts are the same with or without it.
 */
export class ProvenTargets {
  private readonly roots = new Map<string, Map<string, string>>();
  constructor(
    private readonly maxRoots = 4,
    private readonly maxPerRoot = 1 << 17,
  ) {}
  /** The proven hashes under one root (latin1 of the hash -> the path after it), newest roots kept. */
  under(root: string): Map<string, string> {
    let m = this.roots.get(root);
    if (m) return m;
    m = new Map();
    this.roots.set(root, m);
    if (this.roots.size > this.maxRoots) this.roots.delete(this.roots.keys().next().value!);
    return m;
  }
  remember(under: Map<string, string>, hash: Buffer, rest: string): void {
    if (under.size < this.maxPerRoot) under.set(hash.toString("latin1"), rest);
  }
}

/**
 * Does a request with signed `target` that arrived on a broadcast subject (`identity` undefined)
 * or on `identity`'s direct subject, with the given header values, address this node?
 */
export function checkTarget(target: string, identity: string | undefined, header: string | undefined, proof: string | undefined, proven?: ProvenTargets): TargetVerdict {
  if (identity === undefined) {
    return target === BROADCAST_TARGET ? { ok: true } : { ok: false, reason: "a directed request arrived on a broadcast subject" };
  }
  if (!target.startsWith(DIRECT_PREFIX)) return { ok: false, reason: `a ${target === BROADCAST_TARGET ? "broadcast" : "malformed-target"} request arrived on ${identity}'s direct subject` };
  if (header !== identity) return { ok: false, reason: `request addressed to ${JSON.stringify(header ?? "nobody")} arrived on ${identity}'s subject` };
  const rootText = target.slice(DIRECT_PREFIX.length);
  const root = Buffer.from(rootText, "base64url");
  if (root.length !== 32) return { ok: false, reason: "request target is not a 32-byte root" };
  const text = proof ?? "";
  const path = text ? text.split(",") : [];
  if (path.length > MAX_PROOF_LENGTH) return { ok: false, reason: `target proof longer than ${MAX_PROOF_LENGTH}` };
  const known = proven?.under(rootText);
  const climbed: Array<[Buffer, number]> = []; // each hash on the way up, and where the rest of the path starts in `text`
  let h = leafHash(identity);
  let at = 0;
  let reached = false;
  for (const p of path) {
    if (known?.get(h.toString("latin1")) === text.slice(at)) {
      reached = true;
      break;
    }
    climbed.push([h, at]);
    const sibling = Buffer.from(p, "base64url");
    if (sibling.length !== 32) return { ok: false, reason: "target proof holds a hash that is not 32 bytes" };
    h = nodeHash(h, sibling);
    at += p.length + 1;
  }
  if (!reached && !h.equals(root)) return { ok: false, reason: `${identity} is not among the identities the request was signed for` };
  if (known) for (const [hash, from] of climbed) proven!.remember(known, hash, text.slice(from));
  return { ok: true };
}
