import { parentPort } from "node:worker_threads";
import { decodeReply } from "../protocol/envelope.js";
import { PublicKeyCache, verifyMessage } from "../protocol/signing.js";
import { SigVerdict, type VerifyBatch, type VerifyResult } from "./verify.js";

// A verification worker (client/verify.ts VerifyPool): gets a batch of raw replies packed into one
// buffer, answers one verdict byte per reply. Each worker keeps its own parsed keys.

const keys = new PublicKeyCache();

parentPort!.on("message", (b: VerifyBatch) => {
  const bytes = new Uint8Array(b.buf);
  const verdicts = new Uint8Array(b.offsets.length - 1);
  for (let i = 0; i < verdicts.length; i++) {
    try {
      const r = decodeReply(bytes.subarray(b.offsets[i], b.offsets[i + 1]));
      verdicts[i] = r.signature === undefined && r.pubkey === undefined ? SigVerdict.Unsigned : verifyMessage(r, keys) ? SigVerdict.Valid : SigVerdict.Bad;
    } catch {
      verdicts[i] = SigVerdict.Bad;
    }
  }
  parentPort!.postMessage({ id: b.id, verdicts } satisfies VerifyResult, [verdicts.buffer]);
});
