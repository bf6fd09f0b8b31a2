// Child process of bench/run.ts: hosts N nodes behind one NATS connection, either as the muster
// emulator (full pipeline) or as the bare NATS floor (same subscription layout, no muster work).
// It runs in its own process so the nodes never share an event loop with the measuring client.
//
//   node dist/bench/nodes.js <floor|muster|unsigned> <N> <broker-url> <collective> [reply-bytes]
//
// "unsigned" is the emulator with its nodes' signing turned off: muster as it was before issue 13
// signed replies, measured in the same run as the signing emulator.
//
// Talks to the parent over the fork IPC channel: sends {type: "ready"} once subscribed, answers
// {type: "cpu"} with its CPU time so far, exits on {type: "stop"} or when the parent goes away.

import { connect, type NatsConnection } from "@nats-io/transport-node";
import { serveParent } from "./child-ipc.js";
import { generateFleet } from "../src/emulator/fleet.js";
import { startEmulator, type RunningEmulator } from "../src/emulator/emulator.js";
import { benchNodeKey } from "./node-keys.js";
import { fastest } from "../src/protocol/ed25519.js";
import { createLogger } from "../src/log.js";

const [mode, countText, broker, collective, replyBytesText] = process.argv.slice(2);
const count = Number(countText);
const replyBytes = Number(replyBytesText ?? 0);
if ((mode !== "floor" && mode !== "muster" && mode !== "unsigned") || !Number.isInteger(count) || count < 1 || !broker || !collective || !Number.isInteger(replyBytes)) {
  process.stderr.write("usage: nodes.js <floor|muster|unsigned> <N> <broker-url> <collective> [reply-bytes]\n");
  process.exit(64);
}

const enc = new TextEncoder();

/**
 * The floor: the emulator's layout with nothing in between. One connection, one wildcard
 * subscription for "broadcast" (one message in, N replies out, each naming its node) and one for
 * direct node subjects (each message answered once by the node it names). A reply is the node's
 * identity, padded with spaces to `replyBytes` (the size of a muster reply) on the `<collective>`
 * subjects and bare on the `<collective>min` ones: no decode, verify, filter, validation or JSON.
 * On `<collective>sig.broadcast` each reply is also signed by its node's key.
 */
function startFloor(nc: NatsConnection, identities: string[]): void {
  for (const [prefix, size] of [[collective!, replyBytes], [`${collective!}min`, 0]] as const) {
    const replies = identities.map((id) => enc.encode(id.padEnd(size, " ")));
    const byIdentity = new Map<string, Uint8Array>();
    identities.forEach((id, i) => byIdentity.set(id, replies[i]!));
    nc.subscribe(`${prefix}.broadcast.>`, {
      callback: (err, msg) => {
        if (err || !msg.reply) return;
        for (const r of replies) nc.publish(msg.reply, r);
      },
    });
    const nodePrefix = `${prefix}.node.`;
    nc.subscribe(`${prefix}.node.>`, {
      callback: (err, msg) => {
        if (err || !msg.reply) return;
        const r = byIdentity.get(msg.subject.slice(nodePrefix.length));
        if (r) nc.publish(msg.reply, r);
      },
    });
  }
  // The signed floor: as the one-request floor, but each node signs its reply (ed25519, its own
  // key, over its identity and the request's reply subject), the one cost per reply that issue 13
  // adds and no implementation can avoid.
  const ed = fastest();
  const keys = identities.map((id) => benchNodeKey(id));
  const padded = identities.map((id) => id.padEnd(replyBytes - 64, " "));
  nc.subscribe(`${collective!}sig.broadcast.>`, {
    callback: (err, msg) => {
      if (err || !msg.reply) return;
      for (let i = 0; i < keys.length; i++) {
        const body = enc.encode(padded[i]!);
        const sig = ed.sign(keys[i]!.privateKey, Buffer.concat([body, enc.encode(msg.reply)]));
        const out = new Uint8Array(body.length + 64);
        out.set(body);
        out.set(sig, body.length);
        nc.publish(msg.reply, out);
      }
    },
  });
}

async function main(): Promise<void> {
  const nc = await connect({ servers: broker!, name: `bench-${mode}`, maxReconnectAttempts: 0 });
  const fleet = generateFleet(count);
  let emu: RunningEmulator | undefined;
  if (mode === "floor") startFloor(nc, fleet.map((n) => n.identity));
  else emu = await startEmulator({ nc, nodes: fleet, collective: collective!, log: createLogger({ level: "warn", name: "bench-emulator" }), nodeKey: mode === "unsigned" ? "none" : benchNodeKey });
  await nc.flush();

  serveParent(
    async () => {
      await emu?.stop().catch(() => undefined);
      await nc.close().catch(() => undefined);
    },
    { rss: process.memoryUsage.rss() },
  );
}

main().catch((e) => {
  process.stderr.write(`bench nodes (${mode}): ${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});
