import { test } from "node:test";
import assert from "node:assert/strict";
import { checkTarget, ProvenTargets, targetTree, BROADCAST_TARGET } from "../../src/protocol/targets.js";

// Target binding's pure core: the Merkle tree a directed call signs once, the per-copy proofs, and
// the cache of proven paths a process hosting many nodes keeps. The cache must never change a verdict.

const ids = (n: number, prefix = "node") => Array.from({ length: n }, (_, i) => `${prefix}${i}.example.net`);

test("every addressed identity proves against the root; an identity outside the call does not", () => {
  for (const n of [1, 2, 3, 7, 8, 100, 1025]) {
    const tree = targetTree(ids(n));
    for (const id of ids(n)) assert.deepEqual(checkTarget(tree.target, id, id, tree.proof(id)), { ok: true }, `${n} nodes, ${id}`);
    const outsider = "intruder.example.net";
    const v = checkTarget(tree.target, outsider, outsider, tree.proof(ids(n)[0]!));
    assert.equal(v.ok, false);
    assert.throws(() => tree.proof(outsider), /not a target/);
  }
});

test("a copy replayed onto another node's subject is refused: the header, the subject and the proof must all name the node", () => {
  const tree = targetTree(ids(16));
  const [a, b] = ids(16);
  assert.match((checkTarget(tree.target, b!, a!, tree.proof(a!)) as { reason: string }).reason, /addressed to "node0.example.net" arrived on node1/);
  assert.match((checkTarget(tree.target, b!, b!, tree.proof(a!)) as { reason: string }).reason, /not among the identities/);
  assert.match((checkTarget(BROADCAST_TARGET, a!, a!, "") as { reason: string }).reason, /broadcast request arrived on node0/);
  assert.match((checkTarget(tree.target, undefined, undefined, undefined) as { reason: string }).reason, /directed request arrived on a broadcast subject/);
});

/** Every way to spoil a proof for `id` under `tree`. */
function spoiled(tree: ReturnType<typeof targetTree>, id: string, other: string): string[] {
  const proof = tree.proof(id);
  const parts = proof.split(",");
  const flip = (s: string) => (s[0] === "A" ? "B" : "A") + s.slice(1);
  return [
    parts.slice(0, -1).join(","), // truncated
    [...parts, parts[0]].join(","), // one sibling too many
    `${proof},`, // a trailing empty hash
    `${proof},garbage`,
    [...parts.slice(0, -1), flip(parts[parts.length - 1]!)].join(","), // top sibling changed
    [flip(parts[0]!), ...parts.slice(1)].join(","), // bottom sibling changed
    [...parts.slice(0, -1), "c2hvcnQ"].join(","), // a short hash
    tree.proof(other), // another node's path
    Array(41).fill(parts[0]).join(","), // longer than any tree
    "",
  ];
}

test("the proven-path cache gives the verdict the full check gives, for honest and spoiled proofs, in any order", () => {
  const all = ids(300);
  const tree = targetTree(all);
  const cache = new ProvenTargets();
  const other = targetTree(ids(300, "else"));
  // Honest copies first, so that later spoiled copies meet proven hashes partway up their paths.
  const cases: Array<[string, string, string]> = [];
  for (const id of all) cases.push([tree.target, id, tree.proof(id)]);
  for (const id of all.slice(0, 40)) for (const bad of spoiled(tree, id, all[(all.indexOf(id) + 1) % all.length]!)) cases.push([tree.target, id, bad]);
  for (const id of all.slice(0, 20)) cases.push([other.target, id, tree.proof(id)]); // a proof under another root
  let hits = 0;
  for (const [target, id, proof] of cases) {
    const full = checkTarget(target, id, id, proof);
    const cached = checkTarget(target, id, id, proof, cache);
    assert.deepEqual(cached.ok, full.ok, `${id} ${proof.slice(0, 50)}: cached ${JSON.stringify(cached)} vs full ${JSON.stringify(full)}`);
    if (full.ok) hits++;
  }
  assert.equal(hits, all.length, "exactly the honest copies pass");
});

test("with the cache, a directed call's copies cost about two hashes each instead of log2(N)", async () => {
  // Counted, not timed: SHA-256 digests made while checking 4,096 copies.
  const crypto = await import("node:crypto");
  const all = ids(4096);
  const tree = targetTree(all);
  const proofs = all.map((id) => tree.proof(id));
  const count = (cache?: ProvenTargets) => {
    const orig = crypto.Hash.prototype.digest;
    let n = 0;
    crypto.Hash.prototype.digest = function (this: unknown, ...a: unknown[]) {
      n++;
      return (orig as (...x: unknown[]) => unknown).apply(this, a);
    } as typeof orig;
    try {
      all.forEach((id, i) => assert.ok(checkTarget(tree.target, id, id, proofs[i], cache).ok));
    } finally {
      crypto.Hash.prototype.digest = orig;
    }
    return n;
  };
  const full = count();
  const cached = count(new ProvenTargets());
  assert.equal(full, 4096 * 13, "12 levels above each leaf, plus the leaf");
  assert.ok(cached < 4096 * 3, `cached: ${cached} digests for 4,096 copies`);
});

test("the cache is bounded: old roots are forgotten, and a full root stops remembering but still checks", () => {
  const cache = new ProvenTargets(2, 10);
  const trees = [0, 1, 2].map((k) => targetTree(ids(64, `r${k}-`)));
  for (const t of trees) for (const id of ids(64, `r${trees.indexOf(t)}-`)) assert.ok(checkTarget(t.target, id, id, t.proof(id), cache).ok);
  const roots = (cache as unknown as { roots: Map<string, Map<string, string>> }).roots;
  assert.equal(roots.size, 2);
  for (const m of roots.values()) assert.ok(m.size <= 10);
});
