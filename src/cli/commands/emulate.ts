import { Command } from "commander";
import { MusterError } from "../../errors.js";

export function emulateCommand(): Command {
  return new Command("emulate")
    .description("Host many virtual nodes in one process (for trying muster and for benchmarks)")
    .option("--fleet <file>", "YAML/JSON: nodes: [{identity, facts: {...}, classes: [...], agents: [...]}]")
    .option("--count <n>", "generate N nodes instead (node-00001.example.net ...)")
    .option("--broker <url>", "NATS broker URL(s)")
    .option("--config <file>", "client config (for the broker and collective)")
    .option("-T, --target <collective>", "collective the nodes join")
    .option("--registration <seconds>", "publish registration every N seconds (0: off)", "0")
    .option("--heartbeat <seconds>", "each node's heartbeat every N seconds (0: off)", "10")
    .option("--log-level <level>", "log level", "warn")
    .addHelpText("after", "\nPrints a line containing 'ready' once every node answers discovery, then serves until SIGTERM/SIGINT.")
    .action(async (o: { fleet?: string; count?: string; broker?: string; config?: string; target?: string; registration: string; heartbeat: string; logLevel: string }) => {
      const [{ closeConnection, connectBroker }, { MusterClient }, { generateFleet, loadFleet }, { startEmulator }, { createLogger }, { loadClientConfig, resolveBrokerSettings }] = await Promise.all([
        import("../../broker/connect.js"),
        import("../../client/client.js"),
        import("../../emulator/fleet.js"),
        import("../../emulator/emulator.js"),
        import("../../log.js"),
        import("../config.js"),
      ]);
      if (!!o.fleet === !!o.count) throw new MusterError("MUSTER_USAGE", "give exactly one of --fleet FILE or --count N");
      const count = o.count ? Number(o.count) : 0;
      if (o.count && (!Number.isInteger(count) || count < 1 || count > 200_000)) throw new MusterError("MUSTER_USAGE", "--count takes a whole number from 1 to 200000");
      const nodes = o.fleet ? loadFleet(o.fleet) : generateFleet(count);
      const cfg = loadClientConfig(o.config);
      const collective = o.target ?? cfg.collective;
      const log = createLogger({ level: o.logLevel, name: "muster-emulate" });
      const broker = resolveBrokerSettings({ flag: o.broker, clientConfig: o.config });
      const brokers = broker.servers;
      const nc = await connectBroker({ servers: brokers, from: broker.from, name: "muster-emulate", log, persistent: true, tls: broker.tls });
      const interval = Number(o.registration);
      const emu = await startEmulator({ nc, nodes, collective, log, registration: interval > 0 ? { interval, splay: true } : undefined, heartbeat: Number(o.heartbeat) || 0 });
      // "ready" means every node answers a real discovery round, not merely that we subscribed.
      const client = await MusterClient.connect({ brokers, collective, name: "muster-emulate-check", tls: broker.tls });
      const want = new Set(nodes.map((n) => n.identity));
      for (let attempt = 1; ; attempt++) {
        const found = await client.discover({ timeoutMs: 5000, idleMs: 500 });
        const missing = [...want].filter((id) => !found.includes(id));
        if (missing.length === 0) break;
        if (attempt >= 5) throw new MusterError("MUSTER_TIMEOUT", `${missing.length} emulated nodes did not answer discovery (first: ${missing[0]})`);
      }
      await client.close();
      // Handlers before the ready line: a supervisor may stop us the moment it reads it.
      const stopping = new Promise<void>((resolve) => {
        process.once("SIGTERM", () => resolve());
        process.once("SIGINT", () => resolve());
      });
      process.stdout.write(`emulating ${nodes.length} nodes in collective ${collective}: ready\n`);
      await stopping;
      await emu.stop();
      await closeConnection(nc);
    });
}
