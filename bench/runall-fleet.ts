// Child process of bench/runall.ts: an emulated fleet whose puppet agent simulates runs of known,
// per-node lengths (src/emulator/simulated-puppet.ts). Prints "ready" once subscribed; on SIGTERM
// prints a JSON line with what the nodes saw (most runs at once) and exits.
import { connect } from "@nats-io/transport-node";
import { coreAgentFactories } from "../src/agents/builtin.js";
import { startEmulator } from "../src/emulator/emulator.js";
import { SimulatedPuppetFleet } from "../src/emulator/simulated-puppet.js";
import { silentLogger } from "../src/log.js";
import { benchFleet } from "./runall-plan.js";

const [url, count, minMs, maxMs, seed] = process.argv.slice(2);
const plan = benchFleet(Number(count), Number(minMs), Number(maxMs), Number(seed));
const sim = new SimulatedPuppetFleet({ runMs: (id) => plan.runMs.get(id) ?? 1000, history: true });
const nc = await connect({ servers: url!, name: "bench-runall-fleet" });
const emu = await startEmulator({
  nc,
  nodes: plan.ids.map((identity) => ({ identity, facts: {}, classes: [], agents: ["puppet"] })),
  collective: "muster",
  log: silentLogger,
  factories: { ...coreAgentFactories, puppet: sim.factory },
});
process.stdout.write("ready\n");
process.once("SIGTERM", async () => {
  process.stdout.write(`${JSON.stringify({ runs: sim.runs.length, maxRunning: sim.maxRunning })}\n`);
  sim.stop();
  await emu.stop();
  await nc.drain();
  process.exit(0);
});
