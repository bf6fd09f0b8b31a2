// `npm run bench:ed25519`: what one node signature costs with each backend of src/protocol/ed25519.ts,
// on a real signed reply's bytes, beside `openssl speed ed25519` run on the same machine in the
// same run (the floor: OpenSSL's own loop, no Node in between). docs/bench.md, issue 13.
//
//   node dist/bench/ed25519.js [--count 20000] [--rounds 5]
//
// For each backend: sign, verify with a key parsed once, and verify as a client meeting a node's
// key for the first time (parse + verify), in µs per operation, median over the rounds.

import { spawnSync } from "node:child_process";
import { parseArgs } from "node:util";
import { fastest, libsodiumError, openssl, type Ed25519 } from "../src/protocol/ed25519.js";
import { canonicalJson } from "../src/protocol/canonical.js";
import { generateSigningKey, signMessage } from "../src/protocol/signing.js";
import { REPLY_PROTOCOL } from "../src/protocol/types.js";

const { values: args } = parseArgs({ options: { count: { type: "string", default: "20000" }, rounds: { type: "string", default: "5" } } });
const count = Number(args.count);
const rounds = Number(args.rounds);
if (!Number.isInteger(count) || count < 100 || !Number.isInteger(rounds) || rounds < 1) {
  process.stderr.write("bench:ed25519: --count takes a whole number >= 100, --rounds >= 1\n");
  process.exit(64);
}

const { key } = generateSigningKey("bench-node.example.net");
const { signature: _s, ...body } = signMessage({ protocol: REPLY_PROTOCOL, requestid: "0".repeat(32), sender: key.name, agent: "rpcutil", action: "ping", time: Date.now(), statuscode: 0, statusmsg: "OK", data: { pong: Date.now() } }, key);
const message = Buffer.from(canonicalJson(body));
const raw = Buffer.from(key.publicKey, "base64");

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
function perOp(fn: () => void): number {
  const times: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < count; i++) fn();
    times.push(Number(process.hrtime.bigint() - t0) / 1000 / count);
  }
  return median(times);
}

function measure(ed: Ed25519) {
  const sig = ed.sign(key.privateKey, message);
  const pub = ed.publicKey(raw);
  if (!ed.verify(pub, message, sig)) throw new Error(`${ed.name}: its own signature does not verify`);
  return {
    sign: perOp(() => ed.sign(key.privateKey, message)),
    verify: perOp(() => ed.verify(pub, message, sig)),
    firstVerify: perOp(() => ed.verify(ed.publicKey(raw), message, sig)),
  };
}

/** `openssl speed ed25519`: signs/s and verifies/s -> µs per op. */
function opensslSpeed(): { sign: number; verify: number } | undefined {
  const r = spawnSync("openssl", ["speed", "-seconds", "2", "ed25519"], { encoding: "utf8" });
  const m = /Ed25519\)\s+\S+\s+\S+\s+([\d.]+)\s+([\d.]+)/.exec(r.stdout ?? "");
  return m ? { sign: 1e6 / Number(m[1]), verify: 1e6 / Number(m[2]) } : undefined;
}

const sodium = fastest();
const floor = opensslSpeed();
const o = measure(openssl);
const s = sodium.name === "libsodium" ? measure(sodium) : undefined;
const f = (n: number) => n.toFixed(1);
const lines = [
  `message: a signed ping reply's canonical bytes (${message.length} B); ${count} operations x ${rounds} rounds, median µs per operation`,
  "",
  "| backend | sign | verify (key parsed once) | verify, first sight of the key (parse + verify) |",
  "|---|---:|---:|---:|",
  floor ? `| floor: \`openssl speed ed25519\` | ${f(floor.sign)} | ${f(floor.verify)} | |` : "| floor: `openssl speed ed25519` | n/a | n/a | |",
  `| OpenSSL through node:crypto | ${f(o.sign)} | ${f(o.verify)} | ${f(o.firstVerify)} |`,
  s ? `| libsodium through sodium-native | ${f(s.sign)} | ${f(s.verify)} | ${f(s.firstVerify)} |` : `| libsodium | did not load: ${libsodiumError} | | |`,
];
if (s && floor) {
  lines.push("");
  lines.push(`libsodium over the floor: sign ${(s.sign / floor.sign).toFixed(2)}x, verify ${(s.verify / floor.verify).toFixed(2)}x; a client verifying 10,000 first-seen node keys: ${f((o.firstVerify * 10_000) / 1000)} ms with OpenSSL, ${f((s.firstVerify * 10_000) / 1000)} ms with libsodium (CPU, before spreading over the workers)`);
}
process.stdout.write(`${lines.join("\n")}\n`);
