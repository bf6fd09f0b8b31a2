import { test } from "node:test";
import assert from "node:assert/strict";
import { decodeReply, encodeReply } from "../../src/protocol/envelope.js";
import { generateSigningKey, signMessage } from "../../src/protocol/signing.js";
import { REPLY_PROTOCOL, type Reply } from "../../src/protocol/types.js";
import { BATCH, SigVerdict, VerifyPool } from "../../src/client/verify.js";
import { eventually } from "../support/collective.js";

// The worker pool gives the same verdicts as inline verification, for every reply of a burst,
// and a pool closed mid-burst still answers every reply (on this thread).

const key = generateSigningKey("n1").key;
const other = generateSigningKey("n2").key;
function reply(i: number, kind: "valid" | "flipped" | "unsigned" | "swapped"): Uint8Array {
  const base: Reply = { protocol: REPLY_PROTOCOL, requestid: "r", sender: `n${i}`, agent: "rpcutil", action: "ping", time: i, statuscode: 0, statusmsg: "OK", data: { pong: i } };
  if (kind === "unsigned") return encodeReply(base);
  const r = signMessage(base, key);
  if (kind === "flipped") r.signature = Buffer.from(Buffer.from(r.signature, "base64").map((b, j) => (j === 3 ? b ^ 1 : b))).toString("base64");
  if (kind === "swapped") r.pubkey = other.publicKey;
  return encodeReply(r);
}
const kinds = ["valid", "flipped", "unsigned", "swapped"] as const;
const expected = { valid: SigVerdict.Valid, flipped: SigVerdict.Bad, unsigned: SigVerdict.Unsigned, swapped: SigVerdict.Bad };

async function burst(pool: VerifyPool, n: number, closeAfter?: number): Promise<void> {
  const got: Promise<void>[] = [];
  for (let i = 0; i < n; i++) {
    const kind = kinds[i % kinds.length]!;
    const raw = reply(i, kind);
    got.push(new Promise((resolve) => pool.check(raw, decodeReply(raw), (v) => (assert.equal(v, expected[kind], `reply ${i} (${kind})`), resolve()))));
    if (i === closeAfter) void pool.close();
  }
  await Promise.all(got);
}

test("the pool's verdicts match inline ones: valid, flipped, unsigned, another key's", async () => {
  const pool = new VerifyPool(2);
  await burst(pool, 8); // before warm(): inline
  assert.equal(pool.counts.inline, 8);
  pool.warm();
  try {
    await eventually(async () => (pool.readyWorkers === 2 ? true : undefined), 30_000, "both workers up");
    // whole batches: each is posted the moment it fills. A part batch waits for the next turn of
    // the event loop, and goes inline if the workers have answered the rest by then (by design: a
    // few replies cost more to post than to check), which a loaded machine made happen here
    await burst(pool, 3 * BATCH);
    await burst(pool, 3 * BATCH);
    assert.equal(pool.counts.workers, 6 * BATCH, "with the workers up, every reply went to them");
    assert.equal(pool.counts.inline, 8);
  } finally {
    await pool.close();
  }
});

test("a pool closed in the middle of a burst still answers every reply", async () => {
  const pool = new VerifyPool(2);
  pool.warm();
  await burst(pool, 300); // some inline while the workers start
  await burst(pool, 600, 250);
  assert.equal(pool.counts.inline + pool.counts.workers, 900);
});

test("with the workers up, a trickle of replies (a few per turn of the event loop, none at the workers) is checked on this thread, with the same verdicts", async () => {
  const pool = new VerifyPool(2);
  pool.warm();
  try {
    await eventually(async () => (pool.readyWorkers === 2 ? true : undefined), 30_000, "both workers up");
    for (let i = 0; i < 8; i++) await burst(pool, 1);
    await burst(pool, 16);
    assert.deepEqual(pool.counts, { inline: 24, workers: 0 });
    await burst(pool, 17);
    assert.equal(pool.counts.workers, 17, "seventeen at once go to the workers");
  } finally {
    await pool.close();
  }
});
