// Child process of bench/registry.ts: N emulated nodes (the real node pipeline, `muster emulate`'s
// code) behind one connection, each publishing its registration once at start, on the real
// subject, as `muster server` does every interval. Its own process, so nodes never share an event
// loop with the measuring client or the registry daemon.
//
//   node dist/bench/registry-nodes.js <N> <broker-url> <collective>
//
// IPC: sends {type: "ready"} once subscribed, answers {type: "cpu"} with its CPU time so far (ms),
// exits on {type: "stop"} or when the parent goes away.

import { connect } from "@nats-io/transport-node";
import { serveParent } from "./child-ipc.js";
import { startEmulator } from "../src/emulator/emulator.js";
import { generateFleet } from "../src/emulator/fleet.js";
import { createLogger } from "../src/log.js";

const [countText, broker, collective] = process.argv.slice(2);
const count = Number(countText);
if (!Number.isInteger(count) || count < 1 || !broker || !collective) {
  process.stderr.write("usage: registry-nodes.js <N> <broker-url> <collective>\n");
  process.exit(64);
}

const nc = await connect({ servers: broker, name: "bench-registry-nodes", maxReconnectAttempts: 0 });
// interval long enough that registration happens once during a bench; no splay: all at start.
const emu = await startEmulator({ nc, nodes: generateFleet(count), collective, log: createLogger({ level: "warn", name: "bench-registry-nodes" }), registration: { interval: 24 * 3600, splay: false } });
await nc.flush();
serveParent(async () => {
  await emu.stop().catch(() => undefined);
  await nc.close().catch(() => undefined);
});
