// Child process of bench/provision.ts: an emulated fleet with simulated provision, puppetca and
// notify agents (src/emulator/simulated.ts). Prints "ready" once subscribed, then a JSON line with
// the simulated CA's counters when it receives SIGTERM.
import { connect } from "@nats-io/transport-node";
import { startEmulator } from "../src/emulator/emulator.js";
import type { FleetNode } from "../src/emulator/fleet.js";
import { SimulatedCA, simulatedFactories } from "../src/emulator/simulated.js";
import { silentLogger } from "../src/log.js";

const [url, count, masters, runMin, runMax, csrMs] = process.argv.slice(2);
const N = Number(count);
const M = Number(masters);
const regions = Array.from({ length: M }, (_, i) => `region-${i}`);
const nodes: FleetNode[] = [
  ...Array.from({ length: N }, (_, i) => ({ identity: `sim${String(i).padStart(5, "0")}.bench`, facts: { ipaddress: `127.2.${(i >> 8) & 255}.${i & 255}`, ec2_placement_region: regions[i % M]! }, classes: [], agents: ["provision"] })),
  ...regions.map((r, i) => ({ identity: `master${i}.bench`, facts: { ipaddress: `127.3.0.${i + 1}`, ec2_placement_region: r, puppetserver_port: 8140 }, classes: [], agents: ["puppetca"] })),
  { identity: "notifier.bench", facts: {}, classes: [], agents: ["notify"] },
];
const ca = new SimulatedCA();
const nc = await connect({ servers: url!, name: "bench-provision-fleet" });
const emu = await startEmulator({ nc, nodes, collective: "muster", log: silentLogger, factories: simulatedFactories(ca, { puppetRunMs: [Number(runMin), Number(runMax)], csrMs: Number(csrMs) }) });
process.stdout.write("ready\n");
process.once("SIGTERM", async () => {
  const signed = [...ca.certs.values()].filter((c) => c.state === "signed").length;
  const cpu = process.cpuUsage();
  process.stdout.write(`${JSON.stringify({ signed, doubleSigned: ca.doubleSigned, notifications: ca.notifications, cpuS: (cpu.user + cpu.system) / 1e6 })}\n`);
  await emu.stop();
  await nc.drain();
  process.exit(0);
});
