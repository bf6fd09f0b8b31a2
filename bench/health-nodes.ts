// Child process of bench/health.ts: N emulated nodes with a simulated Puppet agent (each with a
// previous run, as a live fleet has) behind one connection, sending heartbeats every 10 s as
// `muster server` does; the first `disabled` of them have Puppet disabled. Its own process, so the
// nodes never share an event loop with what is measured.
//
//   node dist/bench/health-nodes.js <N> <broker-url> <disabled>

import { connect } from "@nats-io/transport-node";
import { serveParent } from "./child-ipc.js";
import { coreAgentFactories } from "../src/agents/builtin.js";
import { startEmulator } from "../src/emulator/emulator.js";
import { generateFleet } from "../src/emulator/fleet.js";
import { SimulatedPuppetFleet } from "../src/emulator/simulated-puppet.js";
import { createLogger } from "../src/log.js";

const [countText, broker, disabledText] = process.argv.slice(2);
const count = Number(countText);
const disabled = Number(disabledText ?? 0);
if (!Number.isInteger(count) || count < 1 || !broker) {
  process.stderr.write("usage: health-nodes.js <N> <broker-url> <disabled>\n");
  process.exit(64);
}
const fleet = generateFleet(count).map((n) => ({ ...n, agents: ["puppet"] }));
const off = new Set(fleet.slice(0, disabled).map((n) => n.identity));
// the last run 10 minutes ago: within Puppet's 30-minute interval, as on a healthy fleet
const sim = new SimulatedPuppetFleet({ runMs: () => 1000, history: true, lastRunAgoS: 600, disabled: (id) => (off.has(id) ? "bench: maintenance" : undefined) });
const nc = await connect({ servers: broker, name: "bench-health-nodes", maxReconnectAttempts: 0 });
const emu = await startEmulator({ nc, nodes: fleet, collective: "muster", log: createLogger({ level: "warn", name: "bench-health-nodes" }), heartbeat: 10, factories: { ...coreAgentFactories, puppet: sim.factory } });
await nc.flush();
serveParent(async () => {
  await emu.stop().catch(() => undefined);
  await nc.close().catch(() => undefined);
});
